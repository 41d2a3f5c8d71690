/**
 * The wire format of a watch (protocol version 3): the WATCH encoder and an
 * incremental decoder of the server's EVENT, WATCHING and ERROR frames.
 *
 *     WATCH    [0x04][0x03][lease_ms u32][name_len u16][name][epoch u64][seq u64]
 *     EVENT    [0x14][epoch u64][seq u64][kind u8][body by kind]
 *     WATCHING [0x15][epoch u64][seq u64]
 *
 * docs/protocol.md, "Version 3: a watch of a name", has the whole design.
 */

import { MAX_VALUE_LEN, MessageType, WATCH } from "./constants.js";
import { decodeError, type ErrorFrame, FrameError } from "./frames.js";

/**
 * One EVENT. Every field is present; a kind leaves the ones it does not
 * carry at zero:
 *
 *     snapshot      resync, holders, waiters, ms (blocked that long)
 *     holder        token, mode, limit, ms (held back that long), identity, value
 *     waiter        arrival, mode, limit, identity, value
 *     snapshot end  —
 *     granted       arrival, and a holder's fields
 *     value         token, value
 *     ended         token, why (END_REASONS)
 *     held back     token, why (HOLD_REASONS), ms
 *     queued        as waiter
 *     left          arrival
 *     blocked       ms, why (BLOCK_REASONS)
 */
export interface WatchEvent {
  readonly epoch: bigint;
  readonly seq: bigint;
  readonly kind: number;
  readonly resync: boolean;
  readonly holders: number;
  readonly waiters: number;
  readonly ms: number;
  readonly token: bigint;
  readonly arrival: bigint;
  readonly mode: number;
  readonly limit: number;
  readonly identity: string;
  readonly value: Uint8Array;
  readonly why: number;
}

/** A frame a watch receives. */
export type WatchFrame =
  | { readonly type: "event"; readonly event: WatchEvent }
  | { readonly type: "watching"; readonly epoch: bigint; readonly seq: bigint }
  /** An ERROR ends the watch at its type byte, as it ends a claim (see FrameDecoder). */
  | ErrorFrame;

/** Encodes WATCH for already validated name bytes and lease; (0, 0) for a fresh watch. */
export function encodeWatch(name: Uint8Array, leaseMs: number, epoch: bigint, seq: bigint): Uint8Array {
  const frame = new Uint8Array(8 + name.length + 16);
  const view = new DataView(frame.buffer);
  frame[0] = WATCH.WATCH_TYPE;
  frame[1] = WATCH.PROTOCOL_VERSION;
  view.setUint32(2, leaseMs);
  view.setUint16(6, name.length);
  frame.set(name, 8);
  view.setBigUint64(8 + name.length, epoch);
  view.setBigUint64(16 + name.length, seq);
  return frame;
}

const EMPTY = new Uint8Array(0);
const identityDecoder = new TextDecoder("utf-8"); // lenient: the server cuts identities at a UTF-8 boundary

/**
 * Incremental decoder of a watch's server frames. Feed it chunks as they
 * arrive; a frame may be split over any number of chunks, and one chunk
 * may hold several frames.
 */
export class WatchDecoder {
  /** Bytes of an incomplete frame, starting at its type byte. */
  private pending: Uint8Array = EMPTY;
  private started = false;
  /** An ERROR has been handed on: nothing more is decoded. */
  private ended = false;

  /**
   * Appends `chunk` and returns every frame now complete, in order. Throws
   * {@link FrameError} at a type byte no watch frame starts with, and at a
   * malformed EVENT (an unknown kind, a value over 1024 bytes): the stream
   * cannot be trusted after either.
   */
  push(chunk: Uint8Array): WatchFrame[] {
    if (this.ended) return [];
    const buf = this.pending.length === 0 ? chunk : concat(this.pending, chunk);
    const frames: WatchFrame[] = [];
    let pos = 0;
    while (pos < buf.length) {
      if (buf[pos] === MessageType.ERROR) {
        // The last message of a watch: never wait for the rest of it.
        frames.push(decodeError(buf.subarray(pos, errorEnd(buf, pos))));
        this.ended = true;
        this.pending = EMPTY;
        return frames;
      }
      const parsed = this.parse(buf, pos);
      if (parsed === undefined) break;
      frames.push(parsed.frame);
      pos = parsed.end;
    }
    this.pending = pos === buf.length ? EMPTY : buf.slice(pos);
    return frames;
  }

  /** The frame at `pos` and where it ends, or undefined while it is incomplete. */
  private parse(buf: Uint8Array, pos: number): { frame: WatchFrame; end: number } | undefined {
    const parsed = parseWatchFrame(buf, pos);
    if (parsed === null) {
      const type = (buf[pos] ?? 0).toString(16).padStart(2, "0");
      throw new FrameError(`unexpected message type 0x${type} from server`, buf.slice(pos), !this.started);
    }
    this.started = true;
    return parsed;
  }

  /** Number of buffered bytes of an incomplete frame. */
  get buffered(): number {
    return this.pending.length;
  }
}

/**
 * The EVENT or WATCHING at `pos` and where it ends; undefined while it is
 * incomplete, null when its type byte is neither. Shared with a session's
 * STREAM frame, which carries them (protocol version 4). Throws
 * {@link FrameError} at a malformed EVENT.
 */
export function parseWatchFrame(buf: Uint8Array, pos: number): { frame: WatchFrame; end: number } | undefined | null {
  const fields = new Fields(buf, pos + 1);
  let frame: WatchFrame | undefined;
  switch (buf[pos]) {
    case WATCH.EVENT_TYPE: {
      const event = readEvent(fields);
      frame = event === undefined ? undefined : { type: "event", event };
      break;
    }
    case WATCH.WATCHING_TYPE:
      frame = { type: "watching", epoch: fields.u64(), seq: fields.u64() };
      break;
    default:
      return null;
  }
  return frame === undefined || fields.short ? undefined : { frame, end: fields.at };
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/** Where the ERROR at `pos` ends, or the end of what arrived. */
function errorEnd(buf: Uint8Array, pos: number): number {
  const reasonLen = buf[pos + 2];
  return reasonLen === undefined ? buf.length : Math.min(buf.length, pos + 3 + reasonLen);
}

/**
 * Big-endian fields from `at` on. Reading past the end sets `short` and
 * yields zeros, so a frame is parsed as far as it arrived and dropped.
 */
class Fields {
  short = false;
  private readonly view: DataView;

  constructor(
    private readonly buf: Uint8Array,
    public at: number,
  ) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }

  /** The offset of the next `n` bytes, or -1 when they have not all arrived. */
  private take(n: number): number {
    if (this.short || this.at + n > this.buf.length) {
      this.short = true;
      return -1;
    }
    this.at += n;
    return this.at - n;
  }

  u8(): number {
    const at = this.take(1);
    return at < 0 ? 0 : (this.buf[at] ?? 0);
  }

  u16(): number {
    const at = this.take(2);
    return at < 0 ? 0 : this.view.getUint16(at);
  }

  u32(): number {
    const at = this.take(4);
    return at < 0 ? 0 : this.view.getUint32(at);
  }

  u64(): bigint {
    const at = this.take(8);
    return at < 0 ? 0n : this.view.getBigUint64(at);
  }

  bytes(n: number): Uint8Array {
    const at = this.take(n);
    // A copy, never a view of a socket chunk (a Buffer's slice is one).
    return at < 0 ? EMPTY : Uint8Array.from(this.buf.subarray(at, at + n));
  }

  /** A value: `[value_len u16][value]`; a length over the bound is malformed as soon as it is read. */
  value(): Uint8Array {
    const length = this.u16();
    if (length > MAX_VALUE_LEN) throw malformed(`a value over ${MAX_VALUE_LEN} bytes`);
    return this.bytes(length);
  }

  /** An identity then a value, as holders and waiters end. */
  who(e: MutableEvent): void {
    e.identity = identityDecoder.decode(this.bytes(this.u8()));
    e.value = this.value();
  }
}

type MutableEvent = { -readonly [K in keyof WatchEvent]: WatchEvent[K] };

function malformed(detail: string): FrameError {
  return new FrameError(`malformed EVENT: ${detail}`);
}

/** An EVENT's fields after its type byte, or undefined while its header is incomplete. */
function readEvent(f: Fields): WatchEvent | undefined {
  const e = blankEvent(f.u64(), f.u64(), f.u8());
  if (f.short) return undefined; // the kind has not arrived: nothing to judge yet
  const K = WATCH.KINDS;
  switch (e.kind) {
    case K.snapshot:
      e.resync = (f.u8() & WATCH.SNAPSHOT_FLAG_RESYNC) !== 0;
      e.holders = f.u32();
      e.waiters = f.u32();
      e.ms = f.u32();
      break;
    case K.granted:
      e.arrival = f.u64();
      readHolder(f, e);
      break;
    case K.holder:
      readHolder(f, e);
      break;
    case K.waiter:
    case K.queued:
      e.arrival = f.u64();
      e.mode = f.u8();
      e.limit = f.u16();
      f.who(e);
      break;
    case K.snapshotEnd:
      break;
    case K.value:
      e.token = f.u64();
      e.value = f.value();
      break;
    case K.ended:
      e.token = f.u64();
      e.why = f.u8();
      break;
    case K.heldBack:
      e.token = f.u64();
      e.why = f.u8();
      e.ms = f.u32();
      break;
    case K.left:
      e.arrival = f.u64();
      break;
    case K.blocked:
      e.ms = f.u32();
      e.why = f.u8();
      break;
    default:
      throw malformed(`unknown kind ${e.kind}`);
  }
  return e;
}

/** A holder's body: token, mode, limit, held_back_ms, identity, value. */
function readHolder(f: Fields, e: MutableEvent): void {
  e.token = f.u64();
  e.mode = f.u8();
  e.limit = f.u16();
  e.ms = f.u32();
  f.who(e);
}

/** An event with only its header set. */
export function blankEvent(epoch: bigint, seq: bigint, kind: number): MutableEvent {
  return {
    epoch,
    seq,
    kind,
    resync: false,
    holders: 0,
    waiters: 0,
    ms: 0,
    token: 0n,
    arrival: 0n,
    mode: 0,
    limit: 0,
    identity: "",
    value: EMPTY,
    why: 0,
  };
}
