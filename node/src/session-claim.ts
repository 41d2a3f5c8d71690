/**
 * One claim of a session, as a {@link Lock} sees it: the same interface as
 * the connection of a single claim, so that a session hands out the one
 * Lock type users already know. Every call goes to the session that
 * carries the stream.
 */

import type { ClaimLink } from "./lock.js";
import type { SessionListener } from "./session.js";

/** What a stream claim asks of its session. */
export interface StreamOwner {
  readonly validUntil: number;
  poll(): void;
  proclaimStream(stream: number, value: Uint8Array): number;
  /** Sends RELEASE; the session calls {@link StreamClaim.released} when it is done. */
  releaseStream(stream: number): void;
}

const ignore: SessionListener = {
  onWaiting: () => {},
  onGranted: () => {},
  onLost: () => {},
  onFailed: () => {},
  onProclaimed: () => {},
};

export class StreamClaim implements ClaimLink {
  /** Replaced by the Lock it is handed to. */
  listener: SessionListener = ignore;
  private releasing: Promise<void> | undefined;
  private done: (() => void) | undefined;
  private finished = false;
  /** The deadline when the claim ended by itself: it stays there, as a single claim's does. */
  private frozenUntil: number | undefined;

  constructor(
    private readonly owner: StreamOwner,
    readonly stream: number,
    readonly valued: boolean,
  ) {}

  get validUntil(): number {
    return this.frozenUntil ?? this.owner.validUntil;
  }

  poll(): void {
    this.owner.poll();
  }

  proclaim(value: Uint8Array): number {
    return this.owner.proclaimStream(this.stream, value);
  }

  /** Resolves once the server answered RELEASED, the session ended, or the release wait ran out. */
  release(): Promise<void> {
    if (this.releasing === undefined) {
      // Made before the RELEASE goes out: an ended session answers at once.
      this.releasing = new Promise((resolve) => {
        this.done = resolve;
      });
      if (this.finished) this.done?.();
      else this.owner.releaseStream(this.stream);
    }
    return this.releasing;
  }

  /** @internal The claim is lost (told next): its deadline stops moving with the session's. */
  ended(): void {
    this.frozenUntil ??= this.owner.validUntil;
  }

  /** @internal The session is done with the stream. */
  released(): void {
    this.finished = true;
    this.done?.();
  }
}
