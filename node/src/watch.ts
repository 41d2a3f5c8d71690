/**
 * A watch of one lock name (protocol version 3): its holders with their
 * values, its queue, and every change, in the server's order. It
 * reconnects by itself, resuming where it left off, and follows the
 * active server of an HA cell.
 */

import type * as tls from "node:tls";
import { formatAddress, leaderIndex, type ServerAddress } from "./address.js";
import { backoffDelay } from "./backoff.js";
import { nextTransitionMs, type Observation, observationOf, sameObservation } from "./election.js";
import { ConnectionError, type MonolockError, NotActiveError, ServerError, withoutPrefix } from "./errors.js";
import { type Logger, log } from "./logger.js";
import { startTimer, type Timer } from "./timers.js";
import { WatchConnection, type WatchConnectionListener } from "./watch-connection.js";
import { WatchCore, type WatchState } from "./watch-core.js";

/** Options of {@link Client.watch}, {@link Client.observe} and {@link Client.leader}. */
export interface WatchOptions {
  /**
   * Aborting it before the first picture is known rejects with the
   * signal's reason and closes the watch; {@link Client.observe}'s
   * iteration ends when it aborts.
   */
  signal?: AbortSignal;
}

/** Options of {@link Watch.changes} and {@link Watch.observations}. */
export interface WatchIterationOptions {
  /** The iteration ends (the watch keeps running) when it aborts. */
  signal?: AbortSignal;
}

/** @internal What a watch needs of its client. */
export interface WatchSettings {
  readonly servers: readonly ServerAddress[];
  readonly tls: tls.ConnectionOptions | undefined;
  readonly connectTimeoutMs: number;
  readonly leaseMs: number;
  readonly name: { readonly bytes: Uint8Array; readonly text: string };
  readonly logger: Logger | undefined;
  /**
   * Opens the watch's stream on a session instead of a connection of its
   * own (protocol version 4); throws when the session can carry no more.
   * Absent: a connection per watch, to `servers`.
   */
  readonly open?: ((core: WatchCore, listener: WatchConnectionListener) => WatchLink) | undefined;
}

/** What carries a watch: a connection of its own, or a stream of a session. */
export interface WatchLink {
  /** Ends it without reporting it; resolves once it is gone. */
  close(): Promise<void>;
}

/**
 * Follows one lock name ({@link Client.watch}). Its picture is vouched for
 * only until the send of its last acknowledged heartbeat plus 0.8 × lease,
 * as a lock's is: after that, and whenever it is between connections,
 * {@link Watch.state} says `known: false` and {@link Watch.leader}
 * `"unknown"`, never the last holder it saw. It runs until
 * {@link Watch.close}, or an error that retrying cannot cure
 * ({@link Watch.ended}).
 */
export class Watch implements AsyncDisposable {
  /** The watched name. */
  readonly name: string;
  /**
   * Resolves when the watch has ended: with the error that retrying cannot
   * cure (a terminal ERROR, such as not authorized), or with undefined
   * after {@link Watch.close}. Never rejects.
   */
  readonly ended: Promise<MonolockError | undefined>;
  private readonly core: WatchCore;
  /** The current connection, or the last one while between connections. */
  private conn: WatchLink | undefined;
  private sleep: Timer | undefined;
  /** Tells of the end of the picture's validity. */
  private expiry: Timer | undefined;
  private closing: Promise<void> | undefined;
  private failure: MonolockError | undefined;
  private resolveEnded!: (error: MonolockError | undefined) => void;
  /** The next server to try, as an index into the list (taken modulo its length). */
  private next = 0;
  /** Sleeps since a connection was last vouched for. */
  private attempt = 0;
  /** Counts the changes: a waiter that saw one number wakes at the next. */
  private version = 0;
  private readonly waiters = new Set<() => void>();

  /** @internal Watches come from {@link Client.watch}. */
  constructor(private readonly s: WatchSettings) {
    this.name = s.name.text;
    this.core = new WatchCore(s.leaseMs);
    this.ended = new Promise((resolve) => {
      this.resolveEnded = resolve;
    });
    this.connect();
  }

  /**
   * The current picture. `known` is decided at the call, on the clock: a
   * watch whose server went silent reads unknown at its deadline even if
   * nothing has run since.
   */
  state(): WatchState {
    return this.core.state(performance.now());
  }

  /** The picture read as an election: the first holder is the leader. */
  leader(): Observation {
    const now = performance.now();
    return observationOf(this.core.state(now), now);
  }

  /** Why the watch ended, if it ended for an error (undefined while it runs, and after close()). */
  get error(): MonolockError | undefined {
    return this.failure;
  }

  /**
   * The picture now, then again after every change: each event, each
   * acknowledgement (which moves `validUntil`), and the moment it stops
   * being vouched for. A slow reader misses nothing that still holds: each
   * state is the one at that moment. Ends when the signal aborts or the
   * watch is closed; throws the watch's error if it ends for one.
   */
  async *changes(options: WatchIterationOptions = {}): AsyncGenerator<WatchState, void, undefined> {
    const { signal } = options;
    while (this.running(signal)) {
      const seen = this.version;
      yield this.state();
      await this.changeAfter(seen, undefined, signal);
    }
  }

  /**
   * The leadership now, then whenever it changes (a new leader, a new
   * value, a new count of candidates, no leader, a hold, unknown). Ends and
   * throws as {@link Watch.changes} does.
   */
  async *observations(options: WatchIterationOptions = {}): AsyncGenerator<Observation, void, undefined> {
    const { signal } = options;
    let last: Observation | undefined;
    while (this.running(signal)) {
      const seen = this.version;
      const now = performance.now();
      const st = this.core.state(now);
      const o = observationOf(st, now);
      if (last === undefined || !sameObservation(last, o)) {
        last = o;
        yield o;
        continue; // look again: the state may have moved meanwhile
      }
      await this.changeAfter(seen, nextTransitionMs(st, o, now), signal);
    }
  }

  /** Ends the watch and its connection; resolves once the socket is closed. Idempotent. */
  close(): Promise<void> {
    this.finish(undefined);
    return this.closing ?? Promise.resolve();
  }

  /** Same as {@link Watch.close}; makes `await using watch = ...` work. */
  declare [Symbol.asyncDispose]: () => Promise<void>;

  /** Whether an iteration goes on; throws the watch's error once it ended for one. */
  private running(signal: AbortSignal | undefined): boolean {
    if (this.failure !== undefined) throw this.failure;
    return this.closing === undefined && !signal?.aborted;
  }

  /** Resolves at the first change after `seen`, the end, the signal's abort, or after `ms`. */
  private changeAfter(seen: number, ms: number | undefined, signal: AbortSignal | undefined): Promise<void> {
    if (this.version !== seen || this.closing !== undefined || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = (): void => {
        this.waiters.delete(wake);
        timer?.cancel();
        signal?.removeEventListener("abort", wake);
        resolve();
      };
      // Unreferenced: the watch's socket, or its sleep, keeps the process alive.
      const timer = ms === undefined ? undefined : startTimer(ms, wake, false);
      this.waiters.add(wake);
      signal?.addEventListener("abort", wake, { once: true });
    });
  }

  private changed(): void {
    this.version++;
    for (const wake of [...this.waiters]) wake();
  }

  /** A connection to the next server; the WATCH resumes from the picture. */
  private connect(): void {
    this.sleep = undefined;
    if (this.s.open !== undefined) {
      this.openStream(this.s.open);
      return;
    }
    const { servers } = this.s;
    const address = servers[this.next % servers.length] as ServerAddress;
    this.next++;
    this.debug(`connecting to ${formatAddress(address)}`);
    const settings = { ...this.s, address, name: this.s.name.bytes };
    try {
      this.conn = new WatchConnection(settings, this.core, {
        onChange: () => this.onChange(),
        onEnd: (error, vouched) => this.onEnd(address, error, vouched),
      });
    } catch (err) {
      // Bad TLS options and the like throw synchronously: terminal.
      const cause = err instanceof Error ? err : new Error(String(err));
      this.finish(new ConnectionError(cause.message, "connect", { cause }, false));
    }
  }

  /** A stream on the watch's session, resuming from the picture; the session's end ends the watch. */
  private openStream(open: NonNullable<WatchSettings["open"]>): void {
    try {
      this.conn = open(this.core, {
        onChange: () => this.onChange(),
        onEnd: (error, vouched, final) => {
          if (final) {
            this.core.disconnected();
            this.finish(error);
          } else {
            this.onEnd(undefined, error, vouched);
          }
        },
      });
    } catch (err) {
      this.finish(err instanceof ConnectionError ? err : new ConnectionError(String(err), "open", undefined, false));
    }
  }

  /** The picture changed; its new validity is told when it ends. */
  private onChange(): void {
    this.expiry?.cancel();
    const until = this.core.validUntil;
    this.expiry = until === undefined ? undefined : startTimer(until - performance.now(), () => this.changed(), false);
    this.changed();
  }

  /**
   * A connection ended: a passive server of an HA cell sends the watch to
   * the active one at once, a terminal error ends it, anything else is
   * retried on the next server after a backoff (from its start again once
   * a server answered).
   */
  private onEnd(address: ServerAddress | undefined, error: MonolockError, vouched: boolean): void {
    this.core.disconnected();
    this.expiry?.cancel();
    this.changed();
    if (vouched) this.attempt = 0;
    if (error instanceof NotActiveError) {
      const leader = leaderIndex(this.s.servers, error.reason);
      if (leader !== undefined) {
        this.next = leader;
        this.connect(); // no backoff: a passive answer is no failure
        return;
      }
    } else if (error instanceof ServerError && !error.temporary) {
      this.finish(error);
      return;
    }
    const ms = backoffDelay(this.attempt++);
    const why = withoutPrefix(error.message);
    const what = address === undefined ? "session stream" : `connection to ${formatAddress(address)}`;
    this.debug(`${what} ended (${why}); reconnecting in ${Math.round(ms)} ms`);
    // Referenced: a running watch keeps the process alive between connections too.
    this.sleep = startTimer(ms, () => this.connect(), true);
  }

  private finish(error: MonolockError | undefined): void {
    if (this.closing !== undefined) return;
    this.failure = error;
    this.sleep?.cancel();
    this.expiry?.cancel();
    // The last connection, ended or not: its socket may still be closing.
    this.closing = this.conn?.close() ?? Promise.resolve();
    this.core.disconnected();
    this.changed();
    this.resolveEnded(error);
  }

  private debug(message: string): void {
    if (this.s.logger !== undefined)
      log(this.s.logger, "debug", `monolock: watch ${JSON.stringify(this.name)}: ${message}`);
  }
}

/**
 * Installed on the prototype as Lock's is, so that loading this module
 * never fails on a Node without `Symbol.asyncDispose`.
 */
Object.defineProperty(Watch.prototype, Symbol.asyncDispose ?? Symbol.for("nodejs.asyncDispose"), {
  value: function asyncDispose(this: Watch): Promise<void> {
    return this.close();
  },
  writable: true,
  configurable: true,
});
