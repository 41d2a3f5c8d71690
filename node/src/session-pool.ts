/**
 * An opt-in pool of sessions for callers that take many short locks: a few
 * connections instead of one per claim.
 */

import { TooManyStreamsError } from "./errors.gen.js";
import { errorForCode } from "./errors.js";
import type { Lock } from "./lock.js";
import type { Session, SessionAcquireOptions, SessionOptions } from "./lock-session.js";
import type { LockName } from "./validate.js";

/** Options of {@link Client.sessionPool}. */
export interface SessionPoolOptions {
  /** The lease of every session of the pool (default: the client's). */
  leaseMs?: number;
  /** At most this many sessions at once, 1 or more (default 4). */
  maxSessions?: number;
}

/** Default {@link SessionPoolOptions.maxSessions}. */
const DEFAULT_MAX_SESSIONS = 4;

/**
 * A few {@link Session}s that take claims on behalf of their caller: each
 * claim goes to the first live session with room (fewer open streams than
 * its server's `max_streams`); a new session is opened only when none has
 * room, up to `maxSessions`; a session that ended is dropped and replaced
 * on the next claim. A session that has used every stream id (ids are never
 * reused) takes no new claim and leaves the pool's count, so a new one can
 * open; it is closed once its last claim has ended. Nothing is retried: a
 * claim refused or lost is told as on a session.
 *
 * **The trade-off: claims on one session share its fate.** A session is one
 * connection and one lease, so one lost connection (a network blip, a
 * missed heartbeat, a server that ends it) loses every claim it carries at
 * once, where claims on their own connections ({@link Client.acquire})
 * would fail one by one. In exchange a claim costs no connection, no
 * handshake and no heartbeat of its own. Use it for many short locks; keep
 * a long-lived or critical lock on its own connection.
 */
export class SessionPool implements AsyncDisposable {
  private readonly sessions: Session[] = [];
  /** Live sessions that have used every stream id: closed once their last claim ends. */
  private readonly retiring: Session[] = [];
  private opening: Promise<Session> | undefined;
  private closed = false;
  private readonly maxSessions: number;

  /** @internal Made by {@link Client.sessionPool}. */
  constructor(
    private readonly openSession: (options: SessionOptions) => Promise<Session>,
    private readonly options: SessionPoolOptions = {},
  ) {
    const max = options.maxSessions ?? DEFAULT_MAX_SESSIONS;
    if (!Number.isInteger(max) || max < 1) throw new TypeError("monolock: maxSessions must be a whole number >= 1");
    this.maxSessions = max;
  }

  /** The sessions open now (live or not yet noticed dead). */
  get size(): number {
    return this.sessions.length;
  }

  /** {@link Session.acquire} on a session with room. */
  acquire(name: LockName, options: SessionAcquireOptions = {}): Promise<Lock> {
    return this.claim((s) => s.acquire(name, options));
  }

  /** {@link Session.tryAcquire} on a session with room. */
  tryAcquire(name: LockName, options: Omit<SessionAcquireOptions, "onWaiting"> = {}): Promise<Lock> {
    return this.claim((s) => s.tryAcquire(name, options));
  }

  /** Closes every session: their locks are released (see {@link Session.close}). Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    const opening = this.opening;
    this.opening = undefined;
    const all = [...this.sessions.splice(0), ...this.retiring.splice(0)];
    if (opening !== undefined) all.push(...(await opening.then((s) => [s]).catch(() => [])));
    await Promise.all(all.map((s) => s.close()));
  }

  /** Same as {@link SessionPool.close}; makes `await using pool = ...` work. */
  declare [Symbol.asyncDispose]: () => Promise<void>;

  /**
   * Runs `take` on a live session with room, opened if need be; dead ones
   * are dropped. `take` runs in the same turn as the room was found, so its
   * OPEN counts before another claim looks.
   */
  private async claim(take: (session: Session) => Promise<Lock>): Promise<Lock> {
    for (;;) {
      if (this.closed) throw new TypeError("monolock: the session pool is closed");
      for (let i = this.sessions.length - 1; i >= 0; i--) {
        const s = this.sessions[i];
        // Not closed here: one lost by its deadline keeps its connection
        // until the server's lease surely ran out, and then closes itself.
        if (s !== undefined && !s.alive) {
          this.sessions.splice(i, 1);
          if (s.idsLeft === 0 && !s.signal.aborted) this.retiring.push(s);
        }
      }
      for (let i = this.retiring.length - 1; i >= 0; i--) {
        const s = this.retiring[i];
        if (s === undefined || (!s.signal.aborted && s.openStreams > 0)) continue;
        this.retiring.splice(i, 1);
        if (!s.signal.aborted) void s.close(); // its last claim has ended
      }
      const room = this.sessions.find((s) => s.openStreams < s.maxStreams);
      if (room !== undefined) return take(room);
      if (this.opening === undefined) {
        if (this.sessions.length >= this.maxSessions) {
          const why = `all ${this.maxSessions} sessions of the pool carry as many streams as their server allows`;
          throw errorForCode(TooManyStreamsError.CODE, why, "client");
        }
        // One opening at a time: concurrent claims wait for it and share it.
        const opening = this.openSession({ leaseMs: this.options.leaseMs });
        this.opening = opening;
        try {
          const session = await opening;
          if (this.closed) {
            await session.close();
            continue;
          }
          this.sessions.push(session);
        } finally {
          if (this.opening === opening) this.opening = undefined;
        }
      } else {
        await this.opening.catch(() => {}); // its error goes to the caller that opened it
      }
    }
  }
}

Object.defineProperty(SessionPool.prototype, Symbol.asyncDispose ?? Symbol.for("nodejs.asyncDispose"), {
  value: function asyncDispose(this: SessionPool): Promise<void> {
    return this.close();
  },
  writable: true,
  configurable: true,
});
