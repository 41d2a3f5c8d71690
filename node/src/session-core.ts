/**
 * The sans-IO core of a session (protocol version 4): one connection, one
 * lease, many claims, each a stream with an id. No sockets and no clock:
 * the owner feeds it what happened with the current time and carries out
 * the actions it returns, in order.
 *
 * The clock is a single claim's (core.ts): one request in flight (SESSION,
 * then HEARTBEATs on the schedule of heartbeat.ts), and every claim of the
 * session is valid until the send of the last answered one + 0.8 × lease.
 * When that passes, the connection ends, or an ERROR's type byte arrives,
 * every held claim is lost, told before the connection is closed.
 *
 * Every input first lets time pass, so a deadline that has gone by is acted
 * on before the input itself: an ack that arrives at the deadline is late.
 */

import { RELEASE_WAIT_MS, SESSION } from "./constants.js";
import type { Cause } from "./core.js";
import { encodeClaim, encodeHeartbeat, encodeProclaim, FrameError } from "./frames.js";
import { HeartbeatSchedule } from "./heartbeat.js";
import {
  encodeOn,
  encodeOpen,
  encodeRelease,
  encodeSession,
  SessionDecoder,
  type SessionFrame,
  type StreamInner,
} from "./session-frames.js";
import type { SharedClaim } from "./validate.js";
import { encodeWatch } from "./watch-frames.js";

/** What the owner must do, in the order given. */
export type SessionAction =
  | { readonly type: "send"; readonly bytes: Uint8Array }
  /** SESSION_OK: the session is open and may carry `maxStreams` streams at once. */
  | { readonly type: "ready"; readonly maxStreams: number }
  /** The stream's OPEN was answered WAITING. */
  | { readonly type: "waiting"; readonly stream: number }
  /** The stream's claim is granted (at OPEN or by promotion). */
  | { readonly type: "grant"; readonly stream: number; readonly token: bigint }
  /** The ON numbered `seq` of the stream is answered. */
  | { readonly type: "proclaimed"; readonly stream: number; readonly seq: number }
  /** An EVENT or WATCHING of a watch stream. */
  | {
      readonly type: "watch";
      readonly stream: number;
      readonly frame: Exclude<StreamInner, { type: "waiting" | "acquired" }>;
    }
  /**
   * An ALIVE answered the HEARTBEAT sent at `sentAt`: it vouches for these
   * watch streams (past their first WATCHING when it was sent) as a
   * WATCHING of their last event would.
   */
  | { readonly type: "vouched"; readonly streams: readonly number[]; readonly sentAt: number }
  /** A watch stream ended by itself (STREAM_END), or with the session. */
  | { readonly type: "watch_end"; readonly stream: number; readonly cause: Cause }
  /** A held claim is lost: tell it now. */
  | { readonly type: "lost"; readonly stream: number; readonly cause: Cause }
  /** A claim not yet granted ended (refused, busy, or the session ended). */
  | { readonly type: "fail"; readonly stream: number; readonly cause: Cause }
  /** A release is done: RELEASED came, its wait ran out, or the session ended. */
  | { readonly type: "released"; readonly stream: number }
  /** The session no longer vouches for anything; comes after every stream was told. */
  | { readonly type: "ended"; readonly cause: Cause }
  /** Close the connection; `handBack`: the application closed a live session (FIN, then wait for the server). */
  | { readonly type: "close"; readonly handBack: boolean };

/** `lost`: ended by its deadline, every stream told; the connection is kept until the server's lease surely ran out. */
export type SessionState = "connecting" | "open" | "lost" | "closed";

/** A validated claim, as a stream's OPEN carries it. */
export interface StreamClaimRequest {
  readonly name: Uint8Array;
  readonly shared: SharedClaim | undefined;
  /** Not empty, else undefined. */
  readonly value: Uint8Array | undefined;
  /** `"try"`: WAITING means busy, and the stream is released at once. */
  readonly mode: "wait" | "try";
}

/** The reply a stream is owed: its OPEN's (0) or an ON's (its number). */
type Owed = number;

interface Stream {
  readonly kind: "claim" | "watch";
  /** A watch: `opening` until its first WATCHING, then `watching`. */
  state: "opening" | "waiting" | "held" | "watching" | "releasing";
  readonly mode: "wait" | "try";
  /** Replies owed, oldest first. */
  readonly owed: Owed[];
  token: bigint | undefined;
  /** When a release stops waiting for RELEASED. */
  releaseBy: number;
  /** Released because the claim failed (a try's WAITING: busy): told as that failure when the release is done. */
  abandon?: Cause;
}

/** The sans-IO state machine of one session. Times are milliseconds on one monotonic clock. */
export class SessionCore {
  private current: SessionState = "connecting";
  private readonly schedule: HeartbeatSchedule;
  private readonly decoder = new SessionDecoder();
  private readonly streams = new Map<number, Stream>();
  /** The highest id opened; every id up to it was opened once and is never reused. */
  private highest = 0;
  private ons = 0;
  private garbled = false;
  private ackedSendAt: number | undefined;
  private inFlightSince: number | undefined;
  private lastSendAt = 0;
  /** The watch streams past their first WATCHING when the HEARTBEAT in flight was sent. */
  private vouchable: number[] = [];
  /** How long a release waits for RELEASED: as a single claim's release waits for the server's close. */
  private readonly releaseWaitMs: number;

  constructor(private readonly leaseMs: number) {
    this.schedule = new HeartbeatSchedule(leaseMs);
    this.releaseWaitMs = Math.min(this.schedule.clientTimeoutMs, RELEASE_WAIT_MS);
  }

  get state(): SessionState {
    return this.current;
  }

  /** Streams the server may count as open: opened, not yet ended or answered RELEASED. */
  get openStreams(): number {
    return this.streams.size;
  }

  /** Whether no id is left for another OPEN: a new session is needed. */
  get exhausted(): boolean {
    return this.highest >= SESSION.MAX_STREAM_ID;
  }

  /** How many more OPENs the session's ids allow. */
  get idsLeft(): number {
    return SESSION.MAX_STREAM_ID - this.highest;
  }

  /** Every claim's validity deadline: sendTime(last answered SESSION/HEARTBEAT) + 0.8 × lease. `NaN` before {@link connect}. */
  get validUntil(): number {
    return (this.ackedSendAt ?? Number.NaN) + this.schedule.clientTimeoutMs;
  }

  /** After a loss by the deadline the connection is kept until then: the server's earliest let-go. */
  get closeAt(): number {
    return (this.ackedSendAt ?? Number.NaN) + this.leaseMs;
  }

  /** When the owner must call {@link tick} next, or `undefined` if nothing is due. */
  get nextWakeAt(): number | undefined {
    if (this.current === "closed" || this.ackedSendAt === undefined) return undefined;
    if (this.current === "lost") return this.closeAt;
    let at = this.validUntil;
    const due = this.heartbeatDueAt();
    if (due !== undefined) at = Math.min(at, due);
    for (const s of this.streams.values()) if (s.state === "releasing") at = Math.min(at, s.releaseBy);
    return at;
  }

  /** The connection is open: send SESSION. */
  connect(now: number): SessionAction[] {
    const out: SessionAction[] = [];
    if (this.current !== "connecting" || this.ackedSendAt !== undefined) return out;
    this.ackedSendAt = now; // no reply within the client timeout means a dead connection
    this.send(out, encodeSession(this.leaseMs), now);
    return out;
  }

  /**
   * Opens a stream for `claim`: sends OPEN with the whole ACQUIRE, in the
   * version a single claim would use, with the session's lease. Returns its
   * id, 0 when the session is not open or has no id left (nothing sent).
   */
  open(claim: StreamClaimRequest, now: number): { stream: number; actions: SessionAction[] } {
    const out: SessionAction[] = [];
    this.advance(out, now);
    if (this.current !== "open" || this.exhausted) return { stream: 0, actions: out };
    const id = ++this.highest;
    this.streams.set(id, {
      kind: "claim",
      state: "opening",
      mode: claim.mode,
      owed: [0],
      token: undefined,
      releaseBy: 0,
    });
    const acquire = encodeClaim(claim.name, this.leaseMs, claim.shared, claim.value);
    out.push({ type: "send", bytes: encodeOpen(id, acquire) });
    this.heartbeat(out, now);
    return { stream: id, actions: out };
  }

  /**
   * Opens a watch stream of `name` (validated) from (epoch, seq): sends OPEN
   * with the WATCH. Returns its id, 0 when the session is not open or has
   * no id left (nothing sent).
   */
  openWatch(name: Uint8Array, epoch: bigint, seq: bigint, now: number): { stream: number; actions: SessionAction[] } {
    const out: SessionAction[] = [];
    this.advance(out, now);
    if (this.current !== "open" || this.exhausted) return { stream: 0, actions: out };
    const id = ++this.highest;
    this.streams.set(id, { kind: "watch", state: "opening", mode: "wait", owed: [], token: undefined, releaseBy: 0 });
    out.push({ type: "send", bytes: encodeOpen(id, encodeWatch(name, this.leaseMs, epoch, seq)) });
    this.heartbeat(out, now);
    return { stream: id, actions: out };
  }

  /**
   * Replaces a held claim's value (validated; the claim was opened with a
   * value): sends ON with a PROCLAIM. Returns its number, which a
   * `proclaimed` action reaches once the server answers it, or 0 when the
   * stream does not hold (nothing sent).
   */
  proclaim(stream: number, value: Uint8Array, now: number): { seq: number; actions: SessionAction[] } {
    const out: SessionAction[] = [];
    this.advance(out, now);
    const s = this.streams.get(stream);
    if (this.current !== "open" || s?.state !== "held") return { seq: 0, actions: out };
    const seq = ++this.ons;
    s.owed.push(seq);
    out.push({ type: "send", bytes: encodeOn(stream, encodeProclaim(value)) });
    this.heartbeat(out, now);
    return { seq, actions: out };
  }

  /**
   * The application lets go of a stream (release, abort, deadline): sends
   * RELEASE. For the client the claim is released now; frames of it after
   * this are dropped. `released` follows when RELEASED comes, after the
   * release wait, or at the session's end; at once if nothing is left to
   * release.
   */
  release(stream: number, now: number): SessionAction[] {
    const out: SessionAction[] = [];
    this.advance(out, now);
    const s = this.streams.get(stream);
    if (s === undefined) {
      out.push({ type: "released", stream });
    } else if (s.state !== "releasing") {
      this.startRelease(out, stream, s, now);
    }
    this.heartbeat(out, now);
    return out;
  }

  /** Bytes from the server (any split). */
  receive(bytes: Uint8Array, now: number): SessionAction[] {
    const out: SessionAction[] = [];
    this.advance(out, now);
    if (this.current === "closed" || this.garbled) return out;
    let frames: SessionFrame[];
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

  /** The connection ended (EOF, reset, I/O error), or could not be opened. */
  eof(now: number, detail = "connection closed"): SessionAction[] {
    const out: SessionAction[] = [];
    this.advance(out, now);
    this.end(out, { kind: "io", detail });
    return out;
  }

  /**
   * The application closes the session: every claim counts as released
   * (held, waiting or being released; none is told lost, nothing failed),
   * a watch ends, and the connection is closed (handed back, so the server
   * releases every claim at once, when live). No `ended`: a close is no end
   * of the session's own.
   */
  close(now: number): SessionAction[] {
    const out: SessionAction[] = [];
    this.advance(out, now);
    if (this.current === "closed") return out;
    const live = this.current === "open" || this.current === "connecting";
    const cause: Cause = { kind: "io", detail: "the session was closed" };
    for (const [id, s] of [...this.streams].sort((a, b) => a[0] - b[0])) {
      if (s.kind === "watch" && s.state !== "releasing") out.push({ type: "watch_end", stream: id, cause });
      else out.push({ type: "released", stream: id });
    }
    this.streams.clear();
    this.current = "closed";
    out.push({ type: "close", handBack: live });
    return out;
  }

  /** Time has passed: deadlines, heartbeats, release waits, the close after a loss. */
  tick(now: number): SessionAction[] {
    const out: SessionAction[] = [];
    this.advance(out, now);
    this.heartbeat(out, now);
    return out;
  }

  private advance(out: SessionAction[], now: number): void {
    if (this.ackedSendAt === undefined) return;
    if ((this.current === "open" || this.current === "connecting") && now >= this.validUntil) {
      // Tell first, then keep the connection: closing it would let the
      // server hand the claims on (a grant may be on its way) before
      // sendTime + lease.
      const cause: Cause = { kind: "timeout" };
      this.tellAll(out, cause);
      out.push({ type: "ended", cause });
      this.current = "lost";
    }
    if (this.current === "lost" && now >= this.closeAt) {
      this.current = "closed";
      out.push({ type: "close", handBack: false });
    }
    if (this.current !== "open") return;
    for (const [id, s] of this.streams) {
      if (s.state === "releasing" && now >= s.releaseBy) {
        this.streams.delete(id);
        this.releaseDone(out, id, s);
      }
    }
  }

  private onFrame(out: SessionAction[], frame: SessionFrame, now: number): void {
    if (this.current === "closed") return; // an earlier frame of the chunk ended the session
    if (frame.type === "error") {
      this.end(out, { kind: "server", code: frame.code, reason: frame.reason });
      return;
    }
    if (this.current === "lost") return; // a late frame never revives a lost session
    switch (frame.type) {
      case "session_ok":
        if (this.current !== "connecting") {
          this.violation(out, "a second SESSION_OK");
          return;
        }
        if (!this.acknowledge(out, now)) return;
        this.current = "open";
        out.push({ type: "ready", maxStreams: frame.maxStreams });
        return;
      case "alive": {
        if (this.current !== "open") {
          this.violation(out, "ALIVE before SESSION_OK");
          return;
        }
        const sentAt = this.inFlightSince;
        if (!this.acknowledge(out, now) || sentAt === undefined) return;
        const streams = this.vouchable.filter((id) => this.streams.get(id)?.state === "watching");
        if (streams.length > 0) out.push({ type: "vouched", streams, sentAt });
        return;
      }
      case "stream":
        this.onStream(out, frame.stream, frame.inner, now);
        return;
      case "released":
        this.onReleased(out, frame.stream);
        return;
      case "stream_end":
        this.onStreamEnd(out, frame.stream, { kind: "server", code: frame.code, reason: frame.reason });
        return;
    }
  }

  /** The stream's entry, or undefined when its frames are dropped (released or ended); a violation for an id never opened. */
  private known(out: SessionAction[], stream: number, what: string): Stream | undefined {
    if (stream === 0 || stream > this.highest || this.current !== "open") {
      this.violation(out, `${what} of stream ${stream}, never opened`);
      return undefined;
    }
    const s = this.streams.get(stream);
    return s?.state === "releasing" ? undefined : s;
  }

  private onStream(out: SessionAction[], id: number, inner: StreamInner, now: number): void {
    const s = this.known(out, id, "STREAM");
    if (s === undefined) return;
    if (s.kind === "watch") {
      if (inner.type === "waiting" || inner.type === "acquired") {
        this.violation(out, `a claim's frame on watch stream ${id}`);
        return;
      }
      if (inner.type === "watching") s.state = "watching";
      out.push({ type: "watch", stream: id, frame: inner });
      return;
    }
    if (inner.type === "waiting") {
      if (s.state === "held") {
        this.violation(out, `WAITING after the grant on stream ${id}`);
        return;
      }
      const owed = s.owed.shift();
      if (owed === undefined) {
        this.violation(out, `a reply without a request on stream ${id}`);
        return;
      }
      if (owed !== 0) {
        out.push({ type: "proclaimed", stream: id, seq: owed });
      } else if (s.mode === "try") {
        // Busy: give the place in the queue up at once; the claim fails
        // when the release is done (RELEASED), so no grant of it is left.
        this.startRelease(out, id, s, now);
        s.abandon = { kind: "busy" };
      } else {
        s.state = "waiting";
        out.push({ type: "waiting", stream: id });
      }
    } else if (inner.type === "acquired") {
      if (s.state === "held") {
        // Only the answer to an ON, with the stream's token.
        if (inner.token !== s.token) {
          this.violation(out, `token of stream ${id} changed to ${inner.token}`);
          return;
        }
        const owed = s.owed.shift();
        if (owed === undefined) {
          this.violation(out, `a reply without a request on stream ${id}`);
          return;
        }
        out.push({ type: "proclaimed", stream: id, seq: owed });
        return;
      }
      // While opening it answers the OPEN; while waiting it is the
      // promotion, and the answer of an ON in flight still follows.
      if (s.state === "opening") s.owed.shift();
      s.state = "held";
      s.token = inner.token;
      out.push({ type: "grant", stream: id, token: inner.token });
    } else {
      this.violation(out, `a watch frame on claim stream ${id}`);
    }
  }

  private onReleased(out: SessionAction[], id: number): void {
    if (id === 0 || id > this.highest) {
      this.violation(out, `RELEASED of stream ${id}, never opened`);
      return;
    }
    const s = this.streams.get(id);
    if (s === undefined) return; // its release wait had run out
    if (s.state !== "releasing") {
      this.violation(out, `RELEASED of stream ${id}, not released`);
      return;
    }
    this.streams.delete(id);
    this.releaseDone(out, id, s);
  }

  /** A release is done: released, or the failure it was made for (busy). */
  private releaseDone(out: SessionAction[], id: number, s: Stream): void {
    if (s.abandon !== undefined) out.push({ type: "fail", stream: id, cause: s.abandon });
    else out.push({ type: "released", stream: id });
  }

  /** A stream ended by itself: a claim not yet granted fails, a held one is lost, with the code. */
  private onStreamEnd(out: SessionAction[], id: number, cause: Cause): void {
    if (id === 0 || id > this.highest) {
      this.violation(out, `STREAM_END of stream ${id}, never opened`);
      return;
    }
    const s = this.streams.get(id);
    if (s === undefined) return;
    if (s.state === "releasing") return; // it crossed the RELEASE: RELEASED follows
    this.streams.delete(id);
    if (s.kind === "watch") out.push({ type: "watch_end", stream: id, cause });
    else if (s.state === "held") out.push({ type: "lost", stream: id, cause });
    else out.push({ type: "fail", stream: id, cause });
  }

  private startRelease(out: SessionAction[], id: number, s: Stream, now: number): void {
    s.state = "releasing";
    s.releaseBy = now + this.releaseWaitMs;
    out.push({ type: "send", bytes: encodeRelease(id) });
  }

  /** Books a SESSION_OK or ALIVE as the ack of the request in flight; false (and ended) if none was. */
  private acknowledge(out: SessionAction[], now: number): boolean {
    const sentAt = this.inFlightSince;
    if (sentAt === undefined) {
      this.violation(out, "a reply without a request");
      return false;
    }
    this.inFlightSince = undefined;
    this.schedule.addSample(now - sentAt);
    this.ackedSendAt = sentAt;
    return true;
  }

  private heartbeatDueAt(): number | undefined {
    if (this.current !== "open" || this.inFlightSince !== undefined) return undefined;
    return this.lastSendAt + this.schedule.intervalMs;
  }

  private heartbeat(out: SessionAction[], now: number): void {
    const due = this.heartbeatDueAt();
    if (due === undefined || now < due) return;
    this.vouchable = [];
    for (const [id, s] of this.streams) if (s.state === "watching") this.vouchable.push(id);
    this.send(out, encodeHeartbeat(), now);
  }

  private send(out: SessionAction[], bytes: Uint8Array, now: number): void {
    this.lastSendAt = now;
    this.inFlightSince = now;
    out.push({ type: "send", bytes });
  }

  private violation(out: SessionAction[], detail: string): void {
    this.end(out, { kind: "protocol", detail });
  }

  /** Every stream is told, in id order: a held claim lost, one not granted failed, a release done. */
  private tellAll(out: SessionAction[], cause: Cause): void {
    for (const [id, s] of [...this.streams].sort((a, b) => a[0] - b[0])) {
      if (s.state === "held") out.push({ type: "lost", stream: id, cause });
      else if (s.state === "releasing") this.releaseDone(out, id, s);
      else if (s.kind === "watch") out.push({ type: "watch_end", stream: id, cause });
      else out.push({ type: "fail", stream: id, cause });
    }
    this.streams.clear();
  }

  /** The session ends by itself: tell every stream (nothing more after a loss was told), then close. */
  private end(out: SessionAction[], cause: Cause): void {
    if (this.current === "closed") return;
    if (this.current !== "lost") {
      this.tellAll(out, cause);
      out.push({ type: "ended", cause });
    }
    this.current = "closed";
    out.push({ type: "close", handBack: false });
  }
}
