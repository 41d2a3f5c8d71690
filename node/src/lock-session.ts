/**
 * A session (protocol version 4): one connection, one lease, many claims.
 * This class owns the socket and one timer and carries out the actions of
 * a {@link SessionCore}, which makes every protocol decision; it turns
 * grants into the {@link Lock}s users already know.
 */

import * as net from "node:net";
import * as tls from "node:tls";
import { formatAddress, type ServerAddress } from "./address.js";
import type { AcquireOptions, CampaignOptions } from "./client.js";
import { RELEASE_WAIT_MS, SESSION } from "./constants.js";
import type { Cause } from "./core.js";
import { type Observation, Term } from "./election.js";
import {
  AcquireAbortedError,
  AcquireTimeoutError,
  ConnectionError,
  ExpectedAcquireError,
  errorForCode,
  InvalidLeaseError,
  LockBusyError,
  type LostKind,
  type MonolockError,
  NotActiveError,
  NotMonolockError,
  ServerEndedError,
  SessionUnsupportedError,
  UnknownMessageError,
  UnsupportedVersionError,
  withoutPrefix,
} from "./errors.js";
import { clientTimeoutMs, clientTimeoutText } from "./heartbeat.js";
import { Lock } from "./lock.js";
import { type Logger, log } from "./logger.js";
import { StreamClaim, type StreamOwner } from "./session-claim.js";
import { type SessionAction, SessionCore } from "./session-core.js";
import { endAndAwaitPeer } from "./socket-close.js";
import { startTimer, type Timer } from "./timers.js";
import { type ClaimValue, type LockName, type ValidClaim, validateAcquire } from "./validate.js";
import { Watch, type WatchLink, type WatchOptions } from "./watch.js";
import type { WatchConnectionListener } from "./watch-connection.js";
import type { WatchCore } from "./watch-core.js";

/** Options of {@link Client.session}. */
export interface SessionOptions {
  /**
   * The session's lease in milliseconds, shared by every claim it carries
   * (default: the client's `leaseMs`). One HEARTBEAT renews them all.
   */
  leaseMs?: number;
  /** Aborting it gives up opening the session. */
  signal?: AbortSignal;
}

/**
 * Options of {@link Session.acquire} and {@link Session.tryAcquire}: those
 * of a single claim. `leaseMs`, if given, must be the session's (every
 * claim of a session shares its lease).
 */
export type SessionAcquireOptions = AcquireOptions;

/** @internal How a session is opened. */
export interface SessionSettings {
  readonly address: ServerAddress;
  readonly tls: tls.ConnectionOptions | undefined;
  readonly connectTimeoutMs: number;
  readonly leaseMs: number;
  readonly logger: Logger | undefined;
  readonly signal: AbortSignal | undefined;
}

/** A watch stream: the picture it feeds and whom it tells. */
interface WatchEntry {
  readonly core: WatchCore;
  readonly listener: WatchConnectionListener;
  /** The server answered it (its first WATCHING came). */
  vouched: boolean;
}

/** An acquisition waiting for its stream's grant. */
interface Pending {
  readonly claim: ValidClaim;
  readonly onWaiting: ((name: string) => void) | undefined;
  readonly lockClass: typeof Lock;
  resolve(lock: Lock): void;
  reject(error: unknown): void;
}

const now = (): number => performance.now();

/** The codes with which a server without sessions answers SESSION (docs/protocol.md). */
const SESSIONLESS_CODES: ReadonlySet<number> = new Set([
  UnsupportedVersionError.CODE,
  ExpectedAcquireError.CODE,
  UnknownMessageError.CODE,
]);

/**
 * One connection that carries many claims (protocol version 4), made by
 * {@link Client.session}. Its claims are ordinary {@link Lock}s (token,
 * `signal`, `lost`, `proclaim`, `release`), taken without a connection
 * each: a session suits a caller that holds many locks at once or takes
 * many short ones.
 *
 * **Its claims share its fate.** One lease and one heartbeat keep them
 * all: when the session's deadline passes (the send of the last answered
 * heartbeat + 0.8 × lease), its connection ends or the server ends it,
 * every claim it holds is lost at once, each told (its `signal` aborts, its
 * `lost` resolves) before the connection is closed. A claim never retries
 * inside a session: an acquisition the server refuses, even with a
 * temporary code, rejects. `close()` (or `await using`) releases
 * everything it holds.
 */
export class Session implements AsyncDisposable, StreamOwner {
  /** The lease of every claim of this session, in milliseconds. */
  readonly leaseMs: number;
  /** The server, as `host:port`. */
  readonly address: string;
  private maxStreamsValue: number = SESSION.MAX_STREAMS_DEFAULT;
  private readonly core: SessionCore;
  private readonly socket: net.Socket;
  private readonly closed: Promise<void>;
  private readonly controller = new AbortController();
  private readonly pending = new Map<number, Pending>();
  /** Granted claims whose release is not done yet. */
  private readonly claims = new Map<number, StreamClaim>();
  /** The Locks that hold, for close. */
  private readonly locks = new Map<number, Lock>();
  private readonly watchStreams = new Map<number, WatchEntry>();
  /** The running watches, for close. */
  private readonly watches = new Set<Watch>();
  private connected = false;
  private tcpConnected = false;
  private shut = false;
  private timer: Timer | undefined;
  private wakeAt: number | undefined;
  private socketError: Error | undefined;
  private endError: MonolockError | undefined;
  private closing: Promise<void> | undefined;
  private opening: { resolve(): void; reject(error: unknown): void } | undefined;

  private constructor(private readonly s: SessionSettings) {
    this.leaseMs = s.leaseMs;
    this.address = formatAddress(s.address);
    this.core = new SessionCore(s.leaseMs);
    const { host, port } = s.address;
    if (s.tls) {
      this.socket = tls.connect({ servername: net.isIP(host) ? undefined : host, ...s.tls, host, port });
      this.socket.setNoDelay(true);
      this.socket.once("connect", () => {
        this.tcpConnected = true;
      });
      this.socket.once("secureConnect", () => this.opened());
    } else {
      this.socket = net.connect({ host, port, noDelay: true });
      this.socket.once("connect", () => {
        this.tcpConnected = true;
        this.opened();
      });
    }
    this.closed = new Promise((resolve) => this.socket.once("close", () => resolve()));
    this.timer = startTimer(s.connectTimeoutMs, () => this.ended(() => this.connectTimedOut()), false);
    this.socket.on("data", (chunk: Buffer) => this.apply(this.core.receive(chunk, now())));
    this.socket.on("error", (err: Error) => {
      this.socketError = err;
      this.ended(() => `${this.address}: ${err.message}`);
    });
    this.socket.on("end", () => this.ended(() => `${this.address} closed the connection`));
    this.socket.on("close", () => this.ended(() => `connection to ${this.address} closed`));
  }

  /** @internal Opens a session on one server: resolves once SESSION_OK came. */
  static open(settings: SessionSettings): Promise<Session> {
    settings.signal?.throwIfAborted();
    const session = new Session(settings);
    return new Promise<Session>((resolve, reject) => {
      const onAbort = (): void => {
        session.opening = undefined;
        session.apply(session.core.close(now()));
        session.socket.destroy();
        void session.closed.then(() => reject(new AcquireAbortedError({ cause: settings.signal?.reason })));
      };
      settings.signal?.addEventListener("abort", onAbort, { once: true });
      session.opening = {
        resolve: () => {
          settings.signal?.removeEventListener("abort", onAbort);
          resolve(session);
        },
        reject: (error) => {
          settings.signal?.removeEventListener("abort", onAbort);
          void session.closed.then(() => reject(error));
        },
      };
    });
  }

  /** How many streams the server lets this session have open at once (its SESSION_OK). */
  get maxStreams(): number {
    return this.maxStreamsValue;
  }

  /** Streams open now: claims waiting or held, and releases the server has not answered yet. */
  get openStreams(): number {
    return this.core.openStreams;
  }

  /** How many more streams this session may ever open: ids are never reused. */
  get idsLeft(): number {
    return this.core.idsLeft;
  }

  /**
   * Whether the session still vouches for its claims and takes new ones.
   * Reads the clock, as `lock.held` does.
   */
  get alive(): boolean {
    this.poll();
    return this.core.state === "open" && !this.core.exhausted;
  }

  /**
   * Aborts when the session ends (lost, or closed), with why: every claim
   * it held was told before. The same moment as each held lock's `signal`.
   */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The validity deadline of every claim, on the `performance.now()` clock. */
  get validUntil(): number {
    return this.core.validUntil;
  }

  /**
   * Acquires `name` on this session, waiting in the server's queue until
   * granted; takes the options of {@link Client.acquire} (`shared`,
   * `limit`, `value`, `signal`, `timeoutMs`, `onWaiting`). Rejects with
   * the {@link ServerError} of the code the server ended the stream with
   * (even a temporary one: a session never retries), with
   * {@link AcquireTimeoutError} or {@link AcquireAbortedError} (the
   * server is told to drop the place in the queue), with a check's error
   * before anything is sent, or with a {@link ConnectionError} when the
   * session has ended.
   */
  acquire(name: LockName, options: SessionAcquireOptions = {}): Promise<Lock> {
    return this.start(name, options, "wait", Lock);
  }

  /**
   * Acquires `name` only if it is free right now: a WAITING gives the place
   * up at once and rejects with {@link LockBusyError} once the server has
   * let the stream go (RELEASED), as {@link Client.tryAcquire} does.
   * Rejects otherwise as {@link acquire}.
   */
  tryAcquire(name: LockName, options: Omit<SessionAcquireOptions, "onWaiting"> = {}): Promise<Lock> {
    return this.start(name, options, "try", Lock);
  }

  /**
   * Closes the session: pending acquisitions reject with
   * {@link AcquireAbortedError}, held locks are released (their `signal`
   * aborts with a LockReleasedError, never as lost), and the connection is
   * closed, which makes the server release every claim at once. Resolves
   * once the server closed its side too (or after min(0.8 × lease, 1 s)).
   * Idempotent.
   */
  close(): Promise<void> {
    if (this.closing === undefined) {
      this.closing = this.closed; // before anything is told: a close is no loss
      const closedBy = new ConnectionError("the session was closed", "open");
      for (const [stream, p] of [...this.pending])
        this.abandon(stream, p, new AcquireAbortedError({ cause: closedBy }));
      for (const lock of [...this.locks.values()]) void lock.release();
      for (const watch of [...this.watches]) void watch.close();
      this.apply(this.core.close(now()));
    }
    return this.closing;
  }

  /** Same as {@link Session.close}; makes `await using session = ...` work. */
  declare [Symbol.asyncDispose]: () => Promise<void>;

  /** @internal Lets time pass now, as the timer would. */
  poll(): void {
    this.apply(this.core.tick(now()));
  }

  /** @internal */
  proclaimStream(stream: number, value: Uint8Array): number {
    const { seq, actions } = this.core.proclaim(stream, value, now());
    this.apply(actions);
    return seq;
  }

  /** @internal */
  releaseStream(stream: number): void {
    this.locks.delete(stream);
    this.apply(this.core.release(stream, now()));
  }

  private start(
    name: LockName,
    options: SessionAcquireOptions,
    mode: "wait" | "try",
    lockClass: typeof Lock,
  ): Promise<Lock> {
    let claim: ValidClaim;
    try {
      if (options.leaseMs !== undefined && options.leaseMs !== null && options.leaseMs !== this.leaseMs) {
        const why = `a claim of a session has the session's lease (${this.leaseMs} ms), got ${options.leaseMs}`;
        throw errorForCode(InvalidLeaseError.CODE, why, "client");
      }
      claim = validateAcquire(name, this.leaseMs, {
        shared: options.shared,
        limit: options.limit,
        value: options.value,
      });
      const { timeoutMs } = options;
      if (timeoutMs !== undefined && timeoutMs !== null && !(timeoutMs >= 0)) {
        throw new TypeError("monolock: timeoutMs must be a number >= 0");
      }
      if (options.signal?.aborted) throw new AcquireAbortedError({ cause: options.signal.reason });
    } catch (err) {
      return Promise.reject(err);
    }
    const { stream, actions } = this.core.open(
      { name: claim.bytes, shared: claim.shared, value: claim.value, mode },
      now(),
    );
    if (stream === 0) {
      this.apply(actions);
      return Promise.reject(this.unusable());
    }
    return new Promise<Lock>((resolve, reject) => {
      const { signal, timeoutMs } = options;
      let timer: Timer | undefined;
      const onAbort = (): void => this.abandon(stream, entry, new AcquireAbortedError({ cause: signal?.reason }));
      const cleanup = (): void => {
        timer?.cancel();
        signal?.removeEventListener("abort", onAbort);
      };
      const entry: Pending = {
        claim,
        onWaiting: mode === "wait" ? options.onWaiting : undefined,
        lockClass,
        resolve: (lock) => {
          cleanup();
          resolve(lock);
        },
        reject: (error) => {
          cleanup();
          reject(error);
        },
      };
      this.pending.set(stream, entry);
      signal?.addEventListener("abort", onAbort, { once: true });
      if (timeoutMs !== undefined && timeoutMs !== null) {
        const timeout = () => this.abandon(stream, entry, new AcquireTimeoutError(claim.text));
        timer = startTimer(timeoutMs, timeout, true);
      }
      this.apply(actions);
    });
  }

  /** The caller gave up a pending acquisition: reject it, and tell the server to drop the stream. */
  private abandon(stream: number, entry: Pending, error: unknown): void {
    if (this.pending.get(stream) !== entry) return;
    this.pending.delete(stream);
    entry.reject(error);
    this.apply(this.core.release(stream, now()));
  }

  /** Why no claim can be opened now. */
  private unusable(): MonolockError {
    if (this.endError !== undefined) {
      return new ConnectionError(`the session has ended: ${withoutPrefix(this.endError.message)}`, "open", {
        cause: this.endError,
      });
    }
    if (this.closing !== undefined) return new ConnectionError("the session was closed", "open", undefined, false);
    return new ConnectionError("the session has used every stream id; open a new session", "open", undefined, false);
  }

  /** The connection is open (with TLS, the handshake done): send SESSION. */
  private opened(): void {
    this.timer?.cancel();
    this.timer = undefined;
    this.connected = true;
    this.apply(this.core.connect(now()));
  }

  private ended(detail: () => string): void {
    if (this.core.state === "closed") return;
    this.apply(this.core.eof(now(), detail()));
  }

  /** Carries out the core's actions in order, then re-arms the wake-up. */
  private apply(actions: SessionAction[]): void {
    for (const action of actions) {
      switch (action.type) {
        case "send":
          if (!this.shut) this.socket.write(action.bytes);
          break;
        case "ready":
          this.maxStreamsValue = action.maxStreams;
          this.opening?.resolve();
          this.opening = undefined;
          break;
        case "waiting":
          this.onWaiting(action.stream);
          break;
        case "grant":
          this.onGrant(action.stream, action.token);
          break;
        case "proclaimed":
          this.claims.get(action.stream)?.listener.onProclaimed(action.seq);
          break;
        case "lost": {
          this.locks.delete(action.stream);
          const error = this.errorFor(action.cause, undefined);
          const claim = this.claims.get(action.stream);
          claim?.ended();
          claim?.listener.onLost(lostKind(action.cause), error);
          break;
        }
        case "fail": {
          const entry = this.pending.get(action.stream);
          this.pending.delete(action.stream);
          entry?.reject(this.errorFor(action.cause, entry.claim));
          break;
        }
        case "released":
          this.claims.get(action.stream)?.released();
          this.claims.delete(action.stream);
          break;
        case "ended":
          this.onEnded(action.cause);
          break;
        case "watch":
          this.onWatchFrame(action.stream, action.frame);
          break;
        case "vouched":
          this.onVouched(action.streams, action.sentAt);
          break;
        case "watch_end": {
          const entry = this.watchStreams.get(action.stream);
          this.watchStreams.delete(action.stream);
          const error = this.errorFor(action.cause, undefined);
          // The session's end ends its watches; so does a passive server, which would refuse every reopen.
          const final = this.core.state !== "open" || error instanceof NotActiveError;
          entry?.listener.onEnd(error, entry.vouched, final);
          break;
        }
        case "close":
          this.shutdown(action.handBack);
          break;
      }
    }
    this.arm();
  }

  /**
   * Follows `name` on this session (a watch stream): resolves with the
   * {@link Watch} once its first picture is known, as {@link Client.watch}
   * does. After its first WATCHING the session's heartbeats vouch for it,
   * on the session's deadline. It ends (`watch.ended`) when the session
   * ends; a stream the server ends by itself (a watch that fell behind,
   * 0x04) is reopened on the session, resuming where it left off.
   */
  async watch(name: LockName, options: WatchOptions = {}): Promise<Watch> {
    const valid = validateAcquire(name, this.leaseMs);
    options.signal?.throwIfAborted();
    if (!this.alive) throw this.unusable();
    const watch = new Watch({
      servers: [this.s.address],
      tls: this.s.tls,
      connectTimeoutMs: this.s.connectTimeoutMs,
      leaseMs: this.leaseMs,
      name: valid,
      logger: this.s.logger,
      open: (core, listener) => this.openWatchStream(valid.bytes, core, listener),
    });
    this.watches.add(watch);
    void watch.ended.then(() => this.watches.delete(watch));
    try {
      for await (const state of watch.changes({ signal: options.signal })) if (state.known) return watch;
    } catch (err) {
      await watch.close();
      throw err;
    }
    await watch.close();
    throw options.signal?.reason;
  }

  /** {@link Client.observe} on a watch stream of this session. */
  async *observe(name: LockName, options: WatchOptions = {}): AsyncGenerator<Observation, void, undefined> {
    const watch = await this.watch(name, options);
    try {
      yield* watch.observations({ signal: options.signal });
    } finally {
      await watch.close();
    }
  }

  /**
   * {@link Client.campaign} on this session: resolves with the {@link Term}
   * once elected. The term shares the session's fate like every claim of it.
   */
  campaign(name: LockName, value: ClaimValue, options: CampaignOptions = {}): Promise<Term> {
    if ((typeof value === "string" || value instanceof Uint8Array) && value.length === 0) {
      const why = "a leader's value must not be empty (followers reach the leader by it)";
      return Promise.reject(new TypeError(`monolock: campaign for ${JSON.stringify(String(name))}: ${why}`));
    }
    const claim = { ...options, value, shared: undefined, limit: undefined };
    return this.start(name, claim, "wait", Term) as Promise<Term>;
  }

  /** Opens a watch stream resuming from `core`'s picture; throws when the session can carry no more. */
  private openWatchStream(name: Uint8Array, core: WatchCore, listener: WatchConnectionListener): WatchLink {
    const { stream, actions } = this.core.openWatch(name, core.epoch, core.seq, now());
    if (stream === 0) {
      this.apply(actions);
      throw this.unusable();
    }
    core.sent(now()); // its first WATCHING answers the OPEN
    this.watchStreams.set(stream, { core, listener, vouched: false });
    this.apply(actions);
    return {
      close: () => {
        if (this.watchStreams.delete(stream)) this.apply(this.core.release(stream, now()));
        return Promise.resolve();
      },
    };
  }

  private onWatchFrame(stream: number, frame: Extract<SessionAction, { type: "watch" }>["frame"]): void {
    const entry = this.watchStreams.get(stream);
    if (entry === undefined) return; // closed as it came
    const fault =
      frame.type === "event" ? entry.core.event(frame.event, now()) : entry.core.watching(frame.epoch, frame.seq);
    if (fault !== undefined) {
      // The server broke a promise of the watch: drop the stream; the watch reopens it.
      this.watchStreams.delete(stream);
      this.apply(this.core.release(stream, now()));
      const error = new ConnectionError(`protocol violation by ${this.address}: ${fault.detail}`, "open");
      entry.listener.onEnd(error, entry.vouched, false);
      return;
    }
    if (frame.type === "watching") entry.vouched = true;
    entry.listener.onChange();
  }

  /** An ALIVE vouches for these watches as a WATCHING of their last event would. */
  private onVouched(streams: readonly number[], sentAt: number): void {
    for (const stream of streams) {
      const entry = this.watchStreams.get(stream);
      if (entry === undefined || !entry.core.complete) continue; // mid-snapshot: its own WATCHING will say
      entry.core.sent(sentAt);
      entry.core.watching(entry.core.epoch, entry.core.seq);
      entry.listener.onChange();
    }
  }

  private onWaiting(stream: number): void {
    const entry = this.pending.get(stream);
    if (entry?.onWaiting === undefined) return;
    try {
      entry.onWaiting(entry.claim.text);
    } catch (err) {
      process.emitWarning(`monolock: onWaiting threw: ${String(err)}`);
    }
  }

  private onGrant(stream: number, token: bigint): void {
    const entry = this.pending.get(stream);
    const claim = new StreamClaim(this, stream, entry?.claim.value !== undefined);
    this.claims.set(stream, claim);
    if (entry === undefined) {
      // Abandoned as the grant crossed: let it go at once.
      this.apply(this.core.release(stream, now()));
      return;
    }
    this.pending.delete(stream);
    const lock = new entry.lockClass(claim, entry.claim.text, token, this.leaseMs, this.s.logger);
    this.locks.set(stream, lock);
    if (this.s.logger !== undefined) {
      log(
        this.s.logger,
        "debug",
        `monolock: acquired ${JSON.stringify(entry.claim.text)} on session ${this.address}, token ${token}`,
      );
    }
    entry.resolve(lock);
  }

  private onEnded(cause: Cause): void {
    const error = this.errorFor(cause, undefined);
    if (this.opening !== undefined) {
      // No SESSION_OK, so no claim: nothing to hold the connection open for.
      this.socket.destroy();
      this.opening.reject(error);
      this.opening = undefined;
      return;
    }
    if (this.closing !== undefined) return;
    this.endError = error;
    this.controller.abort(error);
    log(this.s.logger, "info", `monolock: session on ${this.address} ended: ${withoutPrefix(error.message)}`);
  }

  /** One timer, at the core's next deadline, heartbeat or release wait. */
  private arm(): void {
    if (!this.connected) return; // the connect timer runs
    const at = this.shut ? undefined : this.core.nextWakeAt;
    if (at === this.wakeAt) return;
    this.timer?.cancel();
    this.timer = undefined;
    this.wakeAt = at;
    if (at === undefined) return;
    this.timer = startTimer(
      at - now(),
      () => {
        this.timer = undefined;
        this.wakeAt = undefined;
        this.poll();
      },
      false,
    );
  }

  private shutdown(handBack: boolean): void {
    if (this.shut) return;
    this.shut = true;
    this.timer?.cancel();
    this.timer = undefined;
    if (!this.controller.signal.aborted) {
      this.controller.abort(new ConnectionError("the session was closed", "open", undefined, false));
    }
    if (!handBack || !this.connected) {
      this.socket.destroy();
      return;
    }
    // FIN: the server releases every claim at once, then closes its side.
    endAndAwaitPeer(this.socket, this.closed, Math.min(clientTimeoutMs(this.leaseMs), RELEASE_WAIT_MS));
  }

  private errorFor(cause: Cause, claim: ValidClaim | undefined): MonolockError {
    switch (cause.kind) {
      case "server":
        if (cause.code === null) {
          return new ServerEndedError(`${this.address} ended the session with an ERROR (its code did not arrive)`);
        }
        // A server older than version 4 answers SESSION with 0x13 (its type
        // byte is no message it knows); 0x10 and 0x11 say the same.
        if (this.opening !== undefined && SESSIONLESS_CODES.has(cause.code)) {
          return new SessionUnsupportedError(this.address, cause.code, cause.reason);
        }
        return errorForCode(cause.code, cause.reason, "server");
      case "timeout":
        return new ConnectionError(
          `no reply from the server within ${clientTimeoutText(this.leaseMs)} ms (0.8 x lease of ${this.leaseMs} ms)`,
          "open",
        );
      case "protocol":
        return new ConnectionError(`protocol violation by ${this.address}: ${cause.detail}`, "open");
      case "not_monolock":
        return new NotMonolockError(this.address, cause.sent);
      case "busy":
        return new LockBusyError(claim?.text ?? "", {
          shared: claim?.shared !== undefined,
          limit: claim?.shared?.limit ?? 0,
        });
      default: {
        const options = this.socketError === undefined ? undefined : { cause: this.socketError };
        const detail = cause.kind === "io" || cause.kind === "certificate" ? cause.detail : "connection failed";
        return new ConnectionError(detail, this.connected ? "open" : "connect", options);
      }
    }
  }

  private connectTimedOut(): string {
    const { connectTimeoutMs } = this.s;
    return this.tcpConnected
      ? `TLS handshake with ${this.address} timed out after ${connectTimeoutMs} ms`
      : `connect to ${this.address} timed out after ${connectTimeoutMs} ms`;
  }
}

function lostKind(cause: Cause): LostKind {
  return cause.kind === "server" || cause.kind === "timeout" ? cause.kind : "io";
}

Object.defineProperty(Session.prototype, Symbol.asyncDispose ?? Symbol.for("nodejs.asyncDispose"), {
  value: function asyncDispose(this: Session): Promise<void> {
    return this.close();
  },
  writable: true,
  configurable: true,
});
