// Every case of spec/vectors/heartbeat.json.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { clientTimeoutText, HeartbeatSchedule } from "../src/heartbeat.js";
import { loadSpec } from "./helpers/spec.js";

interface Heartbeat {
  tolerance_ms: number;
  cases: {
    desc: string;
    lease_ms: number;
    base_interval_ms: number;
    client_timeout_ms: number;
    initial_interval_ms: number;
    steps: { rtt_ms: number; srtt_ms: number; interval_ms: number }[];
  }[];
}

const spec = loadSpec<Heartbeat>("vectors/heartbeat.json");

function near(actual: number | undefined, want: number, what: string): void {
  assert.ok(actual !== undefined && Math.abs(actual - want) <= spec.tolerance_ms, `${what}: ${actual} != ${want}`);
}

describe("spec/vectors/heartbeat.json", () => {
  for (const c of spec.cases) {
    test(c.desc, () => {
      const s = new HeartbeatSchedule(c.lease_ms);
      near(s.baseIntervalMs, c.base_interval_ms, "base interval");
      near(s.clientTimeoutMs, c.client_timeout_ms, "client timeout");
      near(s.intervalMs, c.initial_interval_ms, "initial interval");
      assert.equal(s.srttMs, undefined);
      c.steps.forEach((step, i) => {
        s.addSample(step.rtt_ms);
        near(s.srttMs, step.srtt_ms, `step ${i} srtt`);
        near(s.intervalMs, step.interval_ms, `step ${i} interval`);
        near(s.clientTimeoutMs, c.client_timeout_ms, `step ${i} client timeout`);
      });
    });
  }
});

// 0.8 x lease in a loss message: exact, never a float's rounding.
test("client timeout text", () => {
  const cases: [number, string][] = [
    [2000, "1600"],
    [1001, "800.8"],
    [1, "0.8"],
    [4294967295, "3435973836"],
  ];
  for (const [lease, text] of cases) assert.equal(clientTimeoutText(lease), text, `lease ${lease}`);
});
