// Every case of spec/vectors/retry.json, against the pure retry plan.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { leaderIndex, parseAddress } from "../src/address.js";
import type { Cause } from "../src/core.js";
import { type Outcome, outcomeOf, type PlanAction, RetryPlan } from "../src/plan.js";
import { loadSpec } from "./helpers/spec.js";

interface Vectors {
  cases: {
    name: string;
    servers: number;
    mode: "wait" | "try";
    steps: { expect: string; outcome?: Outcome; queued_ms?: number; leader?: number }[];
  }[];
  leader_names: { servers: string[]; cases: { reason: string; index?: number }[] };
}

const spec = loadSpec<Vectors>("vectors/retry.json");

/** Checks one action against the vector's `expect`. */
function check(action: PlanAction, expect: string, where: string): void {
  const sleep = /^sleep (\d+)\.\.(\d+)$/.exec(expect);
  if (sleep) {
    const [lo, hi] = [Number(sleep[1]), Number(sleep[2])];
    assert.equal(action.type, "sleep", where);
    if (action.type !== "sleep") return;
    assert.equal(action.ceilingMs, hi, where);
    assert.ok(action.ms >= lo && action.ms <= hi, `${where}: ${action.ms} not in ${expect}`);
    return;
  }
  const text = action.type === "connect" ? `connect ${action.server}` : action.type;
  assert.equal(text, expect, where);
}

describe("spec/vectors/retry.json", () => {
  test("has cases, the not_monolock and not_active outcomes among them", () => {
    assert.ok(spec.cases.length >= 10);
    assert.ok(spec.cases.some((c) => c.steps.some((s) => s.outcome === "not_monolock")));
    assert.ok(spec.cases.some((c) => c.steps.some((s) => s.outcome === "not_active" && s.leader !== undefined)));
  });
  // Both ends of the jitter, and a random draw.
  for (const [label, random] of [
    ["low", () => 0],
    ["high", () => 0.999999],
    ["random", Math.random],
  ] as const) {
    for (const c of spec.cases) {
      test(`${c.name} (${label} jitter)`, () => {
        const plan = new RetryPlan(c.servers, c.mode, random);
        c.steps.forEach((step, i) => {
          check(plan.next(), step.expect, `step ${i}`);
          // A passive answer carries the server it named, if any of the list.
          if (step.outcome === "not_active") plan.reportNotActive(step.leader);
          else if (step.outcome !== undefined) plan.report(step.outcome, step.queued_ms ?? 0);
        });
      });
    }
  }
});

describe("spec/vectors/retry.json leader_names", () => {
  const { servers, cases } = spec.leader_names;
  const list = servers.map(parseAddress);
  test("has cases", () => {
    assert.ok(cases.length > 0);
  });
  for (const c of cases) {
    test(`${JSON.stringify(c.reason)}: ${c.index ?? "none"}`, () => {
      assert.equal(leaderIndex(list, c.reason), c.index);
    });
  }
});

describe("outcomes of a failed claim", () => {
  const cases: [Cause, boolean, Outcome][] = [
    [{ kind: "io", detail: "refused" }, false, "connect_failed"],
    [{ kind: "io", detail: "reset" }, true, "requeue"],
    [{ kind: "timeout" }, true, "requeue"],
    [{ kind: "protocol", detail: "x" }, true, "requeue"],
    [{ kind: "server", code: 0x01, reason: "" }, true, "requeue"],
    [{ kind: "server", code: 0x0f, reason: "" }, true, "requeue"],
    [{ kind: "server", code: 0x03, reason: "b:1" }, true, "not_active"],
    [{ kind: "server", code: 0x03, reason: "" }, true, "not_active"],
    [{ kind: "server", code: 0x10, reason: "" }, true, "terminal"],
    [{ kind: "server", code: 0x7e, reason: "" }, true, "terminal"],
    [{ kind: "busy" }, true, "busy"],
    [{ kind: "not_monolock", sent: Uint8Array.of(0x48) }, true, "not_monolock"],
    // tls_certificate_rule: in the handshake, or (TLS 1.3) on the first read after it.
    [{ kind: "certificate", side: "server", detail: "self-signed certificate" }, false, "not_monolock"],
    [{ kind: "certificate", side: "client", detail: "tlsv13 alert certificate required" }, true, "not_monolock"],
  ];
  for (const [cause, connected, outcome] of cases) {
    test(`${JSON.stringify(cause)} connected=${connected}: ${outcome}`, () => {
      assert.equal(outcomeOf(cause, connected), outcome);
    });
  }
});
