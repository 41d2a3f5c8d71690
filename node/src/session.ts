/**
 * One connection = one claim on one lock. A Session connects, sends
 * ACQUIRE, reads every frame, keeps the heartbeat schedule and the validity
 * deadline, and reports what happens to whoever currently owns it (first the
 * acquisition, then the Lock). It never reconnects: that is the caller's job.
 */

import * as net from "node:net";
import * as tls from "node:tls";
import type { ServerAddress } from "./address.js";
import { ConnectionError, errorForCode, type LostKind, type MonolockError } from "./errors.js";
import { encodeAcquire, encodeHeartbeat, FrameDecoder, FrameError, type ServerFrame } from "./frames.js";
import { HeartbeatSchedule } from "./heartbeat.js";
import { startTimer, type Timer } from "./timers.js";

/** What a session reports. Callbacks never run after `close()`. */
export interface SessionListener {
  /** The first WAITING on this connection. */
  onWaiting(): void;
  /** ACQUIRED while not yet holding: the grant (direct or promotion). */
  onGranted(token: bigint): void;
  /** The session ended by itself: ERROR frame, client timeout, or I/O. */
  onEnd(kind: LostKind, error: MonolockError): void;
}

/** Settings of one session. */
export interface SessionOptions {
  readonly address: ServerAddress;
  readonly tls: tls.ConnectionOptions | undefined;
  readonly connectTimeoutMs: number;
  readonly leaseMs: number;
  readonly name: Uint8Array;
}

type State = "connecting" | "acquiring" | "waiting" | "held" | "closed";

const now = (): number => performance.now();

/** Longest wait of a graceful release for the server's side of the close. */
/** Upper bound of the wait for the server to confirm a release (spec: release.max_wait_ms). */
export const RELEASE_WAIT_MS = 1000;

/** One connection's protocol state machine. */
export class Session {
  /** Receives events; replaced when the grant hands the session to a Lock. */
  listener: SessionListener;
  private state: State = "connecting";
  private readonly socket: net.Socket;
  private readonly decoder = new FrameDecoder();
  private readonly schedule: HeartbeatSchedule;
  private readonly closed: Promise<void>;
  /** Send time of the ACQUIRE/HEARTBEAT awaiting its reply (at most one). */
  private inFlightSince: number | undefined;
  private lastSendAt = 0;
  /** sendTime(last acknowledged request) + clientTimeout. */
  private deadline = 0;
  private grantedToken: bigint | undefined;
  private connectTimer: Timer | undefined;
  private livenessTimer: Timer | undefined;
  private heartbeatTimer: Timer | undefined;

  constructor(
    private readonly options: SessionOptions,
    listener: SessionListener,
  ) {
    this.listener = listener;
    this.schedule = new HeartbeatSchedule(options.leaseMs);
    const { host, port } = options.address;
    const connectEvent = options.tls ? "secureConnect" : "connect";
    this.socket = options.tls
      ? tls.connect({ servername: net.isIP(host) ? undefined : host, ...options.tls, host, port })
      : net.connect({ host, port });
    this.socket.setNoDelay(true);
    this.closed = new Promise((resolve) => this.socket.once("close", () => resolve()));
    // The connecting socket keeps the process alive; the timer need not.
    this.connectTimer = startTimer(
      options.connectTimeoutMs,
      () => this.end("io", this.connError(`connect to ${this.where()} timed out after ${options.connectTimeoutMs} ms`)),
      false,
    );
    this.socket.once(connectEvent, () => this.onConnect());
    this.socket.on("data", (chunk: Buffer) => this.onData(chunk));
    this.socket.on("error", (err: Error) => this.end("io", this.connError(`${this.where()}: ${err.message}`, err)));
    this.socket.on("end", () => this.end("io", this.connError(`${this.where()} closed the connection`)));
    this.socket.on("close", () => this.end("io", this.connError(`connection to ${this.where()} closed`)));
  }

  /** The validity deadline on the `performance.now()` clock. */
  get validUntil(): number {
    return this.deadline;
  }

  /** Closes the connection and stops every timer; resolves once the socket is closed. */
  close(): Promise<void> {
    this.shutdown();
    return this.closed;
  }

  /**
   * Ends a held session gracefully: sends FIN and waits for the server to
   * close its side, which it does only after letting the lock go. So once
   * this resolves, the lock is free on the server. A server that does not
   * answer within min(client timeout, 1 s) gets the connection destroyed.
   */
  release(): Promise<void> {
    if (this.state === "closed") return this.closed;
    this.state = "closed";
    this.stopTimers();
    this.socket.end();
    const cap = startTimer(
      Math.min(this.schedule.clientTimeoutMs, RELEASE_WAIT_MS),
      () => this.socket.destroy(),
      false,
    );
    void this.closed.then(() => cap.cancel());
    return this.closed;
  }

  private connError(message: string, cause?: unknown): ConnectionError {
    const phase = this.state === "connecting" ? "connect" : "open";
    return new ConnectionError(message, phase, cause === undefined ? undefined : { cause });
  }

  private where(): string {
    const { host, port } = this.options.address;
    return net.isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`;
  }

  private onConnect(): void {
    if (this.state !== "connecting") return;
    this.connectTimer?.cancel();
    this.connectTimer = undefined;
    this.state = "acquiring";
    this.send(encodeAcquire(this.options.name, this.options.leaseMs));
    // No reply to ACQUIRE within the client timeout means a dead connection.
    this.deadline = this.lastSendAt + this.schedule.clientTimeoutMs;
    this.armLiveness();
  }

  private send(frame: Uint8Array): void {
    this.lastSendAt = now();
    this.inFlightSince = this.lastSendAt;
    this.socket.write(frame);
  }

  private onData(chunk: Buffer): void {
    let frames: ServerFrame[];
    try {
      frames = this.decoder.push(chunk);
    } catch (err) {
      if (!(err instanceof FrameError)) throw err;
      this.end("io", this.connError(`protocol violation: ${err.message}`, err));
      return;
    }
    for (const frame of frames) {
      if (this.state === "closed") return;
      this.onFrame(frame);
    }
  }

  private onFrame(frame: ServerFrame): void {
    switch (frame.type) {
      case "error":
        this.end("server", errorForCode(frame.code, frame.reason, "server"));
        return;
      case "waiting":
        if (this.state === "held") {
          this.violation("WAITING after the grant");
          return;
        }
        if (!this.acknowledge()) return;
        if (this.state === "acquiring") {
          this.state = "waiting";
          this.listener.onWaiting();
        }
        return;
      case "acquired":
        if (this.state === "held") {
          // Only an acknowledgement of our heartbeat, with our token.
          if (frame.token === this.grantedToken) this.acknowledge();
          else this.violation(`token changed to ${frame.token}`);
          return;
        }
        // While acquiring this also answers the ACQUIRE; while waiting it is
        // the promotion, and the ack of an in-flight heartbeat still follows.
        if (this.state === "acquiring" && !this.acknowledge()) return;
        if (now() >= this.deadline) {
          this.end("timeout", this.connError("grant arrived after the client timeout"));
          return;
        }
        this.state = "held";
        this.grantedToken = frame.token;
        this.listener.onGranted(frame.token);
        return;
    }
  }

  /** Books a reply as the ack of the request in flight; false if none was. */
  private acknowledge(): boolean {
    const sentAt = this.inFlightSince;
    if (sentAt === undefined) {
      this.violation("reply without a request");
      return false;
    }
    this.inFlightSince = undefined;
    this.schedule.addSample(now() - sentAt);
    this.deadline = sentAt + this.schedule.clientTimeoutMs;
    this.armLiveness();
    this.scheduleHeartbeat();
    return true;
  }

  private violation(what: string): void {
    this.end("io", this.connError(`protocol violation: ${what}`));
  }

  /** Next send `interval` after the previous send, and never before its ack. */
  private scheduleHeartbeat(): void {
    this.heartbeatTimer?.cancel();
    if (this.inFlightSince !== undefined) return;
    const delay = this.lastSendAt + this.schedule.intervalMs - now();
    this.heartbeatTimer = startTimer(
      delay,
      () => {
        this.heartbeatTimer = undefined;
        if (this.state === "closed" || this.inFlightSince !== undefined) return;
        this.send(encodeHeartbeat());
      },
      false,
    );
  }

  private armLiveness(): void {
    this.livenessTimer?.cancel();
    this.livenessTimer = startTimer(
      this.deadline - now(),
      () => {
        const waited = Math.round(this.schedule.clientTimeoutMs);
        this.end("timeout", this.connError(`no reply from ${this.where()} within ${waited} ms`));
      },
      false,
    );
  }

  /** Ends the session by itself and tells the listener, once. */
  private end(kind: LostKind, error: MonolockError): void {
    if (this.state === "closed") return;
    this.shutdown();
    this.listener.onEnd(kind, error);
  }

  private shutdown(): void {
    if (this.state !== "closed") {
      this.state = "closed";
      this.stopTimers();
    }
    // Also cuts short a graceful release still waiting for the server.
    this.socket.destroy();
  }

  private stopTimers(): void {
    this.connectTimer?.cancel();
    this.livenessTimer?.cancel();
    this.heartbeatTimer?.cancel();
  }
}
