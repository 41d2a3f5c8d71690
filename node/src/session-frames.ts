/**
 * The wire format of a session (protocol version 4): encoders for the
 * client's SESSION, OPEN, ON and RELEASE, and an incremental decoder of the
 * server's frames.
 *
 *     SESSION     [0x05][0x04][lease_ms u32]
 *     OPEN        [0x06][stream u32][a whole ACQUIRE or WATCH]
 *     ON          [0x07][stream u32][a whole PROCLAIM]
 *     RELEASE     [0x08][stream u32]
 *     SESSION_OK  [0x16][max_streams u32]
 *     STREAM      [0x17][stream u32][WAITING | ACQUIRED | EVENT | WATCHING]
 *     RELEASED    [0x18][stream u32]
 *     STREAM_END  [0x19][stream u32][code u8][reason_len u8][reason]
 *     ALIVE       [0x1a]
 *
 * docs/protocol.md, "Version 4: sessions", has the whole design.
 */

import { MessageType, SESSION } from "./constants.js";
import { decodeError, type ErrorFrame, FrameError } from "./frames.js";
import { parseWatchFrame, type WatchFrame } from "./watch-frames.js";

/** The frame a STREAM carries: what a claim or a watch receives on a connection of its own. */
export type StreamInner =
  | { readonly type: "waiting" }
  | { readonly type: "acquired"; readonly token: bigint }
  | Exclude<WatchFrame, ErrorFrame>;

/** A frame a session receives. */
export type SessionFrame =
  | { readonly type: "session_ok"; readonly maxStreams: number }
  | { readonly type: "stream"; readonly stream: number; readonly inner: StreamInner }
  | { readonly type: "released"; readonly stream: number }
  | { readonly type: "stream_end"; readonly stream: number; readonly code: number; readonly reason: string }
  | { readonly type: "alive" }
  /** An ERROR ends the whole session at its type byte, as it ends a claim (see FrameDecoder). */
  | ErrorFrame;

/** SESSION for an already validated lease. */
export function encodeSession(leaseMs: number): Uint8Array {
  const frame = new Uint8Array(6);
  frame[0] = SESSION.SESSION_TYPE;
  frame[1] = SESSION.PROTOCOL_VERSION;
  new DataView(frame.buffer).setUint32(2, leaseMs);
  return frame;
}

/** `type` · stream, then `inner` (a whole frame, type byte included). */
function envelope(type: number, stream: number, inner: Uint8Array): Uint8Array {
  const frame = new Uint8Array(5 + inner.length);
  frame[0] = type;
  new DataView(frame.buffer).setUint32(1, stream);
  frame.set(inner, 5);
  return frame;
}

/** OPEN of `stream` (1..2^32-1) carrying a whole ACQUIRE (any version) or WATCH. */
export function encodeOpen(stream: number, inner: Uint8Array): Uint8Array {
  return envelope(SESSION.OPEN_TYPE, stream, inner);
}

/** ON of `stream` carrying a whole PROCLAIM. */
export function encodeOn(stream: number, proclaim: Uint8Array): Uint8Array {
  return envelope(SESSION.ON_TYPE, stream, proclaim);
}

/** RELEASE of `stream`. */
export function encodeRelease(stream: number): Uint8Array {
  return envelope(SESSION.RELEASE_TYPE, stream, new Uint8Array(0));
}

const EMPTY = new Uint8Array(0);
const reasonDecoder = new TextDecoder("utf-8"); // lenient: the reason is for humans

/**
 * Incremental decoder of a session's server frames. Feed it chunks as they
 * arrive; a frame may be split over any number of chunks and one chunk may
 * hold several. Only a frame's remainder is buffered.
 */
export class SessionDecoder {
  /** Bytes of an incomplete frame, starting at its type byte. */
  private pending: Uint8Array = EMPTY;
  private started = false;
  /** An ERROR has been handed on: nothing more is decoded. */
  private ended = false;

  /**
   * Appends `chunk` and returns every frame now complete, in order. Throws
   * {@link FrameError} at a type byte no session frame starts with (outer,
   * or inside a STREAM) and at a malformed EVENT: the stream cannot be
   * resynchronised after either.
   */
  push(chunk: Uint8Array): SessionFrame[] {
    if (this.ended) return [];
    const buf = this.pending.length === 0 ? chunk : concat(this.pending, chunk);
    const frames: SessionFrame[] = [];
    let pos = 0;
    while (pos < buf.length) {
      if (buf[pos] === MessageType.ERROR) {
        // The last message of a session: never wait for the rest of it.
        const reasonLen = buf[pos + 2];
        const end = reasonLen === undefined ? buf.length : Math.min(buf.length, pos + 3 + reasonLen);
        frames.push(decodeError(buf.subarray(pos, end)));
        this.ended = true;
        this.pending = EMPTY;
        return frames;
      }
      const parsed = this.parse(buf, pos);
      if (parsed === undefined) break;
      this.started = true;
      frames.push(parsed.frame);
      pos = parsed.end;
    }
    this.pending = pos === buf.length ? EMPTY : buf.slice(pos);
    return frames;
  }

  /** Number of buffered bytes of an incomplete frame. */
  get buffered(): number {
    return this.pending.length;
  }

  /** The frame at `pos` and where it ends, or undefined while it is incomplete. */
  private parse(buf: Uint8Array, pos: number): { frame: SessionFrame; end: number } | undefined {
    const have = buf.length - pos;
    const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    const stream = (): number => view.getUint32(pos + 1);
    switch (buf[pos]) {
      case SESSION.ALIVE_TYPE:
        return { frame: { type: "alive" }, end: pos + 1 };
      case SESSION.SESSION_OK_TYPE:
        return have < 5 ? undefined : { frame: { type: "session_ok", maxStreams: stream() }, end: pos + 5 };
      case SESSION.RELEASED_TYPE:
        return have < 5 ? undefined : { frame: { type: "released", stream: stream() }, end: pos + 5 };
      case SESSION.STREAM_END_TYPE: {
        const reasonLen = buf[pos + 6];
        if (reasonLen === undefined || have < 7 + reasonLen) return undefined;
        const code = buf[pos + 5] ?? 0;
        const reason = reasonDecoder.decode(buf.subarray(pos + 7, pos + 7 + reasonLen));
        return { frame: { type: "stream_end", stream: stream(), code, reason }, end: pos + 7 + reasonLen };
      }
      case SESSION.STREAM_TYPE: {
        if (have < 6) return undefined;
        const inner = this.parseInner(buf, view, pos + 5);
        return inner === undefined
          ? undefined
          : { frame: { type: "stream", stream: stream(), inner: inner.frame }, end: inner.end };
      }
      default:
        throw this.unexpected(buf, pos, "", !this.started);
    }
  }

  /** The frame inside a STREAM, at `at`. */
  private parseInner(buf: Uint8Array, view: DataView, at: number): { frame: StreamInner; end: number } | undefined {
    switch (buf[at]) {
      case MessageType.WAITING:
        return { frame: { type: "waiting" }, end: at + 1 };
      case MessageType.ACQUIRED:
        return buf.length < at + 9
          ? undefined
          : { frame: { type: "acquired", token: view.getBigUint64(at + 1) }, end: at + 9 };
      default: {
        const parsed = parseWatchFrame(buf, at);
        if (parsed === null) throw this.unexpected(buf, at, " inside a STREAM", false);
        if (parsed === undefined) return undefined;
        return { frame: parsed.frame as StreamInner, end: parsed.end };
      }
    }
  }

  /** `atStart`: the stream's first byte, so the peer speaks something else than monolock. */
  private unexpected(buf: Uint8Array, at: number, where: string, atStart: boolean): FrameError {
    const type = (buf[at] ?? 0).toString(16).padStart(2, "0");
    return new FrameError(`unexpected message type 0x${type}${where} from server`, buf.slice(at), atStart);
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}
