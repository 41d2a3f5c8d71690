/**
 * One connection = one claim on one lock. A Session owns the socket and one
 * timer and drives a {@link SessionCore}, which makes every protocol
 * decision; the Session carries out the core's actions in order and reports
 * them to whoever currently owns it (first the acquisition, then the Lock).
 * It never reconnects: that is the caller's job.
 */

import * as net from "node:net";
import * as tls from "node:tls";
import { formatAddress, type ServerAddress } from "./address.js";
import { RELEASE_WAIT_MS } from "./constants.js";
import { type Action, type Cause, SessionCore } from "./core.js";
import {
  CertificateError,
  ConnectionError,
  errorForCode,
  LockBusyError,
  type LostKind,
  type MonolockError,
  NotMonolockError,
  ServerEndedError,
  SharedUnsupportedError,
  UnsupportedVersionError,
  ValueUnsupportedError,
} from "./errors.js";
import { clientTimeoutMs, clientTimeoutText } from "./heartbeat.js";
import { closeCleanly, endAndAwaitPeer } from "./socket-close.js";
import { startTimer, type Timer } from "./timers.js";
import type { TlsSessions } from "./tls-resume.js";
import { certificateProblem } from "./tlscert.js";
import type { SharedClaim } from "./validate.js";

/** What a session reports. Nothing is reported after the core closed the claim. */
export interface SessionListener {
  /** The ACQUIRE was answered with WAITING. */
  onWaiting(): void;
  /** The grant (direct or promotion). */
  onGranted(token: bigint): void;
  /** A held lock is lost. Called before the connection is closed. */
  onLost(kind: LostKind, error: MonolockError): void;
  /** A claim that was never held ended; `connected`: the connection had been opened. */
  onFailed(cause: Cause, error: MonolockError, connected: boolean): void;
  /** The PROCLAIM numbered `seq` (see {@link Session.proclaim}), and every earlier one, is acknowledged. */
  onProclaimed(seq: number): void;
}

/** Settings of one session. */
export interface SessionOptions {
  readonly address: ServerAddress;
  readonly tls: tls.ConnectionOptions | undefined;
  /** The client's TLS sessions: the connection offers the server's latest and keeps the new ones. */
  readonly tlsSessions: TlsSessions | undefined;
  readonly connectTimeoutMs: number;
  readonly leaseMs: number;
  readonly name: Uint8Array;
  /** The name as the user gave it, for messages. */
  readonly lockName: string;
  readonly mode: "wait" | "try";
  /** A shared claim (version 2 ACQUIRE); absent: exclusive (version 1). */
  readonly shared: SharedClaim | undefined;
  /** The claim's value, not empty (version 3 ACQUIRE); absent: none. */
  readonly value: Uint8Array | undefined;
}

const now = (): number => performance.now();

/** The public kind of a loss: a protocol violation is an I/O failure of the connection. */
function lostKind(cause: Cause): LostKind {
  return cause.kind === "server" || cause.kind === "timeout" ? cause.kind : "io";
}

/**
 * OpenSSL errors that mean the peer did not answer with TLS records: a
 * plaintext server (monolock without TLS answers ClientHello with an ERROR
 * frame), an HTTP port.
 */
const NOT_TLS_CODES = new Set([
  "ERR_SSL_WRONG_VERSION_NUMBER",
  "ERR_SSL_PACKET_LENGTH_TOO_LONG",
  "ERR_SSL_UNEXPECTED_RECORD",
  "ERR_SSL_RECORD_LAYER_FAILURE",
]);

/** The socket side of one claim. */
export class Session {
  /** Receives events; replaced when the grant hands the session to a Lock. */
  listener: SessionListener;
  private readonly core: SessionCore;
  private readonly socket: net.Socket;
  private readonly closed: Promise<void>;
  private connected = false;
  /** TCP is up (with TLS, the handshake may still be running). */
  private tcpConnected = false;
  private shut = false;
  /** The connect timeout, then the core's wake-up. */
  private timer: Timer | undefined;
  private wakeAt: number | undefined;
  /** The last socket error, kept as the cause of the I/O failure it leads to. */
  private socketError: Error | undefined;

  constructor(
    private readonly options: SessionOptions,
    listener: SessionListener,
  ) {
    this.listener = listener;
    this.core = new SessionCore({
      leaseMs: options.leaseMs,
      name: options.name,
      mode: options.mode,
      shared: options.shared,
      value: options.value,
    });
    const { host, port } = options.address;
    if (options.tls) {
      const where = formatAddress(options.address);
      const session = options.tlsSessions?.get(where);
      const socket = tls.connect({
        servername: net.isIP(host) ? undefined : host,
        session,
        ...options.tls,
        host,
        port,
      });
      options.tlsSessions?.track(socket, where);
      this.socket = socket;
      this.socket.setNoDelay(true);
      this.socket.once("connect", () => {
        this.tcpConnected = true;
      });
      this.socket.once("secureConnect", () => this.opened());
    } else {
      // noDelay: Nagle's algorithm is off from the connect on, before the
      // first write (one setsockopt, where setNoDelay() now would make two).
      this.socket = net.connect({ host, port, noDelay: true });
      this.socket.once("connect", () => {
        this.tcpConnected = true;
        this.opened();
      });
    }
    this.closed = new Promise((resolve) => this.socket.once("close", () => resolve()));
    // The connecting socket keeps the process alive; the timer need not.
    this.timer = startTimer(options.connectTimeoutMs, () => this.ended(() => this.connectTimedOut()), false);
    this.socket.on("data", (chunk: Buffer) => this.apply(this.core.receive(chunk, now())));
    this.socket.on("error", (err: Error) => {
      this.socketError = err;
      const side = options.tls ? certificateProblem(err, this.socket as tls.TLSSocket, this.connected) : undefined;
      if (side !== undefined) {
        if (this.core.state !== "closed") this.apply(this.core.certificateRefused(now(), side, tlsCause(err)));
        return;
      }
      this.ended(() => this.describeError(err));
    });
    this.socket.on("end", () => this.ended(() => `${this.where()} closed the connection`));
    this.socket.on("close", () => this.ended(() => `connection to ${this.where()} closed`));
  }

  /** The connection is open (with TLS, the handshake done): the claim starts. */
  private opened(): void {
    this.timer?.cancel();
    this.timer = undefined;
    this.connected = true;
    this.apply(this.core.connect(now()));
  }

  /** Whether the claim was sent with a value (a version 3 ACQUIRE): only such a claim may proclaim. */
  get valued(): boolean {
    return this.options.value !== undefined;
  }

  /**
   * Replaces the claim's value (validated; only for a {@link valued} claim).
   * Returns the PROCLAIM's number, which `onProclaimed` reaches once the
   * server has it, or 0 when the claim neither waits nor holds.
   */
  proclaim(value: Uint8Array): number {
    const { seq, actions } = this.core.proclaim(value, now());
    this.apply(actions);
    return seq;
  }

  /** The validity deadline on the `performance.now()` clock. */
  get validUntil(): number {
    return this.core.validUntil;
  }

  /**
   * Lets time pass now, as the timer would: a deadline already reached is
   * decided (and told) here, so polled checks never lag behind it.
   */
  poll(): void {
    this.apply(this.core.tick(now()));
  }

  /**
   * The application lets go. A held, valid lock is handed back gracefully:
   * FIN, then wait for the server to close its side, which it does only after
   * letting the lock go, for at most min(client timeout, 1 s). Anything else
   * (waiting, lost) closes at once. Resolves once the socket is closed.
   */
  release(): Promise<void> {
    this.apply(this.core.release(now()));
    return this.closed;
  }

  /**
   * The connection ended or failed. Most ends come after the claim was
   * closed (a release, a loss), where the core has nothing left to decide:
   * the detail is only worded for a claim still open.
   */
  private ended(detail: () => string): void {
    if (this.core.state === "closed") return;
    this.apply(this.core.eof(now(), detail()));
  }

  /** Carries out the core's actions in order, then re-arms the wake-up. */
  private apply(actions: Action[]): void {
    for (const action of actions) {
      switch (action.type) {
        case "send":
          if (!this.shut) this.socket.write(action.bytes);
          break;
        case "waiting":
          this.listener.onWaiting();
          break;
        case "grant":
          this.listener.onGranted(action.token);
          break;
        case "proclaimed":
          this.listener.onProclaimed(action.seq);
          break;
        case "lost":
          this.listener.onLost(lostKind(action.cause), this.errorFor(action.cause));
          break;
        case "fail":
          this.listener.onFailed(action.cause, this.errorFor(action.cause), this.connected);
          break;
        case "close":
          this.close(action.handBack);
          break;
      }
    }
    this.arm();
  }

  /** One timer, at the core's next deadline or heartbeat. */
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

  private close(handBack: boolean): void {
    if (this.shut) return;
    this.shut = true;
    this.timer?.cancel();
    this.timer = undefined;
    const capMs = Math.min(clientTimeoutMs(this.options.leaseMs), RELEASE_WAIT_MS);
    if (!handBack || !this.connected) {
      // Nothing to hand back: no wait for the server, but a TLS connection
      // still ends with close_notify.
      closeCleanly(this.socket, this.options.tls !== undefined && this.connected, capMs);
      return;
    }
    endAndAwaitPeer(this.socket, this.closed, capMs);
  }

  private errorFor(cause: Cause): MonolockError {
    switch (cause.kind) {
      case "server":
        if (cause.code === null)
          return new ServerEndedError(`${this.where()} ended the session with an ERROR (its code did not arrive)`);
        // A server older than values refuses the version 3 ACQUIRE of a
        // claim with a value; a version 1 server the version 2 ACQUIRE of a
        // shared claim.
        if (cause.code === UnsupportedVersionError.CODE && this.options.value !== undefined)
          return new ValueUnsupportedError(this.where(), cause.reason);
        if (cause.code === UnsupportedVersionError.CODE && this.options.shared !== undefined)
          return new SharedUnsupportedError(this.where(), cause.reason);
        return errorForCode(cause.code, cause.reason, "server");
      case "timeout": {
        // The same words in every client: the timeout and the lease it comes from.
        const lease = this.options.leaseMs;
        return new ConnectionError(
          `no reply from the server within ${clientTimeoutText(lease)} ms (0.8 x lease of ${lease} ms)`,
          "open",
        );
      }
      case "protocol":
        return new ConnectionError(`protocol violation by ${this.where()}: ${cause.detail}`, "open");
      case "not_monolock":
        return new NotMonolockError(this.where(), cause.sent);
      case "certificate": {
        const options = this.socketError === undefined ? undefined : { cause: this.socketError };
        return new CertificateError(this.where(), cause.side, cause.detail, options);
      }
      case "io": {
        const options = this.socketError === undefined ? undefined : { cause: this.socketError };
        return new ConnectionError(cause.detail, this.connected ? "open" : "connect", options);
      }
      case "busy":
        return new LockBusyError(this.options.lockName, {
          shared: this.options.shared !== undefined,
          limit: this.options.shared?.limit ?? 0,
        });
    }
  }

  private where(): string {
    return formatAddress(this.options.address);
  }

  private connectTimedOut(): string {
    const { connectTimeoutMs } = this.options;
    return this.tcpConnected
      ? `TLS handshake with ${this.where()} timed out after ${connectTimeoutMs} ms`
      : `connect to ${this.where()} timed out after ${connectTimeoutMs} ms`;
  }

  /** A socket error in words: during a TLS handshake, say so, and whether the server spoke TLS at all. */
  private describeError(err: Error & { code?: unknown; reason?: unknown }): string {
    const detail = tlsCause(err);
    if (!this.options.tls || !this.tcpConnected || this.connected) return `${this.where()}: ${detail}`;
    const notTls = typeof err.code === "string" && NOT_TLS_CODES.has(err.code);
    return notTls
      ? `TLS handshake with ${this.where()} failed: the server may not speak TLS (${detail})`
      : `TLS handshake with ${this.where()} failed: ${detail}`;
  }
}

/**
 * A TLS error's own text. OpenSSL's message carries its internal error
 * stack, so its reason reads better; Node's own (a name the certificate
 * does not cover) says more in its message.
 */
function tlsCause(err: Error & { code?: unknown; reason?: unknown }): string {
  const openssl = typeof err.code === "string" && err.code.startsWith("ERR_SSL_");
  return openssl && typeof err.reason === "string" ? err.reason : err.message;
}
