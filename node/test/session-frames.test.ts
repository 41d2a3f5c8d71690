// The session sections of spec/vectors/frames.json (protocol version 4):
// the client's frames byte for byte, the server's decoded whole, a byte at a
// time, coalesced, and cut at every point.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { encodeClaim, encodeHeartbeat, encodeProclaim, FrameError } from "../src/frames.js";
import {
  encodeOn,
  encodeOpen,
  encodeRelease,
  encodeSession,
  SessionDecoder,
  type SessionFrame,
  type StreamInner,
} from "../src/session-frames.js";
import { validateAcquire, validateValue } from "../src/validate.js";
import { encodeWatch, WatchDecoder } from "../src/watch-frames.js";
import { hex, loadSpec, toHex } from "./helpers/spec.js";

interface Inner {
  type: string;
  name?: string;
  lease_ms?: number;
  mode?: number;
  limit?: number;
  value?: string;
  epoch?: string;
  seq?: string;
  token?: string;
  hex?: string;
}

interface Vector {
  desc: string;
  type: string;
  hex: string;
  lease_ms?: number;
  stream?: number;
  inner?: Inner;
  value?: string;
  max_streams?: number;
  code?: number;
  reason?: string;
}

interface Frames {
  client_valid_session: Vector[];
  server_valid_session: Vector[];
}

const spec = loadSpec<Frames>("vectors/frames.json");

/** The client frame a vector describes, built the way the session core builds it. */
function encodeVector(v: Vector): Uint8Array {
  switch (v.type) {
    case "SESSION":
      return encodeSession(v.lease_ms ?? 0);
    case "OPEN": {
      const inner = v.inner;
      assert.ok(inner !== undefined);
      const lease = inner.lease_ms ?? 0;
      if (inner.type === "WATCH") {
        const name = validateAcquire(inner.name ?? "", lease);
        return encodeOpen(
          v.stream ?? 0,
          encodeWatch(name.bytes, lease, BigInt(inner.epoch ?? 0), BigInt(inner.seq ?? 0)),
        );
      }
      assert.equal(inner.type, "ACQUIRE");
      const claim = validateAcquire(inner.name ?? "", lease, {
        shared: inner.mode === 1 ? true : undefined,
        limit: inner.limit === 0 ? undefined : inner.limit,
        value: inner.value,
      });
      return encodeOpen(v.stream ?? 0, encodeClaim(claim.bytes, lease, claim.shared, claim.value));
    }
    case "ON":
      return encodeOn(v.stream ?? 0, encodeProclaim(validateValue(v.value ?? "") ?? new Uint8Array(0)));
    case "RELEASE":
      return encodeRelease(v.stream ?? 0);
    case "HEARTBEAT":
      return encodeHeartbeat();
    default:
      throw new Error(`unknown client frame ${v.type}`);
  }
}

function expectedInner(inner: Inner | undefined): StreamInner {
  assert.ok(inner !== undefined);
  switch (inner.type) {
    case "WAITING":
      return { type: "waiting" };
    case "ACQUIRED":
      return { type: "acquired", token: BigInt(inner.token ?? "") };
    case "WATCHING":
      return { type: "watching", epoch: BigInt(inner.epoch ?? ""), seq: BigInt(inner.seq ?? "") };
    case "EVENT": {
      // The event's fields are those of the watch decoder on the same bytes.
      const [frame] = new WatchDecoder().push(hex(inner.hex ?? ""));
      assert.equal(frame?.type, "event");
      return frame as StreamInner;
    }
    default:
      throw new Error(`unknown inner frame ${inner.type}`);
  }
}

function expected(v: Vector): SessionFrame {
  switch (v.type) {
    case "SESSION_OK":
      return { type: "session_ok", maxStreams: v.max_streams ?? -1 };
    case "STREAM":
      return { type: "stream", stream: v.stream ?? -1, inner: expectedInner(v.inner) };
    case "RELEASED":
      return { type: "released", stream: v.stream ?? -1 };
    case "STREAM_END":
      return { type: "stream_end", stream: v.stream ?? -1, code: v.code ?? -1, reason: v.reason ?? "" };
    case "ALIVE":
      return { type: "alive" };
    default:
      throw new Error(`unknown server frame ${v.type}`);
  }
}

describe("client_valid_session: exact bytes", () => {
  assert.ok(spec.client_valid_session.length >= 10);
  for (const v of spec.client_valid_session) {
    test(v.desc, () => {
      assert.equal(toHex(encodeVector(v)), v.hex);
    });
  }
});

describe("server_valid_session: decoding", () => {
  assert.ok(spec.server_valid_session.length >= 9);
  for (const v of spec.server_valid_session) {
    test(`${v.desc}: whole, then one byte at a time`, () => {
      assert.deepEqual(new SessionDecoder().push(hex(v.hex)), [expected(v)]);
      const d = new SessionDecoder();
      const frames: SessionFrame[] = [];
      for (const b of hex(v.hex)) frames.push(...d.push(Uint8Array.of(b)));
      assert.deepEqual(frames, [expected(v)]);
      assert.equal(d.buffered, 0);
    });
  }

  const all = spec.server_valid_session.map(expected);
  const stream = hex(spec.server_valid_session.map((v) => v.hex).join(""));
  test("all vectors in one chunk, split at every point, and cut in three", () => {
    assert.deepEqual(new SessionDecoder().push(stream), all);
    for (let cut = 0; cut <= stream.length; cut++) {
      const d = new SessionDecoder();
      const got = [...d.push(stream.subarray(0, cut)), ...d.push(stream.subarray(cut))];
      assert.deepEqual(got, all, `cut at ${cut}`);
      const second = Math.min(stream.length, cut + 7);
      const e = new SessionDecoder();
      const three = [
        ...e.push(stream.subarray(0, cut)),
        ...e.push(stream.subarray(cut, second)),
        ...e.push(stream.subarray(second)),
      ];
      assert.deepEqual(three, all, `cut at ${cut} and ${second}`);
    }
  });

  test("an ERROR ends the session at its type byte, even inside a run of frames", () => {
    const d = new SessionDecoder();
    assert.deepEqual(d.push(hex("1a1302")), [{ type: "alive" }, { type: "error", code: 0x02, reason: "" }]);
    assert.deepEqual(d.push(hex("0a1a1a")), [], "nothing after an ERROR");
    assert.deepEqual(new SessionDecoder().push(hex("13")), [{ type: "error", code: null, reason: "" }]);
  });

  test("a byte no session frame starts with: at the start it is not monolock, later a violation", () => {
    assert.throws(
      () => new SessionDecoder().push(hex("48545450")),
      (err: unknown) => err instanceof FrameError && err.atStart,
    );
    assert.throws(
      () => new SessionDecoder().push(hex("1a11")),
      (err: unknown) => err instanceof FrameError && !err.atStart,
    );
    // A STREAM may carry only WAITING, ACQUIRED, EVENT or WATCHING.
    assert.throws(
      () => new SessionDecoder().push(hex("170000000113")),
      (err: unknown) => err instanceof FrameError && /inside a STREAM/.test(err.message) && !err.atStart,
    );
  });
});
