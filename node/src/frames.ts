/**
 * The wire format: encoders for the client frames (ACQUIRE in versions 1
 * to 3, HEARTBEAT, PROCLAIM) and an incremental decoder for the three
 * server frames.
 */

import { MessageType, PROTOCOL_VERSION, SHARED, VALUE } from "./constants.js";
import type { SharedClaim } from "./validate.js";

/** A frame received from the server. */
export type ServerFrame =
  | { readonly type: "waiting" }
  | { readonly type: "acquired"; readonly token: bigint }
  /**
   * An ERROR, as far as it had arrived: an ERROR ends the session at its
   * type byte, so the decoder hands it on at the end of the chunk that
   * brought that byte. `code` is null when the code byte had not come;
   * `reason` is the reason bytes that had come (U+FFFD for a cut sequence).
   */
  | { readonly type: "error"; readonly code: number | null; readonly reason: string };

/** Encodes ACQUIRE for already validated name bytes and lease. */
export function encodeAcquire(name: Uint8Array, leaseMs: number): Uint8Array {
  const frame = new Uint8Array(8 + name.length);
  const view = new DataView(frame.buffer);
  frame[0] = MessageType.ACQUIRE;
  frame[1] = PROTOCOL_VERSION;
  view.setUint32(2, leaseMs);
  view.setUint16(6, name.length);
  frame.set(name, 8);
  return frame;
}

/**
 * Encodes a protocol version 2 ACQUIRE for already validated name bytes,
 * lease, mode and limit: `[0x01][0x02][lease_ms u32][mode u8][limit u16]
 * [name_len u16][name]`. Clients send it for shared claims only; exclusive
 * claims go out as version 1 ({@link encodeAcquire}), which every server reads.
 */
export function encodeAcquireV2(name: Uint8Array, leaseMs: number, mode: number, limit: number): Uint8Array {
  return encodeAcquireModed(SHARED.PROTOCOL_VERSION, name, leaseMs, mode, limit, 0).frame;
}

/**
 * The layout versions 2 and 3 share, up to the end of the name, in a frame
 * with `extra` bytes left after it; `at` is where they start.
 */
function encodeAcquireModed(
  version: number,
  name: Uint8Array,
  leaseMs: number,
  mode: number,
  limit: number,
  extra: number,
): { frame: Uint8Array; view: DataView; at: number } {
  const frame = new Uint8Array(11 + name.length + extra);
  const view = new DataView(frame.buffer);
  frame[0] = MessageType.ACQUIRE;
  frame[1] = version;
  view.setUint32(2, leaseMs);
  frame[6] = mode;
  view.setUint16(7, limit);
  view.setUint16(9, name.length);
  frame.set(name, 11);
  return { frame, view, at: 11 + name.length };
}

/**
 * Encodes a protocol version 3 ACQUIRE for already validated name bytes,
 * lease, mode, limit and value (at most 1024 bytes): `[0x01][0x03][lease_ms
 * u32][mode u8][limit u16][name_len u16][name][value_len u16][value]`.
 * Clients send it for claims with a non-empty value only.
 */
export function encodeAcquireV3(
  name: Uint8Array,
  leaseMs: number,
  mode: number,
  limit: number,
  value: Uint8Array,
): Uint8Array {
  const { frame, view, at } = encodeAcquireModed(VALUE.PROTOCOL_VERSION, name, leaseMs, mode, limit, 2 + value.length);
  view.setUint16(at, value.length);
  frame.set(value, at + 2);
  return frame;
}

/**
 * Encodes PROCLAIM for an already validated value (at most 1024 bytes,
 * empty allowed): `[0x03][value_len u16][value]`. It replaces the value of
 * the claim on a connection whose ACQUIRE was version 3. The client does
 * not send it yet.
 */
export function encodeProclaim(value: Uint8Array): Uint8Array {
  const frame = new Uint8Array(3 + value.length);
  frame[0] = VALUE.PROCLAIM_TYPE;
  new DataView(frame.buffer).setUint16(1, value.length);
  frame.set(value, 3);
  return frame;
}

/**
 * The ACQUIRE of a validated claim in the lowest version that says what it
 * needs, so that it works with every server that can serve it: version 3
 * for a claim with a value, 2 for a shared one, 1 for an exclusive one.
 * A single claim sends it as it is, a session inside an OPEN.
 */
export function encodeClaim(
  name: Uint8Array,
  leaseMs: number,
  shared: SharedClaim | undefined,
  value: Uint8Array | undefined,
): Uint8Array {
  if (value !== undefined && value.length > 0) {
    const mode = shared?.mode ?? SHARED.MODE_EXCLUSIVE;
    return encodeAcquireV3(name, leaseMs, mode, shared?.limit ?? 0, value);
  }
  if (shared !== undefined) return encodeAcquireV2(name, leaseMs, shared.mode, shared.limit);
  return encodeAcquire(name, leaseMs);
}

/** The one-byte HEARTBEAT frame. */
export function encodeHeartbeat(): Uint8Array {
  return Uint8Array.of(MessageType.HEARTBEAT);
}

/** The stream carried a byte no server frame starts with. */
export class FrameError extends Error {
  override name = "FrameError";
  /**
   * @param bytes What was received from the bad byte on (for messages).
   * @param atStart The bad byte was the stream's first: the peer speaks
   *   something else than monolock.
   */
  constructor(
    message: string,
    readonly bytes: Uint8Array = new Uint8Array(0),
    readonly atStart = false,
  ) {
    super(message);
  }
}

const reasonDecoder = new TextDecoder("utf-8"); // lenient: the reason is for humans

/** No bytes pending (shared: never written to). */
const EMPTY = new Uint8Array(0);

/**
 * Incremental decoder of server frames from a byte stream. Feed it chunks
 * as they arrive; a frame may be split over any number of chunks, and one
 * chunk may hold several frames. Only a frame's remainder is buffered.
 */
export class FrameDecoder {
  /** Bytes of an incomplete frame, starting at its type byte. */
  private pending: Uint8Array = EMPTY;
  /** Whether a valid type byte has been seen. */
  private started = false;
  /** An ERROR has been handed on: the session is over, nothing more is decoded. */
  private ended = false;

  /**
   * Appends `chunk` and returns every frame now complete, in order.
   * Throws {@link FrameError} at an unknown type byte; the stream cannot
   * be resynchronised after that.
   */
  push(chunk: Uint8Array): ServerFrame[] {
    if (this.ended) return [];
    let buf = chunk;
    if (this.pending.length > 0) {
      buf = new Uint8Array(this.pending.length + chunk.length);
      buf.set(this.pending, 0);
      buf.set(chunk, this.pending.length);
    }
    const frames: ServerFrame[] = [];
    let pos = 0;
    while (pos < buf.length) {
      const size = frameSize(buf, pos);
      if (size === null) {
        const type = (buf[pos] ?? 0).toString(16).padStart(2, "0");
        throw new FrameError(`unexpected message type 0x${type} from server`, buf.slice(pos), !this.started);
      }
      this.started = true;
      if (buf[pos] === MessageType.ERROR) {
        // The last message of a session: never wait for the rest of it.
        frames.push(decodeError(buf.subarray(pos, Math.min(buf.length, pos + (size ?? buf.length)))));
        this.ended = true;
        this.pending = EMPTY;
        return frames;
      }
      if (size === undefined || pos + size > buf.length) break;
      frames.push(decodeFrame(buf, pos));
      pos += size;
    }
    this.pending = pos === buf.length ? EMPTY : buf.slice(pos);
    return frames;
  }

  /** Number of buffered bytes of an incomplete frame. */
  get buffered(): number {
    return this.pending.length;
  }
}

/**
 * Full size of the frame at `pos`, `undefined` while its header is
 * incomplete, `null` if no server frame starts with its type byte.
 */
function frameSize(buf: Uint8Array, pos: number): number | undefined | null {
  const type = buf[pos];
  switch (type) {
    case MessageType.WAITING:
      return 1;
    case MessageType.ACQUIRED:
      return 9;
    case MessageType.ERROR: {
      const reasonLen = buf[pos + 2];
      return reasonLen === undefined ? undefined : 3 + reasonLen;
    }
    default:
      return null;
  }
}

function decodeFrame(buf: Uint8Array, pos: number): ServerFrame {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  switch (buf[pos]) {
    case MessageType.WAITING:
      return { type: "waiting" };
    case MessageType.ACQUIRED:
      return { type: "acquired", token: view.getBigUint64(pos + 1) };
    default:
      return decodeError(buf.subarray(pos));
  }
}

/** An ERROR frame, as far as it had arrived. */
export type ErrorFrame = Extract<ServerFrame, { type: "error" }>;

/** An ERROR from what arrived of it (`bytes` starts at its type byte, ends at most at its end). */
export function decodeError(bytes: Uint8Array): ErrorFrame {
  const code = bytes[1] ?? null;
  const reason = reasonDecoder.decode(bytes.subarray(3));
  return { type: "error", code, reason };
}
