/**
 * The watch core: a watch's picture of one lock name, built from the
 * server's EVENTs, and how long it is vouched for, with no sockets and no
 * clock (the caller passes the time of each input, in milliseconds on one
 * monotonic clock). `spec/vectors/watch.json` runs against this class.
 *
 * It checks what the server promises: every live event is the one after
 * the last (same epoch, seq + 1), and an epoch changes only with a
 * snapshot. Each WATCHING acknowledges the one request in flight (the
 * WATCH, then each HEARTBEAT) and vouches for the picture until that
 * request's send plus the client timeout (0.8 × lease), as a lock's
 * acknowledgements do. A core that sees the server break a promise
 * vouches for nothing, and the connection must end.
 */

import { SHARED, WATCH } from "./constants.js";
import { clientTimeoutMs } from "./heartbeat.js";
import type { WatchEvent } from "./watch-frames.js";

/** One holder of a watched name. */
export interface Holder {
  /** Its fencing token. */
  readonly token: bigint;
  /** A shared claim (a reader, or a permit of a semaphore). */
  readonly shared: boolean;
  /** A semaphore's limit; 0 for none. */
  readonly limit: number;
  /** Its certificate identity, or its address when it is anonymous. */
  readonly identity: string;
  /** Its value (empty for none). */
  readonly value: Uint8Array;
  /**
   * Set while the holder's connection is gone but the server keeps its
   * place (a reset, a lock delay): it may still act until then, on the
   * `performance.now()` clock.
   */
  readonly heldBackUntil: number | undefined;
}

/** One claim in a watched name's queue: a candidate, in an election. */
export interface Waiter {
  /** Its place: claims are granted in the order of arrival. */
  readonly arrival: bigint;
  readonly shared: boolean;
  readonly limit: number;
  readonly identity: string;
  readonly value: Uint8Array;
}

/** A watch's picture of its name at one moment. */
export interface WatchState {
  /**
   * The picture is vouched for now. When false, the rest is the last
   * picture that was, and must not be acted on.
   */
  readonly known: boolean;
  /**
   * When the picture stops being vouched for, on the `performance.now()`
   * clock (the send of the last acknowledged request + 0.8 × lease);
   * undefined when nothing vouches for it.
   */
  readonly validUntil: number | undefined;
  /** In grant order. */
  readonly holders: readonly Holder[];
  /** In queue order. */
  readonly waiters: readonly Waiter[];
  /**
   * Nobody is granted the name before it (`performance.now()` clock): the
   * server waits out holders it does not know, after a restart or a
   * failover. Undefined when it never was blocked.
   */
  readonly blockedUntil: number | undefined;
  /** The picture includes the name's history up to this event. */
  readonly epoch: bigint;
  readonly seq: bigint;
}

/** An input the core refuses: the connection must end, and nothing is vouched for. */
export interface WatchFault {
  /** `gap`: an event that is not the one after the last; `unasked`: a WATCHING that answers no request in flight, or names another point. */
  readonly kind: "gap" | "unasked";
  readonly detail: string;
}

/** The state of a name as the events told it. */
interface Picture {
  epoch: bigint;
  seq: bigint;
  holders: Holder[];
  waiters: Waiter[];
  blockedUntil: number | undefined;
}

/** The sans-IO core of one watch, across its connections. */
export class WatchCore {
  private picture: Picture = { epoch: 0n, seq: 0n, holders: [], waiters: [], blockedUntil: undefined };
  /** A whole snapshot (or a resume of one) has been taken. */
  private started = false;
  /** The snapshot being read, until its end. */
  private next: Picture | undefined;
  private readonly timeoutMs: number;
  private lastSend = 0;
  private pending = false;
  private valid: number | undefined;

  constructor(leaseMs: number) {
    this.timeoutMs = clientTimeoutMs(leaseMs);
  }

  /** Where the picture's history is: a WATCH resumes from here. */
  get epoch(): bigint {
    return this.picture.epoch;
  }

  get seq(): bigint {
    return this.picture.seq;
  }

  /** A whole snapshot has been taken and no other is being read: a WATCHING of (epoch, seq) would be taken. */
  get complete(): boolean {
    return this.whole;
  }

  /** Whether a request awaits its WATCHING. */
  get inFlight(): boolean {
    return this.pending;
  }

  /** When the last request was sent. */
  get lastSendAt(): number {
    return this.lastSend;
  }

  /** When the picture stops being vouched for; undefined: it is not. */
  get validUntil(): number | undefined {
    return this.valid;
  }

  /** Records a request (WATCH or HEARTBEAT) sent at `now`. */
  sent(now: number): void {
    this.lastSend = now;
    this.pending = true;
  }

  /** Applies an EVENT that arrived at `now`. */
  event(e: WatchEvent, now: number): WatchFault | undefined {
    const fault = this.apply(e, now);
    if (fault !== undefined) this.valid = undefined;
    return fault;
  }

  /**
   * Takes the WATCHING that answers the request in flight: the picture is
   * whole up to (epoch, seq), and vouched for until the request's send
   * plus the client timeout.
   */
  watching(epoch: bigint, seq: bigint): WatchFault | undefined {
    const { picture } = this;
    if (!this.pending || !this.whole || epoch !== picture.epoch || seq !== picture.seq) {
      this.valid = undefined;
      const detail = `a WATCHING that does not answer the request in flight: epoch ${epoch} seq ${seq} for the picture at ${picture.epoch}/${picture.seq}`;
      return { kind: "unasked", detail };
    }
    this.pending = false;
    this.valid = this.lastSend + this.timeoutMs;
    return undefined;
  }

  /** The connection ended: nothing in flight, nothing vouched for; the picture stays, for a resume. */
  disconnected(): void {
    this.pending = false;
    this.valid = undefined;
    this.next = undefined;
  }

  /** Whether the picture is vouched for at `now`. */
  known(now: number): boolean {
    return this.whole && this.valid !== undefined && now < this.valid;
  }

  /** The picture at `now`, as a copy. */
  state(now: number): WatchState {
    const { picture } = this;
    return {
      known: this.known(now),
      validUntil: this.valid,
      holders: [...picture.holders],
      waiters: [...picture.waiters],
      blockedUntil: picture.blockedUntil,
      epoch: picture.epoch,
      seq: picture.seq,
    };
  }

  /** A whole snapshot has been taken, and no other is being read. */
  private get whole(): boolean {
    return this.started && this.next === undefined;
  }

  private apply(e: WatchEvent, now: number): WatchFault | undefined {
    if (this.next !== undefined) return this.applySnapshot(this.next, e, now);
    if (e.kind === WATCH.KINDS.snapshot) {
      this.next = { epoch: e.epoch, seq: e.seq, holders: [], waiters: [], blockedUntil: after(now, e.ms) };
      return undefined;
    }
    const { picture } = this;
    if (!this.started || e.epoch !== picture.epoch || e.seq !== picture.seq + 1n) {
      return gap(`epoch ${e.epoch} seq ${e.seq} after epoch ${picture.epoch} seq ${picture.seq}`);
    }
    picture.seq = e.seq;
    return applyLive(picture, e, now);
  }

  /** An event inside a snapshot: its holders and waiters with the snapshot's own (epoch, seq), then its end. */
  private applySnapshot(next: Picture, e: WatchEvent, now: number): WatchFault | undefined {
    if (e.epoch !== next.epoch || e.seq !== next.seq) return gap("a snapshot's event numbered apart from it");
    switch (e.kind) {
      case WATCH.KINDS.holder:
        next.holders.push(holderOf(e, now));
        return undefined;
      case WATCH.KINDS.waiter:
        next.waiters.push(waiterOf(e));
        return undefined;
      case WATCH.KINDS.snapshotEnd:
        this.picture = next;
        this.started = true;
        this.next = undefined;
        return undefined;
      default:
        return gap(`event kind ${e.kind} inside a snapshot`);
    }
  }
}

/** A live event, the one after the last. Entries are replaced, never changed: states share them. */
function applyLive(p: Picture, e: WatchEvent, now: number): WatchFault | undefined {
  const K = WATCH.KINDS;
  switch (e.kind) {
    case K.granted:
      p.waiters = p.waiters.filter((w) => w.arrival !== e.arrival);
      p.holders.push(holderOf(e, now));
      return undefined;
    case K.value:
      p.holders = p.holders.map((h) => (h.token === e.token ? { ...h, value: e.value } : h));
      return undefined;
    case K.ended:
      p.holders = p.holders.filter((h) => h.token !== e.token);
      return undefined;
    case K.heldBack:
      p.holders = p.holders.map((h) => (h.token === e.token ? { ...h, heldBackUntil: now + e.ms } : h));
      return undefined;
    case K.queued:
      p.waiters = queue(p.waiters, waiterOf(e));
      return undefined;
    case K.left:
      p.waiters = p.waiters.filter((w) => w.arrival !== e.arrival);
      return undefined;
    case K.blocked:
      // A longer block extends it, a shorter one does not shorten it.
      if (p.blockedUntil === undefined || now + e.ms > p.blockedUntil) p.blockedUntil = now + e.ms;
      return undefined;
    default:
      return gap(`event kind ${e.kind} outside a snapshot`);
  }
}

/** A waiter joins the queue, or (already in it) changes its value in place. */
function queue(waiters: Waiter[], w: Waiter): Waiter[] {
  const i = waiters.findIndex((x) => x.arrival === w.arrival);
  if (i < 0) return [...waiters, w];
  return waiters.map((x, j) => (j === i ? w : x));
}

function gap(detail: string): WatchFault {
  return { kind: "gap", detail: `an event out of order: ${detail}` };
}

/** `now + ms`, or undefined for 0 (no hold, no block). */
function after(now: number, ms: number): number | undefined {
  return ms > 0 ? now + ms : undefined;
}

function holderOf(e: WatchEvent, now: number): Holder {
  return {
    token: e.token,
    shared: e.mode === SHARED.MODE_SHARED,
    limit: e.limit,
    identity: e.identity,
    value: e.value,
    heldBackUntil: after(now, e.ms),
  };
}

function waiterOf(e: WatchEvent): Waiter {
  return {
    arrival: e.arrival,
    shared: e.mode === SHARED.MODE_SHARED,
    limit: e.limit,
    identity: e.identity,
    value: e.value,
  };
}
