/** A held lock: token, validity, loss notification and release. */

import {
  LockLostError,
  LockReleasedError,
  type LostKind,
  type MonolockError,
  NoValueError,
  withoutPrefix,
} from "./errors.js";
import { type Logger, log } from "./logger.js";
import type { SessionListener } from "./session.js";
import { type ClaimValue, validateValue } from "./validate.js";

/**
 * What a Lock drives: the connection of a single claim (session.ts), or a
 * stream of a session (session-claim.ts). @internal
 */
export interface ClaimLink {
  /** Receives the claim's events; the Lock installs its own. */
  listener: SessionListener;
  /** Whether the claim was sent with a value: only such a claim may proclaim. */
  readonly valued: boolean;
  /** The validity deadline on the `performance.now()` clock. */
  readonly validUntil: number;
  /** Lets time pass now: a deadline already reached is decided (and told) here. */
  poll(): void;
  /** Sends a PROCLAIM; its number, or 0 when the claim no longer holds. */
  proclaim(value: Uint8Array): number;
  /** Lets go; resolves once the server has the lock back (or a bounded wait passed). */
  release(): Promise<void>;
}

/** Where a lock stands. */
export type LockState = "held" | "lost" | "released";

/** Options of {@link Lock.proclaim}. */
export interface ProclaimOptions {
  /**
   * Stops waiting for the server's acknowledgement: the promise rejects
   * with the signal's reason. The PROCLAIM may still have been sent, so
   * the value may still change.
   */
  signal?: AbortSignal;
}

/** A {@link Lock.proclaim} call waiting for the ack of its PROCLAIM. */
interface ProclaimWaiter {
  readonly seq: number;
  /** Resolves, or rejects with `error`, and stops listening to the caller's signal. */
  settle(error?: Error): void;
}

/**
 * A lock granted by the server. It stays held while its connection lives and
 * heartbeats are acknowledged; release it with {@link Lock.release} (or
 * `await using`).
 *
 * Loss is reported, never repaired, and reported first: when the server
 * sends an ERROR, the connection fails, or {@link Lock.validUntil} passes
 * without a newer acknowledgement, the lock becomes `lost`,
 * {@link Lock.signal} aborts with a {@link LockLostError} and
 * {@link Lock.lost} resolves with it, before anything else happens. After a
 * timeout the connection is then kept open (no more heartbeats, late acks
 * ignored) until you release the lock or the server's lease has surely run
 * out (the last acknowledged send + lease), so that the server cannot hand
 * the lock on before you were told. Acquire again to get a new token.
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
   * {@link LockLostError} on loss (at the validity deadline at the latest,
   * before the connection is closed), with a {@link LockReleasedError} on
   * release. Hand it to `fetch`, streams or timers doing the guarded work.
   * It is a push signal: it fires from the client's timer, or from the first
   * read of {@link Lock.held}, {@link Lock.state} or {@link Lock.remainingMs}
   * past the deadline, whichever comes first. Code that checks in a
   * synchronous loop (no event-loop turns) should read `held`, which
   * reads the clock.
   */
  get signal(): AbortSignal {
    // Made at the first read: an AbortSignal costs more to make than the
    // rest of a Lock, and many locks are never asked for one. Read after
    // the end, it is made aborted, with the reason it would have had.
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.currentState === "lost") this.controller.abort(this.lostError);
      else if (this.currentState === "released") this.controller.abort(releasedError());
    }
    return this.controller.signal;
  }
  /**
   * Resolves with the {@link LockLostError} when the lock is lost, together
   * with {@link Lock.signal}. Never rejects, and never settles if the lock is
   * released first.
   */
  readonly lost: Promise<LockLostError>;
  private currentState: LockState = "held";
  /** The signal's controller, once {@link Lock.signal} was read. */
  private controller: AbortController | undefined;
  /** The loss, once lost. */
  private lostError: LockLostError | undefined;
  private resolveLost!: (error: LockLostError) => void;
  private releasing: Promise<void> | undefined;
  /** Proclaims awaiting their ack; made at the first one, as most locks never proclaim. */
  private proclaimWaiters: ProclaimWaiter[] | undefined;

  /** @internal Locks come from {@link Client.acquire}; the session is granted. */
  constructor(
    private readonly session: ClaimLink,
    name: string,
    token: bigint,
    leaseMs: number,
    private readonly logger?: Logger,
  ) {
    this.name = name;
    this.token = token;
    this.leaseMs = leaseMs;
    this.lost = new Promise((resolve) => {
      this.resolveLost = resolve;
    });
    session.listener = {
      onWaiting: () => {},
      onGranted: () => {},
      onLost: (kind, error) => this.markLost(kind, error),
      onFailed: () => {},
      onProclaimed: (seq) => this.settleProclaims(seq),
    };
  }

  /**
   * `"held"`, `"lost"` or `"released"`. Reads the clock: once
   * {@link Lock.validUntil} has passed it is `"lost"` (and the signal has
   * aborted), even if the client's timer has not fired yet.
   */
  get state(): LockState {
    if (this.currentState === "held") this.session.poll();
    return this.currentState;
  }

  /** Whether the lock is still held: not lost, not released, deadline not passed. */
  get held(): boolean {
    return this.state === "held";
  }

  /**
   * The moment the grant stops being safe to rely on, on the
   * `performance.now()` clock: the send time of the last acknowledged
   * ACQUIRE/HEARTBEAT plus 0.8 × lease; valid strictly before it. It moves
   * forward with every ack, and stays where it was once the lock is lost.
   */
  get validUntil(): number {
    return this.session.validUntil;
  }

  /** Milliseconds left until {@link Lock.validUntil} (0 once passed, lost or released). */
  get remainingMs(): number {
    if (this.state !== "held") return 0;
    return Math.max(0, this.session.validUntil - performance.now());
  }

  /**
   * Releases the lock by closing its connection (a lock of a session: by
   * sending RELEASE, answered by RELEASED). {@link Lock.signal} aborts
   * first. A held lock is handed back: the server gives it to the next waiter
   * at once, and this resolves once the server has closed its side too (so
   * the lock is free there), or after at most min(0.8 × lease, 1 s) if it
   * does not answer. A lost lock's connection is closed at once. Either way
   * no socket or timer of this lock is left. Idempotent.
   */
  release(): Promise<void> {
    if (this.releasing === undefined) {
      // A deadline that already passed is a loss, and is told as one.
      if (this.state === "held") {
        this.currentState = "released";
        this.controller?.abort(releasedError());
        if (this.proclaimWaiters !== undefined) this.rejectProclaims(new LockReleasedError());
        if (this.logger !== undefined) {
          log(this.logger, "debug", `monolock: released ${JSON.stringify(this.name)}, token ${this.token}`);
        }
      }
      this.releasing = this.session.release();
    }
    return this.releasing;
  }

  /**
   * Replaces the value this lock was claimed with (the `value` option of
   * {@link Client.acquire}: a string is sent as UTF-8, at most
   * `MAX_VALUE_LEN` bytes), keeping its token. Resolves once the server
   * has acknowledged it: from then on the admin listing shows it. Its reply
   * refreshes the lease as a heartbeat's does. A value proclaimed while an
   * earlier one waits to be sent replaces it; both resolve together.
   *
   * Rejects at once, with nothing sent, with a {@link NoValueError} for a
   * lock claimed without a value, with a {@link ValueTooLongError} for a
   * value over 1024 bytes, and with the lock's {@link LockLostError} or a
   * {@link LockReleasedError} once it is lost or released, and with the
   * reason of `options.signal` if it has aborted. If the lock is lost or
   * released (or the signal aborts) before the acknowledgement, it rejects
   * with that error then: it never waits on a lock that has ended.
   */
  async proclaim(value: ClaimValue, options: ProclaimOptions = {}): Promise<void> {
    if (!this.session.valued) throw new NoValueError(this.name);
    const bytes = validateValue(value) ?? new Uint8Array(0); // an empty value clears it
    if (this.state !== "held") throw this.endedError();
    options.signal?.throwIfAborted();
    const seq = this.session.proclaim(bytes);
    if (seq === 0) throw this.endedError(); // the deadline passed just now
    return this.proclaimed(seq, options.signal);
  }

  /** Same as {@link Lock.release}; makes `await using lock = ...` work. */
  declare [Symbol.asyncDispose]: () => Promise<void>;

  /** Waits for the ack of PROCLAIM `seq`, the lock's end, or the caller's abort. */
  private proclaimed(seq: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      const onAbort = (): void => {
        this.proclaimWaiters = this.proclaimWaiters?.filter((w) => w !== waiter);
        waiter.settle(signal?.reason);
      };
      const waiter: ProclaimWaiter = {
        seq,
        settle: (error) => {
          signal?.removeEventListener("abort", onAbort);
          if (error === undefined) resolve();
          else reject(error);
        },
      };
      this.proclaimWaiters = [...(this.proclaimWaiters ?? []), waiter];
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** The server has every PROCLAIM up to `seq`: their calls resolve. */
  private settleProclaims(seq: number): void {
    const waiters = this.proclaimWaiters ?? [];
    this.proclaimWaiters = waiters.filter((w) => w.seq > seq);
    for (const w of waiters) if (w.seq <= seq) w.settle();
  }

  /** The lock ended: no PROCLAIM will be acknowledged, so no call may wait on. */
  private rejectProclaims(error: Error): void {
    const waiters = this.proclaimWaiters ?? [];
    this.proclaimWaiters = undefined;
    for (const w of waiters) w.settle(error);
  }

  /** Why a lock that is no longer held cannot proclaim. */
  private endedError(): MonolockError {
    return this.lostError ?? new LockReleasedError();
  }

  private markLost(kind: LostKind, cause: MonolockError): void {
    if (this.currentState !== "held") return;
    this.currentState = "lost";
    const error = new LockLostError(kind, cause.message, cause);
    this.lostError = error;
    // Every way of learning it says so now, before the connection closes.
    this.controller?.abort(error);
    this.resolveLost(error);
    this.rejectProclaims(error);
    const what = `lock ${JSON.stringify(this.name)} (token ${this.token})`;
    log(this.logger, "info", `monolock: ${what} lost: ${withoutPrefix(cause.message)}`);
  }
}

/**
 * The reason of a released lock's signal, made without a stack trace:
 * capturing one (V8 walks the async callers too) cost more than all the
 * rest of a release, and would only show where `release()` was called,
 * while the error already says what happened.
 */
function releasedError(): LockReleasedError {
  const limit = Error.stackTraceLimit;
  try {
    Error.stackTraceLimit = 0;
  } catch {
    return new LockReleasedError(); // frozen intrinsics: with a stack, then
  }
  try {
    return new LockReleasedError();
  } finally {
    Error.stackTraceLimit = limit;
  }
}

/**
 * What `console.log(lock)` and `util.inspect(lock)` show: name, token and
 * state, not the socket underneath. Through the registered symbol, so that
 * nothing imports `node:util`.
 */
Object.defineProperty(Lock.prototype, Symbol.for("nodejs.util.inspect.custom"), {
  value: function inspectLock(this: Lock, _depth: number, options: object, inspect: (v: unknown, o: object) => string) {
    return `Lock ${inspect({ name: this.name, token: this.token, state: this.state }, options)}`;
  },
  writable: true,
  configurable: true,
});

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
