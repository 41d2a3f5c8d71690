// Pins src/constants.ts and the error table to spec/constants.json and spec/errors.json.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  DEFAULT_PORT,
  DEFAULT_SERVER,
  FIRST_TERMINAL_CODE,
  HEARTBEAT,
  MAX_LEASE_MS,
  MAX_NAME_LEN,
  MessageType,
  MIN_LEASE_MS,
  PROTOCOL_VERSION,
  RELEASE_WAIT_MS,
  RETRY,
  SHARED,
  VALUE,
} from "../src/constants.js";
import * as errors from "../src/errors.js";
import * as monolock from "../src/index.js";
import { loadSpec } from "./helpers/spec.js";

interface Constants {
  protocol_version: number;
  shared: { protocol_version: number; mode_exclusive: number; mode_shared: number; limit_max: number };
  value: { protocol_version: number; max_value_len: number; proclaim_type: number };
  message_types: Record<string, number>;
  client_message_types: number[];
  max_name_len: number;
  lease_ms: { min: number; max: number };
  heartbeat: {
    base_interval_factor: number;
    client_timeout_factor: number;
    srtt_alpha: number;
    safe_rtt_factor: number;
    min_interval_ms: number;
  };
  retry: {
    initial_ms: number;
    max_ms: number;
    multiplier: number;
    reset_after_queued_ms: number;
    server_order: string;
  };
  server_defaults: { listen: string };
  client_defaults: { default_server: string; default_port: number };
}

interface ErrorTable {
  first_terminal_code: number;
  errors: { code: number; name: string; text: string; temporary: boolean }[];
  unknown_code_examples: { code: number; temporary: boolean }[];
}

describe("spec/constants.json", () => {
  const spec = loadSpec<Constants>("constants.json");

  test("protocol version, message types and limits", () => {
    assert.equal(PROTOCOL_VERSION, spec.protocol_version);
    assert.deepEqual({ ...MessageType }, spec.message_types);
    assert.deepEqual(spec.client_message_types, [MessageType.ACQUIRE, MessageType.HEARTBEAT]);
    assert.equal(MAX_NAME_LEN, spec.max_name_len);
    assert.equal(MIN_LEASE_MS, spec.lease_ms.min);
    assert.equal(MAX_LEASE_MS, spec.lease_ms.max);
  });

  test("shared locks and semaphores: version 2, modes, largest limit", () => {
    assert.deepEqual(
      {
        protocol_version: SHARED.PROTOCOL_VERSION,
        mode_exclusive: SHARED.MODE_EXCLUSIVE,
        mode_shared: SHARED.MODE_SHARED,
        limit_max: SHARED.LIMIT_MAX,
      },
      {
        protocol_version: spec.shared.protocol_version,
        mode_exclusive: spec.shared.mode_exclusive,
        mode_shared: spec.shared.mode_shared,
        limit_max: spec.shared.limit_max,
      },
    );
  });

  test("claims with a value: version 3, largest value, PROCLAIM's type", () => {
    assert.deepEqual(
      {
        protocol_version: VALUE.PROTOCOL_VERSION,
        max_value_len: VALUE.MAX_VALUE_LEN,
        proclaim_type: VALUE.PROCLAIM_TYPE,
      },
      {
        protocol_version: spec.value.protocol_version,
        max_value_len: spec.value.max_value_len,
        proclaim_type: spec.value.proclaim_type,
      },
    );
    assert.equal(monolock.MAX_VALUE_LEN, spec.value.max_value_len);
  });

  test("heartbeat factors", () => {
    assert.deepEqual(
      {
        base_interval_factor: HEARTBEAT.baseIntervalFactor,
        client_timeout_factor: HEARTBEAT.clientTimeoutFactor,
        srtt_alpha: HEARTBEAT.srttAlpha,
        safe_rtt_factor: HEARTBEAT.safeRttFactor,
        min_interval_ms: HEARTBEAT.minIntervalMs,
      },
      spec.heartbeat,
    );
  });

  test("retry backoff", () => {
    assert.deepEqual(
      {
        initial_ms: RETRY.initialMs,
        max_ms: RETRY.maxMs,
        multiplier: RETRY.multiplier,
        reset_after_queued_ms: RETRY.resetAfterQueuedMs,
      },
      {
        initial_ms: spec.retry.initial_ms,
        max_ms: spec.retry.max_ms,
        multiplier: spec.retry.multiplier,
        reset_after_queued_ms: spec.retry.reset_after_queued_ms,
      },
    );
    assert.equal(spec.retry.server_order, "rotate", "plan.ts implements the rotating cursor");
  });

  test("client defaults: server and port, the server's default listen address", () => {
    assert.equal(DEFAULT_SERVER, spec.client_defaults.default_server);
    assert.equal(DEFAULT_PORT, spec.client_defaults.default_port);
    assert.equal(DEFAULT_SERVER, spec.server_defaults.listen);
  });
});

describe("spec/errors.json", () => {
  const spec = loadSpec<ErrorTable>("errors.json");

  test("first terminal code", () => {
    assert.equal(FIRST_TERMINAL_CODE, spec.first_terminal_code);
  });

  test("the client knows exactly the spec's codes, names and texts", () => {
    const ours = errors.knownCodes().sort((a, b) => a.code - b.code);
    const theirs = spec.errors.map(({ code, name, text }) => ({ code, name, text })).sort((a, b) => a.code - b.code);
    assert.deepEqual(ours, theirs);
  });

  for (const e of spec.errors) {
    test(`code ${e.code} ${e.name} maps to its own subclass`, () => {
      // The classes are generated from the spec (errors.gen.ts); this checks
      // what is written by hand: the lookup by code, the exports, the behaviour.
      const err = errors.errorForCode(e.code, "", "server");
      const cls = err.constructor as typeof errors.ServerError & { CODE?: number };
      const className = cls.name;
      assert.notEqual(cls, errors.ServerError, "a class of its own");
      assert.equal(cls.CODE, e.code);
      assert.equal(
        (errors as unknown as Record<string, unknown>)[className],
        cls,
        `${className} exported by errors.ts`,
      );
      assert.equal(
        (monolock as unknown as Record<string, unknown>)[className],
        cls,
        `${className} exported by the package`,
      );
      assert.ok(err instanceof errors.ServerError);
      assert.ok(err instanceof errors.MonolockError);
      assert.ok(err instanceof Error);
      assert.equal(err.name, className);
      assert.equal(err.code, e.code);
      assert.equal(err.temporary, e.temporary);
      assert.equal(err.reason, e.text, "empty reason falls back to the canonical text");
      assert.equal(err.origin, "server");
      assert.equal(errors.errorForCode(e.code, "detail: x").reason, "detail: x");
    });
  }

  test("unknown codes are plain ServerErrors, temporary by range", () => {
    for (const { code, temporary } of spec.unknown_code_examples) {
      const err = errors.errorForCode(code, "");
      assert.equal(err.constructor, errors.ServerError, `code ${code}`);
      assert.equal(err.name, "ServerError");
      assert.equal(err.temporary, temporary, `code ${code}`);
      assert.equal(err.code, code);
    }
  });

  test("every byte value is classified by range", () => {
    for (let code = 0; code <= 255; code++) {
      assert.equal(errors.errorForCode(code).temporary, code < spec.first_terminal_code);
      assert.equal(errors.isTemporaryCode(code), code < spec.first_terminal_code);
    }
  });

  test("code-less errors carry name, code null, temporary and cause", () => {
    const cause = new Error("root");
    const cases: [errors.MonolockError, string, boolean][] = [
      [new errors.LockBusyError("x"), "LockBusyError", true],
      [new errors.AcquireTimeoutError("x", { cause }), "AcquireTimeoutError", true],
      [new errors.AcquireAbortedError({ cause }), "AcquireAbortedError", false],
      [new errors.ConnectionError("boom", "connect", { cause }), "ConnectionError", true],
      [new errors.LockReleasedError(), "LockReleasedError", false],
    ];
    for (const [err, name, temporary] of cases) {
      assert.equal(err.name, name);
      assert.equal(err.code, null);
      assert.equal(err.temporary, temporary);
      assert.ok(err instanceof errors.MonolockError);
    }
    assert.equal(cases[1]?.[0].cause, cause);
    const lost = new errors.LockLostError("server", "x", errors.errorForCode(0x01));
    assert.equal(lost.code, 0x01);
    assert.equal(lost.temporary, true);
    assert.ok(lost.cause instanceof errors.ShuttingDownError);
    const lostTerminal = new errors.LockLostError("server", "x", errors.errorForCode(0x18));
    assert.equal(lostTerminal.temporary, false);
  });
});

test("release wait bound matches spec/constants.json", () => {
  const spec = loadSpec<{ release: { max_wait_ms: number } }>("constants.json");
  assert.equal(RELEASE_WAIT_MS, spec.release.max_wait_ms);
});

// The messages every client gives in the same words.
interface Messages {
  server_errors: { code: number; reason: string; message: string }[];
  acquire_timeouts: { name: string; last_code?: number; last_reason?: string; message: string }[];
  busy: { name: string; shared: boolean; limit: number; message: string }[];
}
const messages = loadSpec<Messages>("vectors/messages.json");

describe("spec/vectors/messages.json", () => {
  test("a server's ERROR", () => {
    assert.ok(messages.server_errors.length > 0);
    assert.ok(messages.server_errors.some((v) => v.code === errors.NotActiveError.CODE && v.reason !== ""));
    for (const v of messages.server_errors) {
      assert.equal(errors.errorForCode(v.code, v.reason, "server").message, v.message);
    }
  });

  test("an acquisition whose deadline passed names the lock", () => {
    assert.ok(messages.acquire_timeouts.length > 0);
    for (const v of messages.acquire_timeouts) {
      const cause =
        v.last_code === undefined ? undefined : errors.errorForCode(v.last_code, v.last_reason ?? "", "server");
      assert.equal(new errors.AcquireTimeoutError(v.name, { cause }).message, v.message);
    }
  });

  test("a try-acquire that found no room says what kept its claim out", () => {
    assert.ok(messages.busy.length > 0);
    for (const v of messages.busy) {
      const err = new errors.LockBusyError(v.name, { shared: v.shared, limit: v.limit });
      assert.equal(err.message, v.message);
      assert.equal(err.lockName, v.name);
      assert.equal(err.code, null);
      assert.equal(err.temporary, true);
    }
  });
});
