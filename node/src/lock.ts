/** A held lock: token, validity, loss notification and release. */

import { LockLostError, LockReleasedError, type LostKind, type MonolockError } from "./errors.js";
import type { Session } from "./session.js";

/** Where a lock stands. */
export type LockState = "held" | "lost" | "released";

/**
 * A lock granted by the server. It stays held while its connection lives and
 * heartbeats are acknowledged; release it with {@link Lock.release} (or
 * `await using`).
 *
 * Loss is reported, never repaired: when the server sends an ERROR, the
 * connection fails, or no heartbeat is acknowledged in time, the lock becomes
 * `lost`, {@link Lock.signal} aborts with a {@link LockLostError} and
 * {@link Lock.lost} resolves with it. Acquire again to get a new token.
 */
export class Lock implements AsyncDisposable {
  /** The lock name. */
  readonly name: string;
  /**
   * The fencing token of this grant (uint64). Pass it to the guarded
   * resource, which rejects writes with a token smaller than one it has seen.
   */
  readonly token: bigint;
  /** The lease this lock's connection was opened with, in milliseconds. */
  readonly leaseMs: number;
  /**
   * Aborts when the lock stops protecting anything: with a
   * {@link LockLostError} on loss, with a {@link LockReleasedError} on
   * release. Hand it to `fetch`, streams or timers doing the guarded work.
   */
  readonly signal: AbortSignal;
  /**
   * Resolves with the {@link LockLostError} when the lock is lost. Never
   * rejects, and never settles if the lock is released first.
   */
  readonly lost: Promise<LockLostError>;
  private currentState: LockState = "held";
  private readonly controller = new AbortController();
  private resolveLost!: (error: LockLostError) => void;
  private releasing: Promise<void> | undefined;

  /** @internal Locks come from {@link Client.acquire}; the session is granted. */
  constructor(
    private readonly session: Session,
    name: string,
    token: bigint,
    leaseMs: number,
  ) {
    this.name = name;
    this.token = token;
    this.leaseMs = leaseMs;
    this.signal = this.controller.signal;
    this.lost = new Promise((resolve) => {
      this.resolveLost = resolve;
    });
    session.listener = {
      onWaiting: () => {},
      onGranted: () => {},
      onEnd: (kind, error) => this.markLost(kind, error),
    };
  }

  /** `"held"`, `"lost"` or `"released"`. */
  get state(): LockState {
    return this.currentState;
  }

  /** Whether the lock is still held (not lost, not released, deadline not passed). */
  get held(): boolean {
    return this.currentState === "held" && this.remainingMs > 0;
  }

  /**
   * The moment the grant stops being safe to rely on, on the
   * `performance.now()` clock: the send time of the last acknowledged
   * ACQUIRE/HEARTBEAT plus 0.8 × lease. It moves forward with every ack.
   */
  get validUntil(): number {
    return this.session.validUntil;
  }

  /** Milliseconds left until {@link Lock.validUntil} (0 once passed, lost or released). */
  get remainingMs(): number {
    if (this.currentState !== "held") return 0;
    return Math.max(0, this.session.validUntil - performance.now());
  }

  /**
   * Releases the lock by closing its connection; the server hands it to the
   * next waiter at once. {@link Lock.signal} aborts first. Resolves once the
   * server has closed its side too (so the lock is free there), or after at
   * most min(0.8 × lease, 1 s) if it does not answer; either way no socket
   * or timer of this lock is left. Idempotent, also after loss.
   */
  release(): Promise<void> {
    if (this.releasing === undefined) {
      if (this.currentState === "held") {
        this.currentState = "released";
        this.controller.abort(new LockReleasedError());
        this.releasing = this.session.release();
      } else {
        this.releasing = this.session.close();
      }
    }
    return this.releasing;
  }

  /** Same as {@link Lock.release}; makes `await using lock = ...` work. */
  declare [Symbol.asyncDispose]: () => Promise<void>;

  private markLost(kind: LostKind, cause: MonolockError): void {
    if (this.currentState !== "held") return;
    this.currentState = "lost";
    const error = new LockLostError(kind, cause.message.replace(/^monolock: /, ""), cause);
    // Stop the guarded work at once; report through `lost` once the socket
    // is closed, so nothing of this lock is left when it resolves.
    this.controller.abort(error);
    void this.session.close().then(() => this.resolveLost(error));
  }
}

/**
 * Installed on the prototype rather than declared in the class body, so that
 * loading this module never fails on a Node without `Symbol.asyncDispose`
 * (before 18.18 / 20.4): there it uses the symbol Node's polyfill registers.
 */
Object.defineProperty(Lock.prototype, Symbol.asyncDispose ?? Symbol.for("nodejs.asyncDispose"), {
  value: function asyncDispose(this: Lock): Promise<void> {
    return this.release();
  },
  writable: true,
  configurable: true,
});
