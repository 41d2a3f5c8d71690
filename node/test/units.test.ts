// Small pure parts: validation details, addresses, backoff, long timers.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parseAddress } from "../src/address.js";
import { backoffDelay } from "../src/backoff.js";
import { Client } from "../src/client.js";
import { RETRY } from "../src/constants.js";
import { NotMonolockError, ServerError } from "../src/errors.js";
import { startTimer } from "../src/timers.js";
import { isWellFormed, validateAcquire } from "../src/validate.js";
import { loadSpec } from "./helpers/spec.js";

const code = (f: () => unknown): number | undefined => {
  try {
    f();
  } catch (err) {
    if (err instanceof ServerError) return err.code;
    throw err;
  }
  return undefined;
};

describe("validation", () => {
  test("names are measured in UTF-8 bytes, not UTF-16 units", () => {
    assert.equal(
      code(() => validateAcquire("é".repeat(127), 1000)),
      undefined,
    ); // 254 bytes
    assert.equal(
      code(() => validateAcquire("é".repeat(128), 1000)),
      0x15,
    ); // 128 units, 256 bytes
    assert.equal(
      code(() => validateAcquire("🔒".repeat(63), 1000)),
      undefined,
    ); // 252 bytes, 126 units
    assert.equal(
      code(() => validateAcquire("🔒".repeat(64), 1000)),
      0x15,
    ); // 256 bytes
    assert.equal(
      code(() => validateAcquire("a".repeat(255), 1000)),
      undefined,
    );
  });

  test("lone surrogates are invalid UTF-8", () => {
    for (const s of ["\ud800", "a\udc00", "\ud83d", "x\ud83dy", "\udfff\ud800"]) {
      assert.equal(isWellFormed(s), false, JSON.stringify(s));
      assert.equal(
        code(() => validateAcquire(s, 1000)),
        0x16,
      );
    }
    assert.equal(isWellFormed("🔒ロック"), true);
  });

  test("order: lease, empty, too long, not UTF-8", () => {
    assert.equal(
      code(() => validateAcquire("", 0)),
      0x17,
    );
    assert.equal(
      code(() => validateAcquire(`${"a".repeat(300)}\ud800`, 1000)),
      0x15,
    );
    assert.equal(
      code(() => validateAcquire(new Uint8Array(300).fill(0xff), 1000)),
      0x15,
    );
  });

  test("leases outside 1..2^32-1 or not whole milliseconds", () => {
    for (const lease of [0, -1, 0.5, 1.5, 2 ** 32, Number.NaN, Number.POSITIVE_INFINITY]) {
      assert.equal(
        code(() => validateAcquire("a", lease)),
        0x17,
        String(lease),
      );
    }
    assert.equal(
      code(() => validateAcquire("a", 1)),
      undefined,
    );
    assert.equal(
      code(() => validateAcquire("a", 2 ** 32 - 1)),
      undefined,
    );
  });

  test("the lease rule's message: whole milliseconds, the range, the value given", () => {
    for (const [lease, given] of [
      [1.5, "1.5"],
      [0, "0"],
      [2 ** 32, "4294967296"],
      [Number.NaN, "NaN"],
      ["10" as unknown as number, '"10"'],
    ] as const) {
      assert.throws(
        () => validateAcquire("a", lease),
        (err: unknown) =>
          err instanceof ServerError &&
          err.message ===
            `monolock: lease must be a whole number of milliseconds from 1 ms to 4294967295 ms, got ${given} (0x17)`,
      );
    }
  });

  test("a name too long: its length in bytes and the limit, never the name", () => {
    const name = "n".repeat(300);
    for (const [given, bytes] of [
      [name, 300],
      [`${"é".repeat(128)}`, 256],
      [new Uint8Array(1000).fill(0x61), 1000],
    ] as const) {
      assert.throws(
        () => validateAcquire(given, 1000),
        (err: unknown) =>
          err instanceof ServerError &&
          err.message === `monolock: lock name is ${bytes} bytes, the limit is 255 (0x15)` &&
          !err.message.includes("nnnnn"),
      );
    }
  });

  test("other name types are a TypeError", () => {
    assert.throws(() => validateAcquire(42 as unknown as string, 1000), TypeError);
  });

  test("the validated bytes are a copy", () => {
    const raw = new TextEncoder().encode("abc");
    const v = validateAcquire(raw, 1000);
    raw[0] = 0x7a;
    assert.equal(v.bytes[0], 0x61);
  });
});

describe("spec/vectors/addresses.json", () => {
  const vectors = loadSpec<{
    ok: { in: string; host: string; port: number }[];
    error: string[];
    messages: { in: string; message: string }[];
  }>("vectors/addresses.json");
  for (const c of vectors.ok) {
    test(`ok ${JSON.stringify(c.in)}`, () => {
      assert.deepEqual(parseAddress(c.in), { host: c.host, port: c.port });
      // Configured on a client, it is accepted at construction.
      new Client({ servers: c.in });
    });
  }
  for (const address of vectors.error) {
    test(`error ${JSON.stringify(address)}`, () => {
      // A configuration error at construction, naming the address; never a
      // (temporary) MonolockError.
      const expected = (err: unknown): boolean =>
        err instanceof TypeError && err.message.startsWith(`monolock: server address ${JSON.stringify(address)}: `);
      assert.throws(() => parseAddress(address), expected);
      assert.throws(() => new Client({ servers: ["127.0.0.1:7117", address] }), expected);
    });
  }
  // The same text in every client: a URL scheme, an empty host.
  for (const c of vectors.messages) {
    test(`message ${JSON.stringify(c.in)}`, () => {
      const expected = (err: unknown): boolean => err instanceof TypeError && err.message === c.message;
      assert.throws(() => parseAddress(c.in), expected);
      assert.throws(() => new Client({ servers: c.in }), expected);
    });
  }
  test("has all kinds", () =>
    assert.ok(vectors.ok.length >= 5 && vectors.error.length >= 5 && vectors.messages.length >= 2));
});

// The temporary flag of errors that carry no ERROR code. A configuration
// error is a TypeError, which has no flag: not temporary.
describe("spec/vectors/temporary.json", () => {
  const vectors = loadSpec<{ cases: { error: string; temporary: boolean }[] }>("vectors/temporary.json");
  const build = (name: string): unknown => {
    switch (name) {
      case "not_monolock":
        return new NotMonolockError("127.0.0.1:7118", new TextEncoder().encode("HTTP/1.1 400"));
      case "config":
        try {
          new Client({ servers: "http://127.0.0.1:7117" });
        } catch (err) {
          assert.ok(err instanceof TypeError);
          return err;
        }
        assert.fail("the address was accepted");
    }
    assert.fail(`spec/vectors/temporary.json: unknown error ${JSON.stringify(name)}`);
  };
  for (const c of vectors.cases) {
    test(c.error, () => {
      const err = build(c.error) as { temporary?: boolean };
      assert.equal(err.temporary ?? false, c.temporary);
    });
  }
  test("has cases", () => assert.ok(vectors.cases.length >= 2));
});

describe("backoff", () => {
  test("equal jitter between d/2 and d, doubling to the cap", () => {
    for (let n = 0; n < 12; n++) {
      const d = Math.min(RETRY.maxMs, RETRY.initialMs * RETRY.multiplier ** n);
      assert.equal(
        backoffDelay(n, () => 0),
        d / 2,
      );
      assert.ok(Math.abs(backoffDelay(n, () => 0.999999) - d) < 0.01);
    }
    assert.equal(
      backoffDelay(0, () => 0.5),
      37.5,
    );
    assert.equal(
      backoffDelay(100, () => 0),
      RETRY.maxMs / 2,
    );
  });
});

describe("timers", () => {
  test("a delay past 2^31-1 ms does not fire at once", async () => {
    let fired = false;
    const t = startTimer(
      2 ** 32,
      () => {
        fired = true;
      },
      false,
    );
    await new Promise((r) => setTimeout(r, 30));
    t.cancel();
    assert.equal(fired, false);
  });
  test("short delays fire, not early", async () => {
    const start = performance.now();
    await new Promise<void>((resolve) => startTimer(20, resolve, true));
    assert.ok(performance.now() - start >= 19);
  });
});
