/**
 * The session core: the protocol decisions of one connection (one claim on
 * one lock), with no sockets and no clock. The owner feeds it what happened
 * (connected, bytes received, end of stream, the application let go, time
 * passed) together with the current time, and carries out the actions it
 * returns, in order. `spec/vectors/session.json` runs against this class.
 *
 * Every input first lets time pass, so a deadline that has gone by is acted
 * on before the input itself: an ack that arrives at the deadline is late.
 */

import { encodeClaim, encodeHeartbeat, encodeProclaim, FrameDecoder, FrameError, type ServerFrame } from "./frames.js";
import { HeartbeatSchedule } from "./heartbeat.js";
import type { CertificateSide } from "./tlscert.js";
import type { SharedClaim } from "./validate.js";

/** Why a claim ended. */
export type Cause =
  | { readonly kind: "timeout" }
  | { readonly kind: "io"; readonly detail: string }
  /** An ERROR frame; `code` is null when the session ended at its type byte, before the code came. */
  | { readonly kind: "server"; readonly code: number | null; readonly reason: string }
  | { readonly kind: "protocol"; readonly detail: string }
  /** The first bytes from the server start no server message: it is something else. */
  | { readonly kind: "not_monolock"; readonly sent: Uint8Array }
  /** The TLS layer refused a certificate (whose: `side`): it would be refused again. */
  | { readonly kind: "certificate"; readonly side: CertificateSide; readonly detail: string }
  | { readonly kind: "busy" };

/** A request the core writes; each is owed exactly one reply. */
export type RequestFrame = "ACQUIRE" | "HEARTBEAT" | "PROCLAIM";

/** What the owner must do, in the order given. */
export type Action =
  | { readonly type: "send"; readonly frame: RequestFrame; readonly bytes: Uint8Array }
  /** The ACQUIRE was answered with WAITING. */
  | { readonly type: "waiting" }
  /** The lock is granted (at ACQUIRE or by promotion). */
  | { readonly type: "grant"; readonly token: bigint }
  /** The PROCLAIM numbered `seq`, and every earlier one, is acknowledged. */
  | { readonly type: "proclaimed"; readonly seq: number }
  /** A held lock is lost: tell every polled check and push signal, now. */
  | { readonly type: "lost"; readonly cause: Cause }
  /** A claim that was never held ended. */
  | { readonly type: "fail"; readonly cause: Cause }
  /**
   * Close the connection. `handBack` is set when a valid held lock is
   * released: the owner may wait for the server to confirm it is free.
   */
  | { readonly type: "close"; readonly handBack: boolean };

/** Where the claim stands. `lost`: told, connection kept until release or lease. */
export type CoreState = "connecting" | "waiting" | "held" | "lost" | "closed";

/** Settings of one claim. */
export interface CoreOptions {
  readonly leaseMs: number;
  /** The lock name's wire bytes (already validated). */
  readonly name: Uint8Array;
  /** `"try"`: WAITING means busy. */
  readonly mode: "wait" | "try";
  /** A shared claim (sent as a version 2 ACQUIRE); absent: exclusive, sent as version 1. */
  readonly shared?: SharedClaim | undefined;
  /** The claim's value (already validated, not empty): sent as a version 3 ACQUIRE. */
  readonly value?: Uint8Array | undefined;
}

/** The sans-IO state machine of one connection. Times are milliseconds on one monotonic clock. */
export class SessionCore {
  private current: CoreState = "connecting";
  private readonly schedule: HeartbeatSchedule;
  private readonly decoder = new FrameDecoder();
  /** Set once the stream carried garbage after a loss: nothing after it can be parsed. */
  private garbled = false;
  /** Send time of the last acknowledged request (the ACQUIRE's own before its reply). */
  private ackedSendAt: number | undefined;
  /** Send time of the request awaiting its reply (at most one). */
  private inFlightSince: number | undefined;
  private lastSendAt = 0;
  private token: bigint | undefined;
  /**
   * PROCLAIMs (protocol version 3), numbered as they are handed in. The
   * newest not yet sent waits in `pending` until nothing is in flight and
   * then goes instead of a heartbeat: it is owed one reply and refreshes
   * the lease as a HEARTBEAT does.
   */
  private proclaims = 0;
  private pending: { readonly seq: number; readonly bytes: Uint8Array } | undefined;
  /** The PROCLAIM in flight; 0 when the request in flight is another one. */
  private inFlightSeq = 0;

  constructor(private readonly options: CoreOptions) {
    this.schedule = new HeartbeatSchedule(options.leaseMs);
  }

  get state(): CoreState {
    return this.current;
  }

  /**
   * The validity deadline: sendTime(last acknowledged ACQUIRE/HEARTBEAT) +
   * 0.8 × lease. The lock is valid strictly before it. It does not move after
   * a loss. `NaN` before {@link connect}.
   */
  get validUntil(): number {
    return (this.ackedSendAt ?? Number.NaN) + this.schedule.clientTimeoutMs;
  }

  /** After a loss the connection is kept until then: sendTime(last acked) + lease, the server's earliest let-go. */
  get closeAt(): number {
    return (this.ackedSendAt ?? Number.NaN) + this.options.leaseMs;
  }

  /** When the owner must call {@link tick} next, or `undefined` if nothing is due. */
  get nextWakeAt(): number | undefined {
    switch (this.current) {
      case "lost":
        return this.closeAt;
      case "closed":
        return undefined;
      default: {
        if (this.ackedSendAt === undefined) return undefined; // not connected yet
        const due = this.heartbeatDueAt();
        return due === undefined ? this.validUntil : Math.min(due, this.validUntil);
      }
    }
  }

  /** The connection is open: send ACQUIRE. */
  connect(now: number): Action[] {
    const out: Action[] = [];
    if (this.current !== "connecting" || this.ackedSendAt !== undefined) return out;
    this.ackedSendAt = now; // no reply within the client timeout means a dead connection
    this.send(out, "ACQUIRE", this.acquireFrame(), now);
    return out;
  }

  private acquireFrame(): Uint8Array {
    const { name, leaseMs, shared, value } = this.options;
    return encodeClaim(name, leaseMs, shared, value);
  }

  /**
   * The application replaces the claim's value (already validated; the
   * claim's ACQUIRE was version 3). It goes at once when nothing is in
   * flight, else right after the reply owed; a newer value replaces one not
   * sent yet. `seq` is its number, which a `proclaimed` action reaches once
   * the server has it; 0 when the claim neither waits nor holds (nothing is
   * sent).
   */
  proclaim(value: Uint8Array, now: number): { seq: number; actions: Action[] } {
    const out: Action[] = [];
    this.advance(out, now);
    if (this.current !== "waiting" && this.current !== "held") return { seq: 0, actions: out };
    this.proclaims += 1;
    this.pending = { seq: this.proclaims, bytes: encodeProclaim(value) };
    this.heartbeat(out, now);
    return { seq: this.proclaims, actions: out };
  }

  /** Bytes from the server (any split: frames may span or share chunks). */
  receive(bytes: Uint8Array, now: number): Action[] {
    const out: Action[] = [];
    this.advance(out, now);
    if (this.current === "closed" || this.garbled) return out;
    let frames: ServerFrame[];
    try {
      frames = this.decoder.push(bytes);
    } catch (err) {
      if (!(err instanceof FrameError)) throw err;
      if (this.current === "lost") this.garbled = true;
      else if (err.atStart) this.end(out, { kind: "not_monolock", sent: err.bytes });
      else this.end(out, { kind: "protocol", detail: err.message });
      return out;
    }
    for (const frame of frames) this.onFrame(out, frame, now);
    this.heartbeat(out, now);
    return out;
  }

  /** The server ended the connection (EOF, reset, I/O error), or it could not be opened. */
  eof(now: number, detail = "connection closed"): Action[] {
    const out: Action[] = [];
    this.advance(out, now);
    this.end(out, { kind: "io", detail });
    return out;
  }

  /**
   * The TLS handshake failed on a certificate (with TLS 1.3 the server's
   * refusal of ours comes on the first read, after the ACQUIRE was sent):
   * the claim ends as {@link eof} would, with a cause that says so.
   */
  certificateRefused(now: number, side: CertificateSide, detail: string): Action[] {
    const out: Action[] = [];
    this.advance(out, now);
    this.end(out, { kind: "certificate", side, detail });
    return out;
  }

  /** The application lets go (release, cancel, deadline, scope exit): close at once. */
  release(now: number): Action[] {
    const out: Action[] = [];
    this.advance(out, now);
    if (this.current !== "closed") {
      const handBack = this.current === "held";
      this.current = "closed";
      out.push({ type: "close", handBack });
    }
    return out;
  }

  /** Time has passed: deadlines, heartbeats, the close after a loss. Also the polled checks' entry. */
  tick(now: number): Action[] {
    const out: Action[] = [];
    this.advance(out, now);
    this.heartbeat(out, now);
    return out;
  }

  /** Acts on the deadlines that `now` has reached. */
  private advance(out: Action[], now: number): void {
    if (this.ackedSendAt === undefined) return;
    if (this.current !== "lost" && this.current !== "closed" && now >= this.validUntil) {
      if (this.current === "held") {
        // Tell first; keep the connection, since closing it would let the
        // server hand the lock on before sendTime + lease.
        this.current = "lost";
        out.push({ type: "lost", cause: { kind: "timeout" } });
      } else {
        this.current = "closed";
        out.push({ type: "fail", cause: { kind: "timeout" } }, { type: "close", handBack: false });
      }
    }
    if (this.current === "lost" && now >= this.closeAt) {
      this.current = "closed";
      out.push({ type: "close", handBack: false });
    }
  }

  private onFrame(out: Action[], frame: ServerFrame, now: number): void {
    if (this.current === "closed") return; // an earlier frame of the chunk ended the claim
    if (frame.type === "error") {
      // After a loss nothing more is told: `end` only closes.
      this.end(out, { kind: "server", code: frame.code, reason: frame.reason });
    } else if (this.current === "lost") {
      // A late ack never revives a lost lock.
    } else if (frame.type === "waiting") {
      this.onWaiting(out, now);
    } else {
      this.onAcquired(out, frame.token, now);
    }
  }

  private onWaiting(out: Action[], now: number): void {
    if (this.current === "held") {
      this.end(out, { kind: "protocol", detail: "WAITING after the grant" });
    } else if (this.acknowledge(out, now) && this.current === "connecting") {
      if (this.options.mode === "try") {
        this.end(out, { kind: "busy" });
      } else {
        this.current = "waiting";
        out.push({ type: "waiting" });
      }
    }
  }

  private onAcquired(out: Action[], token: bigint, now: number): void {
    if (this.current === "held") {
      // Only the ack of our heartbeat, with our token.
      if (token === this.token) this.acknowledge(out, now);
      else this.end(out, { kind: "protocol", detail: `token changed to ${token}` });
      return;
    }
    // While connecting it answers the ACQUIRE; while waiting it is the
    // promotion, and the ack of an in-flight heartbeat still follows.
    if (this.current === "connecting" && !this.acknowledge(out, now)) return;
    this.current = "held";
    this.token = token;
    out.push({ type: "grant", token });
  }

  /** Books a reply as the ack of the request in flight; false (and ended) if none was. */
  private acknowledge(out: Action[], now: number): boolean {
    const sentAt = this.inFlightSince;
    if (sentAt === undefined) {
      this.end(out, { kind: "protocol", detail: "reply without a request" });
      return false;
    }
    this.inFlightSince = undefined;
    this.schedule.addSample(now - sentAt);
    this.ackedSendAt = sentAt;
    if (this.inFlightSeq !== 0) {
      out.push({ type: "proclaimed", seq: this.inFlightSeq });
      this.inFlightSeq = 0;
    }
    return true;
  }

  /**
   * The next request: a pending PROCLAIM at once, else a heartbeat
   * `interval` after the previous send; never before the ack of the one in
   * flight.
   */
  private heartbeatDueAt(): number | undefined {
    if (this.current !== "waiting" && this.current !== "held") return undefined;
    if (this.inFlightSince !== undefined) return undefined;
    if (this.pending !== undefined) return this.lastSendAt;
    return this.lastSendAt + this.schedule.intervalMs;
  }

  /** Sends the request that is due, if any: a pending PROCLAIM stands in for the heartbeat. */
  private heartbeat(out: Action[], now: number): void {
    const due = this.heartbeatDueAt();
    if (due === undefined || now < due) return;
    const proclaim = this.pending;
    if (proclaim === undefined) {
      this.send(out, "HEARTBEAT", encodeHeartbeat(), now);
      return;
    }
    this.pending = undefined;
    this.inFlightSeq = proclaim.seq;
    this.send(out, "PROCLAIM", proclaim.bytes, now);
  }

  private send(out: Action[], frame: RequestFrame, bytes: Uint8Array, now: number): void {
    this.lastSendAt = now;
    this.inFlightSince = now;
    out.push({ type: "send", frame, bytes });
  }

  /** The claim ends by itself: tell (lost or fail; nothing more after a loss was told), then close. */
  private end(out: Action[], cause: Cause): void {
    if (this.current === "closed") return;
    if (this.current === "held") out.push({ type: "lost", cause });
    else if (this.current !== "lost") out.push({ type: "fail", cause });
    this.current = "closed";
    out.push({ type: "close", handBack: false });
  }
}
