// Every vector of spec/vectors/frames.json: encoding, decoding over split and
// coalesced chunks, and client-side validation.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { SessionCore } from "../src/core.js";
import { ServerError, ValueTooLongError } from "../src/errors.js";
import {
  encodeAcquire,
  encodeAcquireV2,
  encodeAcquireV3,
  encodeHeartbeat,
  encodeProclaim,
  FrameDecoder,
  FrameError,
  type ServerFrame,
} from "../src/frames.js";
import { validateAcquire, validateAcquireV2, validateAcquireV3, validateValue } from "../src/validate.js";
import { hex, loadSpec, toHex } from "./helpers/spec.js";

interface Frames {
  client_valid: { desc: string; type: string; name?: string; lease_ms?: number; hex: string }[];
  server_valid: { desc: string; type: string; token?: string; code?: number; reason?: string; hex: string }[];
  client_invalid: { desc: string; name_hex: string; lease_ms: number; code: number }[];
  server_error_cut: { desc: string; hex: string; code: number | null; reason: string }[];
  client_valid_v2: {
    desc: string;
    type: string;
    name: string;
    lease_ms: number;
    mode: number;
    limit: number;
    hex: string;
  }[];
  client_invalid_v2: {
    desc: string;
    name?: string;
    name_hex?: string;
    lease_ms: number;
    mode: number;
    limit: number;
    code: number;
  }[];
  client_valid_v3: {
    desc: string;
    type: "ACQUIRE" | "PROCLAIM";
    name?: string;
    lease_ms?: number;
    mode?: number;
    limit?: number;
    value?: string;
    value_hex?: string;
    hex: string;
  }[];
  client_invalid_v3: {
    desc: string;
    name: string;
    lease_ms: number;
    mode: number;
    limit: number;
    value_len: number;
    code: number;
  }[];
}

const spec = loadSpec<Frames>("vectors/frames.json");

/** The frame a server_valid vector describes. */
function expected(v: Frames["server_valid"][number]): ServerFrame {
  switch (v.type) {
    case "WAITING":
      return { type: "waiting" };
    case "ACQUIRED":
      return { type: "acquired", token: BigInt(v.token ?? "x") };
    case "ERROR":
      return { type: "error", code: v.code ?? -1, reason: v.reason ?? "" };
  }
  throw new Error(`unknown vector type ${v.type}`);
}

describe("client_valid: exact bytes", () => {
  for (const v of spec.client_valid) {
    test(v.desc, () => {
      if (v.type === "HEARTBEAT") {
        assert.equal(toHex(encodeHeartbeat()), v.hex);
        return;
      }
      assert.equal(v.type, "ACQUIRE");
      const name = v.name ?? "";
      const lease = v.lease_ms ?? 0;
      // As a string and as raw bytes, the same frame.
      assert.equal(toHex(encodeAcquire(validateAcquire(name, lease).bytes, lease)), v.hex);
      const bytes = new TextEncoder().encode(name);
      const valid = validateAcquire(bytes, lease);
      assert.equal(valid.text, name);
      assert.equal(toHex(encodeAcquire(valid.bytes, lease)), v.hex);
    });
  }
});

describe("server_valid: decoding", () => {
  for (const v of spec.server_valid) {
    test(`${v.desc}: whole, then one byte at a time`, () => {
      assert.deepEqual(new FrameDecoder().push(hex(v.hex)), [expected(v)]);
      const d = new FrameDecoder();
      const frames: ServerFrame[] = [];
      for (const b of hex(v.hex)) frames.push(...d.push(Uint8Array.of(b)));
      // An ERROR ends the session at its type byte: nothing of it is waited for.
      const want = v.type === "ERROR" ? { type: "error", code: null, reason: "" } : expected(v);
      assert.deepEqual(frames, [want]);
      assert.equal(d.buffered, 0);
    });
  }

  // The replies, then one ERROR: an ERROR is the last message of a session.
  const replies = spec.server_valid.filter((v) => v.type !== "ERROR");
  const last = spec.server_valid.find((v) => v.type === "ERROR");
  assert.ok(last !== undefined);
  const all = [...replies, last].map(expected);
  const stream = hex([...replies, last].map((v) => v.hex).join(""));
  const errorAt = stream.length - hex(last.hex).length;
  /** What comes out when the first chunk holding the ERROR's type byte ends at `end`. */
  const cutAt = (end: number): ServerFrame[] => {
    if (end >= stream.length) return all;
    const head = stream.subarray(errorAt, end);
    return [
      ...all.slice(0, -1),
      { type: "error", code: head[1] ?? null, reason: new TextDecoder().decode(head.subarray(3)) },
    ];
  };

  test("all vectors coalesced into one chunk", () => {
    assert.deepEqual(new FrameDecoder().push(stream), all);
  });

  test("all vectors split at every possible point", () => {
    for (let cut = 0; cut <= stream.length; cut++) {
      const d = new FrameDecoder();
      const got = [...d.push(stream.subarray(0, cut)), ...d.push(stream.subarray(cut))];
      assert.deepEqual(got, cut > errorAt ? cutAt(cut) : all, `cut at ${cut}`);
    }
  });

  test("all vectors in random chunks (seeded)", () => {
    let seed = 42;
    const rand = (): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let round = 0; round < 200; round++) {
      const d = new FrameDecoder();
      const got: ServerFrame[] = [];
      let errorEnd = stream.length;
      for (let pos = 0; pos < stream.length; ) {
        const size = 1 + Math.floor(rand() * 12);
        if (pos <= errorAt && errorAt < pos + size) errorEnd = pos + size;
        got.push(...d.push(stream.subarray(pos, pos + size)));
        pos += size;
      }
      assert.deepEqual(got, cutAt(errorEnd));
    }
  });

  test("a byte no server frame starts with is a FrameError", () => {
    for (const bad of ["7f", "01", "02", "00", "14"]) {
      assert.throws(() => new FrameDecoder().push(hex(bad)), FrameError);
      // Also after complete frames in the same chunk.
      assert.throws(() => new FrameDecoder().push(hex(`11${bad}`)), FrameError);
    }
  });

  test("a FrameError tells whether the stream started with the bad byte, and carries the bytes from it on", () => {
    const at = (chunks: string[]): FrameError => {
      const d = new FrameDecoder();
      try {
        for (const c of chunks) d.push(hex(c));
      } catch (err) {
        if (err instanceof FrameError) return err;
        throw err;
      }
      throw new Error("no FrameError");
    };
    const http = at([Buffer.from("HTTP/1.1 400").toString("hex")]);
    assert.equal(http.atStart, true);
    assert.equal(Buffer.from(http.bytes).toString(), "HTTP/1.1 400");
    assert.equal(at(["11", "7f00"]).atStart, false, "after a frame");
    assert.equal(at(["1200", "00000000000000", "07ff"]).atStart, false, "after a split frame");
    assert.deepEqual([...at(["117f01"]).bytes], [0x7f, 0x01]);
  });

  test("tokens above 2^53 stay exact", () => {
    const [f] = new FrameDecoder().push(hex("120020000000000001"));
    assert.deepEqual(f, { type: "acquired", token: 9007199254740993n });
  });
});

describe("client_invalid: refused before sending", () => {
  for (const v of spec.client_invalid) {
    test(v.desc, () => {
      const bytes = hex(v.name_hex);
      const check = (name: string | Uint8Array): void => {
        assert.throws(
          () => validateAcquire(name, v.lease_ms),
          (err: unknown) =>
            err instanceof ServerError && err.code === v.code && err.origin === "client" && !err.temporary,
        );
      };
      check(bytes);
      // The same name as a JS string, where one exists: a lone surrogate
      // stands for the encoded surrogate, valid UTF-8 decodes as is.
      const asString = v.name_hex === "eda080" ? "\ud800" : tryDecode(bytes);
      if (asString !== undefined) check(asString);
    });
  }
});

function tryDecode(bytes: Uint8Array): string | undefined {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return undefined;
  }
}

describe("server_error_cut: an ERROR ends the session at its type byte", () => {
  for (const v of spec.server_error_cut) {
    test(v.desc, () => {
      const d = new FrameDecoder();
      assert.deepEqual(d.push(hex(v.hex)), [{ type: "error", code: v.code, reason: v.reason }]);
      assert.deepEqual(d.push(hex("7f1301")), [], "nothing after an ERROR is decoded");
    });
  }
});

describe("client_valid_v2: exact bytes of a version 2 ACQUIRE", () => {
  for (const v of spec.client_valid_v2) {
    test(v.desc, () => {
      assert.equal(v.type, "ACQUIRE");
      const bytes = new TextEncoder().encode(v.name);
      for (const name of [v.name, bytes]) {
        const valid = validateAcquireV2(name, v.lease_ms, v.mode, v.limit);
        assert.equal(toHex(encodeAcquireV2(valid.bytes, v.lease_ms, v.mode, v.limit)), v.hex);
      }
      // What the client's options make of it: shared claims go out as these
      // bytes; an exclusive claim is sent as version 1 instead.
      const request = v.mode === 0 ? {} : v.limit === 0 ? { shared: true } : { limit: v.limit };
      const claim = validateAcquire(v.name, v.lease_ms, request);
      if (v.mode === 0) {
        assert.equal(claim.shared, undefined);
        assert.equal(toHex(encodeAcquire(claim.bytes, v.lease_ms)).slice(0, 4), "0101");
      } else {
        assert.deepEqual(claim.shared, { mode: v.mode, limit: v.limit });
        assert.equal(toHex(encodeAcquireV2(claim.bytes, v.lease_ms, v.mode, v.limit)), v.hex);
      }
    });
  }
});

describe("client_invalid_v2: refused before sending", () => {
  const refused =
    (code: number) =>
    (err: unknown): boolean =>
      err instanceof ServerError && err.code === code && err.origin === "client" && !err.temporary;
  for (const v of spec.client_invalid_v2) {
    test(v.desc, () => {
      const name = v.name_hex !== undefined ? hex(v.name_hex) : (v.name ?? "");
      assert.throws(() => validateAcquireV2(name, v.lease_ms, v.mode, v.limit), refused(v.code));
      // Through the client's options, where they can say it.
      if (v.mode === 1) {
        const request = v.limit === 0 ? { shared: true } : { limit: v.limit };
        assert.throws(() => validateAcquire(name, v.lease_ms, request), refused(v.code));
      } else if (v.mode === 0) {
        assert.throws(() => validateAcquire(name, v.lease_ms, { shared: false, limit: v.limit }), refused(v.code));
      }
    });
  }
});

describe("semaphore limits outside 1..65535 are refused with 0x19 before sending", () => {
  for (const limit of [0, -1, 65536, 2.5, Number.NaN]) {
    test(`limit ${limit}`, () => {
      assert.throws(
        () => validateAcquire("a", 1000, { limit }),
        (err: unknown) =>
          err instanceof ServerError &&
          err.code === 0x19 &&
          err.origin === "client" &&
          err.message ===
            `monolock: a semaphore's limit must be a whole number from 1 to 65535 permits, got ${limit} (0x19)`,
      );
    });
  }
  test("the lease is checked first", () => {
    assert.throws(
      () => validateAcquire("a", 0, { limit: 0 }),
      (err: unknown) => (err as ServerError).code === 0x17,
    );
  });
  test("a bad limit is reported before a bad name", () => {
    assert.throws(
      () => validateAcquire("", 1000, { limit: 0 }),
      (err: unknown) => (err as ServerError).code === 0x19,
    );
  });
  test("exclusive by default and with shared: false; shared with no bound has limit 0", () => {
    assert.equal(validateAcquire("a", 1000).shared, undefined);
    assert.equal(validateAcquire("a", 1000, { shared: false }).shared, undefined);
    assert.deepEqual(validateAcquire("a", 1000, { shared: true }).shared, { mode: 1, limit: 0 });
    assert.deepEqual(validateAcquire("a", 1000, { shared: true, limit: 4 }).shared, { mode: 1, limit: 4 });
  });
});

/** The first frame a claim's session core sends for these options. */
function firstFrame(name: Uint8Array, leaseMs: number, claim: ReturnType<typeof validateAcquire>): string {
  const core = new SessionCore({ leaseMs, name, mode: "wait", shared: claim.shared, value: claim.value });
  const [action] = core.connect(0);
  assert.ok(action?.type === "send" && action.frame === "ACQUIRE");
  return toHex(action.bytes);
}

/** The claim options that ask for mode and limit (mode 0 with a limit cannot be said). */
function claimRequest(mode: number, limit: number): { shared?: boolean; limit?: number } {
  if (mode === 0) return limit === 0 ? {} : { shared: false, limit };
  return limit === 0 ? { shared: true } : { limit };
}

describe("client_valid_v3: exact bytes of a version 3 ACQUIRE and of PROCLAIM", () => {
  for (const v of spec.client_valid_v3) {
    test(v.desc, () => {
      const value = v.value_hex !== undefined ? hex(v.value_hex) : (v.value ?? "");
      if (v.type === "PROCLAIM") {
        const bytes = validateValue(value) ?? new Uint8Array(0);
        assert.equal(toHex(encodeProclaim(bytes)), v.hex);
        if (typeof value === "string") assert.equal(toHex(encodeProclaim(new TextEncoder().encode(value))), v.hex);
        return;
      }
      assert.equal(v.type, "ACQUIRE");
      const name = v.name ?? "";
      const lease = v.lease_ms ?? 0;
      const mode = v.mode ?? 0;
      const limit = v.limit ?? 0;
      // As a string and as raw bytes (and as a Buffer), the same frame.
      const values = typeof value === "string" ? [value, new TextEncoder().encode(value)] : [value, Buffer.from(value)];
      for (const val of values) {
        for (const n of [name, new TextEncoder().encode(name)]) {
          const valid = validateAcquireV3(n, lease, mode, limit, val);
          assert.equal(toHex(encodeAcquireV3(valid.bytes, lease, mode, limit, valid.value)), v.hex);
        }
        // What the client's options make of it: a claim with a value goes out as these bytes.
        const claim = validateAcquire(name, lease, { ...claimRequest(mode, limit), value: val });
        assert.equal(firstFrame(claim.bytes, lease, claim), v.hex);
      }
    });
  }

  test("a claim without a value, or with an empty one, keeps sending version 1 or 2", () => {
    for (const value of [undefined, "", new Uint8Array(0), Buffer.alloc(0)]) {
      const exclusive = validateAcquire("a", 1000, { value });
      assert.equal(exclusive.value, undefined);
      assert.equal(firstFrame(exclusive.bytes, 1000, exclusive), "0101000003e8000161");
      const shared = validateAcquire("a", 1000, { limit: 2, value });
      assert.equal(firstFrame(shared.bytes, 1000, shared), "0102000003e8010002000161");
    }
  });

  test("the value is copied: changing the caller's buffer later changes nothing", () => {
    const buf = Buffer.from("10.0.0.7:8080");
    const claim = validateAcquire("a", 1000, { value: buf });
    buf.fill(0);
    assert.equal(Buffer.from(claim.value ?? []).toString(), "10.0.0.7:8080");
  });

  test("a value that is neither a string nor a Uint8Array is a TypeError", () => {
    assert.throws(() => validateAcquire("a", 1000, { value: 42 as unknown as string }), TypeError);
  });
});

describe("client_invalid_v3: refused before sending", () => {
  const refused =
    (code: number) =>
    (err: unknown): boolean =>
      err instanceof ServerError && err.code === code && err.origin === "client" && !err.temporary;
  for (const v of spec.client_invalid_v3) {
    test(v.desc, () => {
      const text = "v".repeat(v.value_len);
      for (const value of [text, new TextEncoder().encode(text)]) {
        assert.throws(() => validateAcquireV3(v.name, v.lease_ms, v.mode, v.limit, value), refused(v.code));
        // Through the client's options, where they can say it.
        if (v.mode === 0 || v.mode === 1) {
          const request = { ...claimRequest(v.mode, v.limit), value };
          assert.throws(() => validateAcquire(v.name, v.lease_ms, request), refused(v.code));
        }
      }
    });
  }

  test("1024 bytes pass; 1025 are refused with ValueTooLongError, counted in bytes of UTF-8", () => {
    assert.equal(validateAcquire("a", 1000, { value: "v".repeat(1024) }).value?.length, 1024);
    assert.equal(validateAcquire("a", 1000, { value: "é".repeat(512) }).value?.length, 1024);
    for (const value of ["v".repeat(1025), `${"é".repeat(512)}v`, new Uint8Array(1025)]) {
      assert.throws(
        () => validateAcquire("a", 1000, { value }),
        (err: unknown) =>
          err instanceof ValueTooLongError &&
          err.code === 0x1b &&
          err.origin === "client" &&
          err.message === "monolock: value is 1025 bytes, the limit is 1024 (0x1b)",
      );
    }
  });
});
