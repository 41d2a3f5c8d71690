/** The Client: configuration plus acquire / tryAcquire. */

import type * as tls from "node:tls";
import { formatAddress, leaderIndex, parseAddress, type ServerAddress } from "./address.js";
import { DEFAULT_SERVER } from "./constants.js";
import type { Cause } from "./core.js";
import { type Observation, Term } from "./election.js";
import {
  AcquireAbortedError,
  AcquireTimeoutError,
  type CertificateError,
  type ConnectionError,
  type InvalidLeaseError,
  type InvalidModeError,
  type LimitMismatchError,
  type LockBusyError,
  type MonolockError,
  type NotActiveError,
  type NotAuthorizedError,
  type NotMonolockError,
  ServerError,
  type SessionUnsupportedError,
  type SharedUnsupportedError,
  type UnsupportedVersionError,
  type ValueTooLongError,
  type ValueUnsupportedError,
  withoutPrefix,
} from "./errors.js";
import { Lock } from "./lock.js";
import { Session as LockSession, type SessionOptions } from "./lock-session.js";
import { type Logger, log } from "./logger.js";
import { outcomeOf, RetryPlan } from "./plan.js";
import { Session } from "./session.js";
import { SessionPool, type SessionPoolOptions } from "./session-pool.js";
import { startTimer, type Timer } from "./timers.js";
import { type TlsSessions, tlsSessionsOf } from "./tls-resume.js";
import { type ClaimValue, checkLease, type LockName, type ValidClaim, validateAcquire } from "./validate.js";
import { Watch, type WatchOptions } from "./watch.js";

/** Settings of a {@link Client}. */
export interface ClientOptions {
  /**
   * One or more servers, as `"host:port"`, `"[::1]:port"` or a bare host
   * (`"host"`, `"[::1]"`, `"::1"`: port 7117). Default `"127.0.0.1:7117"`.
   * Every acquisition starts at the first and moves to the next one after
   * each failed attempt.
   */
  servers?: string | readonly string[];
  /**
   * Lease of every connection in milliseconds, 1..4294967295 (default
   * 10000). The server drops a session silent for this long; the client
   * heartbeats every lease/4 and gives a lock up after 0.8 × lease without
   * an acknowledgement (telling you first, then keeping the connection until
   * release or the last acknowledged send + lease).
   */
  leaseMs?: number;
  /** Time allowed to open one connection (TCP and TLS), default 5000 ms. */
  connectTimeoutMs?: number;
  /**
   * `true` to connect with TLS using Node's defaults, or options for
   * `tls.connect` (CA, client certificate for mutual TLS, ...).
   * `host`/`port` are taken from `servers`.
   */
  tls?: boolean | tls.ConnectionOptions;
  /**
   * Where to log: an object with `debug`, `info` and `warn` methods, each
   * called with one string (`console` fits, and so do pino, winston and
   * bunyan). A failed attempt that is retried is logged at `warn`, a lost
   * lock at `info`, the rest at `debug`. Default: no logging.
   */
  logger?: Logger;
}

/** Options of one {@link Client.acquire} or {@link Client.tryAcquire} call. */
export interface AcquireOptions {
  /** Aborting it gives up a pending acquisition and closes its connection. */
  signal?: AbortSignal;
  /**
   * Give up after this many milliseconds (with {@link AcquireTimeoutError}).
   * Absent: wait as long as it takes.
   */
  timeoutMs?: number;
  /** Overrides the client's `leaseMs` for this lock. */
  leaseMs?: number;
  /**
   * Called with the lock name each time the server queues this claim
   * (WAITING), again after every re-queue. Must not throw.
   */
  onWaiting?: (name: string) => void;
  /**
   * `true` for a shared claim: it holds the lock together with any other
   * shared claims, and never while an exclusive claim holds it. Claims are
   * granted strictly in arrival order, so a shared claim queued behind a
   * waiting exclusive one waits for it (readers never starve a writer).
   * Each shared holder gets its own fencing token and is told of a loss as
   * an exclusive holder is. Default `false`: exclusive.
   *
   * A shared claim is sent as a protocol version 2 ACQUIRE; a server that
   * speaks version 1 only refuses it with {@link SharedUnsupportedError}.
   */
  shared?: boolean;
  /**
   * Makes the claim a semaphore of `limit` permits: a shared claim (implies
   * `shared: true`) of at most `limit` holders at once, 1..65535 (anything
   * else is refused before sending with {@link InvalidModeError}, 0x19).
   * Every claimant of one name must state the same limit while any shared
   * claim is on it; the server refuses a different one with
   * {@link LimitMismatchError} (0x1a). Absent with `shared: true`: no bound.
   */
  limit?: number;
  /**
   * The claim's value: who holds the lock and how to reach it (an address,
   * a URL, a small JSON object), which the server shows while the claim
   * waits and while it holds (the admin listing's `value`). A Uint8Array
   * (a Buffer is one) is sent as it is, a string as UTF-8; at most 1024
   * bytes (`MAX_VALUE_LEN`), a longer one is refused before sending
   * with {@link ValueTooLongError} (0x1b). An empty value is no value.
   * Works with `shared` and `limit`.
   *
   * A claim with a value is sent as a protocol version 3 ACQUIRE; a server
   * that predates values refuses it with {@link ValueUnsupportedError}.
   */
  value?: ClaimValue;
}

/** Options of one {@link Client.campaign} call: those of an exclusive acquire. */
export type CampaignOptions = Omit<AcquireOptions, "shared" | "limit" | "value">;

/** Default lease, in milliseconds. */
export const DEFAULT_LEASE_MS = 10_000;
/** Default connect timeout, in milliseconds. */
export const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;

/**
 * A monolock client. It holds configuration only: every acquisition opens
 * its own connection, so one Client can be shared freely.
 *
 * @example
 * ```ts
 * const client = new Client({ servers: ["127.0.0.1:7117"] });
 * await using lock = await client.acquire("jobs/nightly", { timeoutMs: 5000 });
 * await doWork({ token: lock.token, signal: lock.signal });
 * ```
 */
export class Client {
  private readonly servers: readonly ServerAddress[];
  private readonly leaseMs: number;
  private readonly connectTimeoutMs: number;
  private readonly tlsOptions: tls.ConnectionOptions | undefined;
  /** With TLS, the latest TLS session of each server, which a claim's connection of its own resumes. */
  private readonly tlsSessions: TlsSessions | undefined;
  private readonly logger: Logger | undefined;

  /**
   * Checks the options; throws `TypeError` on a malformed server address or
   * connect timeout. The lease is checked by each acquisition, which rejects
   * with {@link InvalidLeaseError} (0x17) like the server would.
   * `new Client()` talks to `127.0.0.1:7117`.
   */
  constructor(options: ClientOptions = {}) {
    const { servers = DEFAULT_SERVER } = options;
    const list = typeof servers === "string" ? [servers] : [...servers];
    if (list.length === 0) throw new TypeError("monolock: no servers given");
    this.servers = list.map(parseAddress);
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    if (!(this.connectTimeoutMs > 0)) throw new TypeError("monolock: connectTimeoutMs must be a number > 0");
    this.tlsOptions = options.tls === true ? {} : options.tls === false ? undefined : options.tls;
    this.tlsSessions = this.tlsOptions ? tlsSessionsOf(this) : undefined;
    this.logger = options.logger;
  }

  /**
   * Acquires `name`, waiting in the server's FIFO queue until granted.
   * Exclusive by default; `{ shared: true }` makes it a shared claim (a
   * reader lock) and `{ limit: n }` one of n permits of a semaphore.
   *
   * While waiting, temporary errors and connection failures lead to a new
   * connection (and a new place at the end of the queue) on the next server,
   * after a backoff (unreachable servers are skipped at once until a whole
   * pass failed), until `timeoutMs` passes. A server that does not speak
   * monolock, or whose TLS handshake failed on a certificate, is not asked
   * again. A passive server of an HA cell ({@link NotActiveError}, 0x03)
   * starts the backoff over with a short pause, and the next attempt goes to
   * the active server its reason names when that is one of `servers`.
   * Rejects with a {@link ServerError} subclass (terminal code, or a
   * check failed before sending), a {@link ConnectionError} when no server is
   * left to ask ({@link NotMonolockError}, {@link CertificateError}),
   * {@link AcquireTimeoutError} or {@link AcquireAbortedError}.
   */
  acquire(name: LockName, options: AcquireOptions = {}): Promise<Lock> {
    return this.start(name, options, "wait");
  }

  /**
   * Acquires `name` only if it is free right now. Makes one pass over the
   * servers, moving on after one that cannot be reached or answers with a
   * temporary error; never sleeps or re-queues. Rejects with
   * {@link LockBusyError} if it is held, or with the last server's error: a
   * {@link ConnectionError} (none could be reached) or a {@link ServerError}
   * subclass. Takes `shared`, `limit` and `value` as {@link Client.acquire} does: a
   * shared claim is busy when an exclusive claim holds or waits for the lock,
   * a semaphore's when all its permits are taken.
   */
  tryAcquire(name: LockName, options: Omit<AcquireOptions, "onWaiting"> = {}): Promise<Lock> {
    return this.start(name, options, "try");
  }

  /**
   * Campaigns to lead `name`: waits until this client is elected, as
   * {@link Client.acquire} waits for the lock (candidates are elected in
   * the order they campaigned, and it retries as acquire does), and
   * resolves with the {@link Term}, a lock claimed with `value`. The value
   * says how followers reach the leader (an address, a URL); it must not be
   * empty, else this rejects with a `TypeError` and nothing is sent.
   * Replace it with `term.proclaim()`, end the term with `term.resign()`.
   */
  campaign(name: LockName, value: ClaimValue, options: CampaignOptions = {}): Promise<Term> {
    if ((typeof value === "string" || value instanceof Uint8Array) && value.length === 0) {
      const why = "a leader's value must not be empty (followers reach the leader by it)";
      return Promise.reject(new TypeError(`monolock: campaign for ${JSON.stringify(String(name))}: ${why}`));
    }
    const claim = { ...options, value, shared: undefined, limit: undefined };
    return this.start(name, claim, "wait", Term) as Promise<Term>;
  }

  /**
   * Starts following `name` (protocol version 3): resolves with the
   * {@link Watch} once its first picture is known. Rejects with the error
   * that keeps the server from answering (a terminal {@link ServerError}
   * such as {@link NotAuthorizedError}, or {@link UnsupportedVersionError}
   * from a server that predates watches), with the signal's reason when it
   * aborts first, or at once with the name's or lease's {@link ServerError}
   * (`origin: "client"`). Unreachable servers are retried as a watch
   * retries (backoff over the list) until the signal aborts. The watch
   * runs until its `close()`.
   */
  async watch(name: LockName, options: WatchOptions = {}): Promise<Watch> {
    const valid = validateAcquire(name, this.leaseMs);
    options.signal?.throwIfAborted();
    const watch = new Watch({
      servers: this.servers,
      tls: this.tlsOptions,
      connectTimeoutMs: this.connectTimeoutMs,
      leaseMs: this.leaseMs,
      name: valid,
      logger: this.logger,
    });
    try {
      for await (const state of watch.changes({ signal: options.signal })) if (state.known) return watch;
    } catch (err) {
      await watch.close();
      throw err;
    }
    await watch.close();
    throw options.signal?.reason;
  }

  /**
   * Follows the leadership of `name`: yields an {@link Observation} as soon
   * as the first is known, then one whenever it changes (a new leader, a
   * new value, a new count of candidates, no leader, a hold, and
   * `"unknown"` as soon as the watch stops being vouched for). Ends when
   * the signal aborts or the loop breaks, closing its watch; throws what
   * {@link Client.watch} rejects with, and a watch's terminal error.
   */
  async *observe(name: LockName, options: WatchOptions = {}): AsyncGenerator<Observation, void, undefined> {
    const watch = await this.watch(name, options);
    try {
      yield* watch.observations({ signal: options.signal });
    } finally {
      await watch.close();
    }
  }

  /** Who leads `name` now: one watch, its first picture, closed. Rejects as {@link Client.watch} does. */
  async leader(name: LockName, options: WatchOptions = {}): Promise<Observation> {
    const watch = await this.watch(name, options);
    try {
      return watch.leader();
    } finally {
      await watch.close();
    }
  }

  /**
   * Opens a session (protocol version 4): one connection that carries many
   * claims under one lease, for a caller that holds many locks at once or
   * takes many short ones. Its `acquire` and `tryAcquire` take the options
   * of this client's and give the same {@link Lock}s, without a connection
   * each. Its claims share its fate: a lost session loses all of them (see
   * {@link LockSession}). Makes one pass over the servers, moving on after
   * one that cannot be reached or answers with a temporary error; rejects
   * with a terminal {@link ServerError} (a server that predates sessions:
   * {@link SessionUnsupportedError}), or the last server's error.
   */
  async session(options: SessionOptions = {}): Promise<LockSession> {
    const leaseMs = options.leaseMs ?? this.leaseMs;
    checkLease(leaseMs);
    let last: unknown;
    for (const address of this.servers) {
      try {
        return await LockSession.open({
          address,
          tls: this.tlsOptions,
          connectTimeoutMs: this.connectTimeoutMs,
          leaseMs,
          logger: this.logger,
          signal: options.signal,
        });
      } catch (err) {
        last = err;
        const terminal = err instanceof ServerError && !err.temporary;
        if (terminal || err instanceof AcquireAbortedError) throw err;
        log(this.logger, "warn", `monolock: session on ${formatAddress(address)}: ${String((err as Error).message)}`);
      }
    }
    throw last;
  }

  /**
   * An opt-in pool of sessions for many short locks: each claim goes to a
   * session with room, a new one is opened when none has (up to
   * `maxSessions`), and a dead one is replaced on the next claim. Opens
   * nothing until the first claim. Claims on one session share its fate;
   * see {@link SessionPool}.
   */
  sessionPool(options: SessionPoolOptions = {}): SessionPool {
    return new SessionPool((o) => this.session(o), options);
  }

  private start(name: LockName, options: AcquireOptions, mode: Mode, lockClass: typeof Lock = Lock): Promise<Lock> {
    const leaseMs = options.leaseMs ?? this.leaseMs;
    let valid: ValidClaim;
    try {
      valid = validateAcquire(name, leaseMs, { shared: options.shared, limit: options.limit, value: options.value });
    } catch (err) {
      return Promise.reject(err);
    }
    const { timeoutMs } = options;
    if (timeoutMs !== undefined && timeoutMs !== null && !(timeoutMs >= 0)) {
      return Promise.reject(new TypeError("monolock: timeoutMs must be a number >= 0"));
    }
    return new Promise<Lock>((resolve, reject) => {
      new Acquisition(
        {
          servers: this.servers,
          connectTimeoutMs: this.connectTimeoutMs,
          tls: this.tlsOptions,
          tlsSessions: this.tlsSessions,
          leaseMs,
          name: valid,
          mode,
          signal: options.signal,
          timeoutMs: timeoutMs ?? undefined,
          onWaiting: options.onWaiting,
          logger: this.logger,
          lockClass,
        },
        resolve,
        reject,
      ).begin();
    });
  }
}

type Mode = "wait" | "try";

interface AcquisitionSettings {
  readonly servers: readonly ServerAddress[];
  readonly connectTimeoutMs: number;
  readonly tls: tls.ConnectionOptions | undefined;
  readonly tlsSessions: TlsSessions | undefined;
  readonly leaseMs: number;
  readonly name: ValidClaim;
  readonly mode: Mode;
  readonly signal: AbortSignal | undefined;
  readonly timeoutMs: number | undefined;
  readonly onWaiting: ((name: string) => void) | undefined;
  readonly logger: Logger | undefined;
  /** What a grant makes: a Lock, or a Term for a campaign. */
  readonly lockClass: typeof Lock;
}

/**
 * One call of acquire/tryAcquire: a {@link RetryPlan} carried out with
 * sessions and sleeps, ended by a grant, the plan giving up, the deadline or
 * the signal.
 */
class Acquisition {
  private readonly plan: RetryPlan;
  private session: Session | undefined;
  private retryTimer: Timer | undefined;
  private deadlineTimer: Timer | undefined;
  private settled = false;
  /** When the current session got WAITING. */
  private queuedAt: number | undefined;
  private lastError: MonolockError | undefined;
  /** Set by a failed attempt: the next step is a retry, logged with this note. */
  private retryNote: string | undefined;
  private readonly onAbort = (): void => {
    this.fail(new AcquireAbortedError({ cause: this.s.signal?.reason }));
  };

  constructor(
    private readonly s: AcquisitionSettings,
    private readonly resolve: (lock: Lock) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    this.plan = new RetryPlan(s.servers.length, s.mode);
  }

  begin(): void {
    const { signal, timeoutMs } = this.s;
    if (signal?.aborted) {
      this.onAbort();
      return;
    }
    signal?.addEventListener("abort", this.onAbort, { once: true });
    if (timeoutMs !== undefined) {
      // Referenced: the caller is awaiting this, even between connections.
      this.deadlineTimer = startTimer(
        timeoutMs,
        () => this.fail(new AcquireTimeoutError(this.s.name.text, { cause: this.lastError })),
        true,
      );
    }
    this.step();
  }

  /** Carries out the plan's next action. */
  private step(): void {
    this.retryTimer = undefined;
    if (this.settled) return;
    const action = this.plan.next();
    const note = this.retryNote;
    this.retryNote = undefined;
    switch (action.type) {
      case "connect":
        if (note !== undefined) this.logRetry(`${note}trying ${this.where(action.server)}`);
        this.connect(action.server);
        return;
      case "sleep":
        if (note !== undefined) this.logRetry(`${note}retrying in ${Math.round(action.ms)} ms`);
        // The caller's deadline cuts a sleep short: its timer rejects first.
        this.retryTimer = startTimer(action.ms, () => this.step(), true);
        return;
      default:
        this.fail(this.lastError);
        return;
    }
  }

  /** A stuck acquisition must be visible: every retry says why and what comes next. */
  private logRetry(next: string): void {
    const why = this.lastError === undefined ? "attempt failed" : withoutPrefix(this.lastError.message);
    log(this.s.logger, "warn", `monolock: acquire ${JSON.stringify(this.s.name.text)}: ${why}; ${next}`);
  }

  private where(server: number): string {
    const address = this.s.servers[server];
    if (address === undefined) throw new Error("unreachable: server index out of range");
    return formatAddress(address);
  }

  private connect(server: number): void {
    const address = this.s.servers[server];
    if (address === undefined) throw new Error("unreachable: server index out of range");
    // Messages are only formatted for a logger: formatting costs on every attempt.
    if (this.s.logger !== undefined) {
      log(
        this.s.logger,
        "debug",
        `monolock: connecting to ${formatAddress(address)} for ${JSON.stringify(this.s.name.text)}`,
      );
    }
    this.queuedAt = undefined;
    try {
      this.session = this.openSession(address);
    } catch (err) {
      // Bad TLS options and the like throw synchronously: terminal.
      this.fail(err);
    }
  }

  private openSession(address: ServerAddress): Session {
    const session: Session = new Session(
      {
        address,
        tls: this.s.tls,
        tlsSessions: this.s.tlsSessions,
        connectTimeoutMs: this.s.connectTimeoutMs,
        leaseMs: this.s.leaseMs,
        name: this.s.name.bytes,
        lockName: this.s.name.text,
        mode: this.s.mode,
        shared: this.s.name.shared,
        value: this.s.name.value,
      },
      {
        onWaiting: () => this.onWaiting(address),
        onGranted: (token) => this.onGranted(session, address, token),
        onLost: () => {}, // a held session belongs to its Lock
        onFailed: (cause, error, connected) => this.onFailed(cause, error, connected),
        onProclaimed: () => {}, // only a Lock proclaims
      },
    );
    return session;
  }

  private onWaiting(address: ServerAddress): void {
    this.queuedAt = performance.now();
    if (this.s.logger !== undefined) {
      log(this.s.logger, "debug", `monolock: ${JSON.stringify(this.s.name.text)} queued on ${formatAddress(address)}`);
    }
    try {
      this.s.onWaiting?.(this.s.name.text);
    } catch (err) {
      process.emitWarning(`monolock: onWaiting threw: ${String(err)}`);
    }
  }

  private onGranted(session: Session, address: ServerAddress, token: bigint): void {
    this.plan.report("granted");
    if (this.s.logger !== undefined) {
      const where = formatAddress(address);
      log(this.s.logger, "debug", `monolock: acquired ${JSON.stringify(this.s.name.text)} on ${where}, token ${token}`);
    }
    const lock = new this.s.lockClass(session, this.s.name.text, token, this.s.leaseMs, this.s.logger);
    this.session = undefined; // the Lock owns it now
    this.finish();
    this.resolve(lock);
  }

  /** The session is closing its connection; `fail` still waits for it to be closed. */
  private onFailed(cause: Cause, error: MonolockError, connected: boolean): void {
    this.lastError = error;
    const queuedMs = this.queuedAt === undefined ? 0 : performance.now() - this.queuedAt;
    const outcome = outcomeOf(cause, connected);
    if (outcome === "not_active" && cause.kind === "server") {
      // A passive server of an HA cell: its reason may name the leader.
      this.plan.reportNotActive(leaderIndex(this.s.servers, cause.reason));
    } else {
      this.plan.report(outcome, queuedMs);
    }
    this.retryNote = outcome === "not_monolock" ? "not asking it again; " : "";
    this.step();
  }

  /** Rejects once the connection (if any) is fully closed, so nothing lingers. */
  private fail(error: unknown): void {
    if (this.settled) return;
    this.finish();
    const closing = this.session?.release() ?? Promise.resolve();
    this.session = undefined;
    void closing.then(() => this.reject(error));
  }

  private finish(): void {
    this.settled = true;
    this.retryTimer?.cancel();
    this.deadlineTimer?.cancel();
    this.s.signal?.removeEventListener("abort", this.onAbort);
  }
}
