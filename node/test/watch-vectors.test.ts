// Every case of spec/vectors/watch.json, fed to the pure watch core; the
// leader is read as Watch.leader() reads it.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type Observation, observationOf } from "../src/election.js";
import { WatchCore, type WatchFault } from "../src/watch-core.js";
import { loadSpec } from "./helpers/spec.js";
import { vectorEvent, type WatchVector } from "./helpers/watch-vectors.js";

interface Step {
  at: number;
  in: string;
  event?: WatchVector;
  epoch?: string;
  seq?: string;
  resume?: [string, string];
  error?: "gap" | "protocol";
  known?: boolean;
  valid_until?: number;
  holders?: string[];
  waiters?: string[];
  waiter_values?: string[];
  leader?: string;
}

interface Vectors {
  cases: { name: string; lease_ms: number; steps: Step[] }[];
}

const spec = loadSpec<Vectors>("vectors/watch.json");
const text = (b: Uint8Array): string => Buffer.from(b).toString();

/** An observation in the vectors' words. */
function describeLeader(o: Observation, now: number): string {
  switch (o.state) {
    case "leader":
      return `leader ${o.token} ${text(o.value)}`;
    case "held-back":
      return `held_back ${o.token} ${Math.trunc((o.until ?? 0) - now)}`;
    case "no-leader":
      return "none";
    default:
      return "unknown";
  }
}

/** Carries out one input; returns the core's refusal, if any. */
function input(core: WatchCore, st: Step, where: string): WatchFault | undefined {
  switch (st.in) {
    case "send WATCH":
    case "send HEARTBEAT":
      if (st.resume !== undefined) {
        assert.deepEqual([core.epoch, core.seq], st.resume.map(BigInt), `${where}: the WATCH resumes from the picture`);
      }
      core.sent(st.at);
      return undefined;
    case "event":
      assert.ok(st.event !== undefined, where);
      return core.event(vectorEvent(st.event), st.at);
    case "watching":
      return core.watching(BigInt(st.epoch ?? "0"), BigInt(st.seq ?? "0"));
    case "disconnect":
      core.disconnected();
      return undefined;
    case "check":
      return undefined;
    default:
      throw new Error(`${where}: unknown input`);
  }
}

function check(core: WatchCore, st: Step, where: string): void {
  const state = core.state(st.at);
  if (st.known !== undefined) assert.equal(state.known, st.known, `${where}: known`);
  if (st.valid_until !== undefined) assert.equal(state.validUntil, st.valid_until, `${where}: valid_until`);
  if (st.holders !== undefined) {
    assert.deepEqual(
      state.holders.map((h) => String(h.token)),
      st.holders,
      `${where}: holders`,
    );
  }
  if (st.waiters !== undefined) {
    assert.deepEqual(
      state.waiters.map((w) => String(w.arrival)),
      st.waiters,
      `${where}: waiters`,
    );
  }
  if (st.waiter_values !== undefined) {
    assert.deepEqual(
      state.waiters.map((w) => text(w.value)),
      st.waiter_values,
      `${where}: waiter values`,
    );
  }
  if (st.leader !== undefined) {
    assert.equal(describeLeader(observationOf(state, st.at), st.at), st.leader, `${where}: leader`);
  }
}

describe("watch vectors", () => {
  assert.ok(spec.cases.length > 0);
  for (const tc of spec.cases) {
    test(tc.name, () => {
      const core = new WatchCore(tc.lease_ms);
      tc.steps.forEach((st, i) => {
        const where = `step ${i + 1} (${st.in} at ${st.at})`;
        const fault = input(core, st, where);
        const want = st.error === "protocol" ? "unasked" : st.error;
        assert.equal(fault?.kind, want, `${where}: error ${fault?.detail}`);
        check(core, st, where);
      });
    });
  }
});
