/**
 * One connection of a watch: the WATCH, then one HEARTBEAT at a time on a
 * lock's schedule, each owed exactly one WATCHING, and a reply deadline of
 * 0.8 × lease. The {@link WatchCore} keeps the picture and the request's
 * state across connections; this class carries the socket and one timer.
 * It never reconnects: that is the Watch's job.
 */

import * as net from "node:net";
import * as tls from "node:tls";
import { formatAddress, type ServerAddress } from "./address.js";
import { ConnectionError, errorForCode, type MonolockError, ServerEndedError } from "./errors.js";
import { encodeHeartbeat, FrameError } from "./frames.js";
import { clientTimeoutText, HeartbeatSchedule } from "./heartbeat.js";
import { startTimer, type Timer } from "./timers.js";
import type { WatchCore } from "./watch-core.js";
import { encodeWatch, WatchDecoder, type WatchFrame } from "./watch-frames.js";

/** Settings of one watch connection. */
export interface WatchConnectionOptions {
  readonly address: ServerAddress;
  readonly tls: tls.ConnectionOptions | undefined;
  readonly connectTimeoutMs: number;
  readonly leaseMs: number;
  /** The name's wire bytes (already validated). */
  readonly name: Uint8Array;
}

/** What a connection reports. */
export interface WatchConnectionListener {
  /** The picture changed, or a WATCHING vouched for it anew. */
  onChange(): void;
  /**
   * The connection ended (not after close()); `vouched`: the server answered
   * a request on it; `final`: no new connection can be made (a session's
   * watch whose session ended), so the watch ends with `error`.
   */
  onEnd(error: MonolockError, vouched: boolean, final?: boolean): void;
}

const now = (): number => performance.now();

/** The socket side of one watch connection. */
export class WatchConnection {
  private readonly socket: net.Socket;
  private readonly decoder = new WatchDecoder();
  private readonly schedule: HeartbeatSchedule;
  private readonly closed: Promise<void>;
  /** The connect timeout, then the next heartbeat or reply deadline. */
  private timer: Timer | undefined;
  private over = false;
  private connected = false;
  private vouched = false;

  constructor(
    private readonly options: WatchConnectionOptions,
    private readonly core: WatchCore,
    private readonly listener: WatchConnectionListener,
  ) {
    this.schedule = new HeartbeatSchedule(options.leaseMs);
    this.socket = openSocket(options.address, options.tls, () => this.opened());
    this.closed = new Promise((resolve) => this.socket.once("close", () => resolve()));
    // The connecting socket keeps the process alive; the timer need not.
    this.timer = startTimer(options.connectTimeoutMs, () => this.fail(`connect to ${this.where()} timed out`), false);
    this.socket.on("data", (chunk: Buffer) => this.receive(chunk));
    this.socket.on("error", (err: Error) => this.fail(`${this.where()}: ${err.message}`, err));
    this.socket.on("end", () => this.fail(`${this.where()} closed the connection`));
    this.socket.on("close", () => this.fail(`connection to ${this.where()} closed`));
  }

  /** Ends the connection without reporting it; resolves once the socket is closed. */
  close(): Promise<void> {
    this.stop();
    return this.closed;
  }

  /** The connection is open (with TLS, the handshake done): the WATCH resumes from the picture. */
  private opened(): void {
    this.connected = true;
    const { name, leaseMs } = this.options;
    this.send(encodeWatch(name, leaseMs, this.core.epoch, this.core.seq));
  }

  private send(frame: Uint8Array): void {
    this.core.sent(now());
    this.socket.write(frame);
    this.arm();
  }

  /** One timer: the reply deadline of the request in flight, else the next heartbeat. */
  private arm(): void {
    this.timer?.cancel();
    const last = this.core.lastSendAt;
    const at = this.core.inFlight ? last + this.schedule.clientTimeoutMs : last + this.schedule.intervalMs;
    this.timer = startTimer(at - now(), () => this.tick(), false);
  }

  private tick(): void {
    if (this.over) return;
    if (this.expired(now())) {
      this.end(this.timeoutError());
      return;
    }
    if (!this.core.inFlight) this.send(encodeHeartbeat());
    else this.arm();
  }

  /** The request in flight has had its 0.8 × lease: a late reply counts for nothing. */
  private expired(at: number): boolean {
    return this.core.inFlight && at >= this.core.lastSendAt + this.schedule.clientTimeoutMs;
  }

  private receive(chunk: Uint8Array): void {
    if (this.over) return;
    if (this.expired(now())) {
      this.end(this.timeoutError());
      return;
    }
    let frames: WatchFrame[];
    try {
      frames = this.decoder.push(chunk);
    } catch (err) {
      if (!(err instanceof FrameError)) throw err;
      this.end(this.protocolError(err.message));
      return;
    }
    for (const frame of frames) {
      if (this.over) return;
      this.take(frame);
    }
  }

  /** An event to the picture, a WATCHING as the acknowledgement of the request in flight, an ERROR as the end. */
  private take(frame: WatchFrame): void {
    switch (frame.type) {
      case "event": {
        const fault = this.core.event(frame.event, now());
        if (fault !== undefined) this.end(this.protocolError(fault.detail));
        else this.listener.onChange();
        return;
      }
      case "watching": {
        const sentAt = this.core.lastSendAt;
        const fault = this.core.watching(frame.epoch, frame.seq);
        if (fault !== undefined) {
          this.end(this.protocolError(fault.detail));
          return;
        }
        this.schedule.addSample(now() - sentAt);
        this.vouched = true;
        this.arm();
        this.listener.onChange();
        return;
      }
      case "error":
        this.end(
          frame.code === null
            ? new ServerEndedError(`${this.where()} ended the watch with an ERROR (its code did not arrive)`)
            : errorForCode(frame.code, frame.reason, "server"),
        );
        return;
    }
  }

  private fail(detail: string, cause?: Error): void {
    if (this.over) return;
    this.end(new ConnectionError(detail, this.connected ? "open" : "connect", cause && { cause }));
  }

  private end(error: MonolockError): void {
    if (this.over) return;
    this.stop();
    this.listener.onEnd(error, this.vouched);
  }

  private stop(): void {
    this.over = true;
    this.timer?.cancel();
    this.timer = undefined;
    this.socket.destroy();
  }

  private timeoutError(): MonolockError {
    // The same words as a lock's: the timeout and the lease it comes from.
    const lease = this.options.leaseMs;
    return new ConnectionError(
      `no reply from the server within ${clientTimeoutText(lease)} ms (0.8 x lease of ${lease} ms)`,
      "open",
    );
  }

  private protocolError(detail: string): MonolockError {
    return new ConnectionError(`protocol violation by ${this.where()}: ${detail}`, "open");
  }

  private where(): string {
    return formatAddress(this.options.address);
  }
}

/** A socket to `address`, TLS when `options` are given; `opened` runs once it is ready for the WATCH. */
function openSocket(
  address: ServerAddress,
  options: tls.ConnectionOptions | undefined,
  opened: () => void,
): net.Socket {
  const { host, port } = address;
  if (options) {
    const socket = tls.connect({ servername: net.isIP(host) ? undefined : host, ...options, host, port });
    socket.setNoDelay(true);
    socket.once("secureConnect", opened);
    return socket;
  }
  const socket = net.connect({ host, port, noDelay: true });
  socket.once("connect", opened);
  return socket;
}
