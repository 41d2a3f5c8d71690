// The watch sections of spec/vectors/frames.json: WATCH's exact bytes, and
// EVENT and WATCHING decoded whole, a byte at a time, and all in one chunk.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { FrameError } from "../src/frames.js";
import { validateAcquire } from "../src/validate.js";
import { encodeWatch, WatchDecoder, type WatchFrame } from "../src/watch-frames.js";
import { hex, loadSpec, toHex } from "./helpers/spec.js";
import { big, vectorEvent, type WatchVector } from "./helpers/watch-vectors.js";

interface Frames {
  client_valid_watch: WatchVector[];
  server_valid_watch: WatchVector[];
  server_invalid_watch: { desc: string; hex: string }[];
}

const spec = loadSpec<Frames>("vectors/frames.json");

function expected(v: WatchVector): WatchFrame {
  if (v.type === "WATCHING") return { type: "watching", epoch: big(v.epoch), seq: big(v.seq) };
  assert.equal(v.type, "EVENT");
  return { type: "event", event: vectorEvent(v) };
}

describe("client_valid_watch: exact bytes of WATCH", () => {
  for (const v of spec.client_valid_watch) {
    test(v.desc ?? "", () => {
      const lease = v.lease_ms ?? 0;
      const name = validateAcquire(v.name ?? "", lease);
      assert.equal(toHex(encodeWatch(name.bytes, lease, big(v.epoch), big(v.seq))), v.hex);
    });
  }
});

describe("server_valid_watch: decoding", () => {
  for (const v of spec.server_valid_watch) {
    test(`${v.desc}: whole, then one byte at a time`, () => {
      assert.deepEqual(new WatchDecoder().push(hex(v.hex ?? "")), [expected(v)]);
      const d = new WatchDecoder();
      const frames: WatchFrame[] = [];
      for (const b of hex(v.hex ?? "")) frames.push(...d.push(Uint8Array.of(b)));
      assert.deepEqual(frames, [expected(v)]);
      assert.equal(d.buffered, 0);
    });
  }

  const all = spec.server_valid_watch.map(expected);
  const stream = hex(spec.server_valid_watch.map((v) => v.hex).join(""));
  test("all vectors in one chunk, and split at every point", () => {
    assert.deepEqual(new WatchDecoder().push(stream), all);
    for (let cut = 0; cut <= stream.length; cut++) {
      const d = new WatchDecoder();
      const got = [...d.push(stream.subarray(0, cut)), ...d.push(stream.subarray(cut))];
      assert.deepEqual(got, all, `cut at ${cut}`);
    }
  });

  test("an ERROR ends the watch at its type byte", () => {
    const d = new WatchDecoder();
    const watching = spec.server_valid_watch.find((v) => v.type === "WATCHING");
    assert.ok(watching !== undefined);
    const frames = d.push(hex(`${watching.hex}1304`));
    assert.deepEqual(frames, [expected(watching), { type: "error", code: 0x04, reason: "" }]);
    assert.deepEqual(d.push(hex("0b776174636865722066656c6c20626568696e64")), [], "nothing after an ERROR");
  });

  test("a byte no watch frame starts with", () => {
    assert.throws(() => new WatchDecoder().push(hex("12")), FrameError);
  });
});

describe("server_invalid_watch: malformed events", () => {
  for (const v of spec.server_invalid_watch) {
    test(v.desc, () => {
      assert.throws(
        () => new WatchDecoder().push(hex(v.hex)),
        (err: unknown) => {
          assert.ok(err instanceof FrameError);
          assert.match(err.message, /^malformed EVENT/);
          return true;
        },
      );
    });
  }
});
