// Every case of spec/vectors/session.json, against the pure session core.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { SHARED } from "../src/constants.js";
import { type Action, type Cause, SessionCore } from "../src/core.js";
import { encodeAcquire, encodeAcquireV2, encodeAcquireV3 } from "../src/frames.js";
import { loadSpec } from "./helpers/spec.js";

interface Step {
  at: number;
  in: string;
  out: string[];
  state?: string;
  valid_until?: number;
}
interface Vectors {
  cases: {
    name: string;
    description: string;
    lease_ms: number;
    mode: "wait" | "try";
    /** A shared claim, or (with `value`) a claim with a value; absent: exclusive, no value. */
    claim?: { shared?: boolean; limit?: number; value?: string };
    steps: Step[];
  }[];
}

const spec = loadSpec<Vectors>("vectors/session.json");
const utf8 = new TextEncoder();

/** The wire bytes of a `recv ...` input. */
function serverFrame(text: string): Uint8Array {
  const [type, arg] = text.split(" ");
  switch (type) {
    case "WAITING":
      return Uint8Array.of(0x11);
    case "ACQUIRED": {
      const b = Buffer.alloc(9);
      b[0] = 0x12;
      b.writeBigUInt64BE(BigInt(arg ?? "x"), 1);
      return b;
    }
    case "ERROR":
      return Uint8Array.of(0x13, Number.parseInt(arg ?? "x", 16), 0);
    case "hex":
      return Uint8Array.from(Buffer.from(text.slice(4).replaceAll(" ", ""), "hex"));
    default:
      throw new Error(`unknown frame in vector: ${text}`);
  }
}

function causeText(cause: Cause): string {
  if (cause.kind !== "server") return cause.kind;
  return cause.code === null ? "server" : `server 0x${cause.code.toString(16).padStart(2, "0")}`;
}

/** The vector's spelling of an action. */
function actionText(a: Action): string {
  switch (a.type) {
    case "send":
      // A PROCLAIM is spelled with its value: [0x03][value_len u16][value].
      return a.frame === "PROCLAIM" ? `send PROCLAIM ${Buffer.from(a.bytes.subarray(3))}` : `send ${a.frame}`;
    case "proclaimed":
      return `proclaimed ${a.seq}`;
    case "waiting":
    case "close":
      return a.type;
    case "grant":
      return `grant ${a.token}`;
    case "lost":
    case "fail":
      return `${a.type} ${causeText(a.cause)}`;
  }
}

/** The claim's own ACQUIRE: version 3 with a value, else 2 for a shared claim, else 1. */
function claimAcquire(
  name: Uint8Array,
  leaseMs: number,
  shared: { mode: number; limit: number } | undefined,
  value: Uint8Array | undefined,
): Uint8Array {
  if (value !== undefined) return encodeAcquireV3(name, leaseMs, SHARED.MODE_EXCLUSIVE, 0, value);
  if (shared !== undefined) return encodeAcquireV2(name, leaseMs, shared.mode, shared.limit);
  return encodeAcquire(name, leaseMs);
}

function feed(core: SessionCore, input: string, at: number): Action[] {
  if (input === "connect") return core.connect(at);
  if (input === "timer") return core.tick(at);
  if (input === "release") return core.release(at);
  if (input === "eof") return core.eof(at);
  if (input.startsWith("proclaim ")) return core.proclaim(utf8.encode(input.slice(9)), at).actions;
  if (input.startsWith("recv ")) return core.receive(serverFrame(input.slice(5)), at);
  throw new Error(`unknown input in vector: ${input}`);
}

describe("spec/vectors/session.json", () => {
  test("has cases", () => assert.ok(spec.cases.length >= 20));
  for (const c of spec.cases) {
    test(c.name, () => {
      const name = utf8.encode("x");
      const shared = c.claim?.shared ? { mode: SHARED.MODE_SHARED, limit: c.claim.limit ?? 0 } : undefined;
      const value = c.claim?.value ? utf8.encode(c.claim.value) : undefined;
      const core = new SessionCore({ leaseMs: c.lease_ms, name, mode: c.mode, shared, value });
      const acquire = claimAcquire(name, c.lease_ms, shared, value);
      c.steps.forEach((step, i) => {
        const where = `step ${i} (${step.in} at ${step.at})`;
        const actions = feed(core, step.in, step.at);
        assert.deepEqual(actions.map(actionText), step.out, where);
        for (const a of actions) {
          if (a.type === "send" && a.frame === "ACQUIRE")
            assert.deepEqual(a.bytes, acquire, `${where}: the claim's ACQUIRE`);
        }
        if (step.state !== undefined) assert.equal(core.state, step.state, where);
        if (step.valid_until !== undefined) assert.equal(core.validUntil, step.valid_until, where);
      });
    });
  }
});

describe("session core beyond the vectors", () => {
  const name = new TextEncoder().encode("x");
  const held = (): SessionCore => {
    const core = new SessionCore({ leaseMs: 1000, name, mode: "wait" });
    core.connect(0);
    core.receive(serverFrame("ACQUIRED 7"), 0);
    return core;
  };

  test("nextWakeAt: heartbeat, then deadline, then the close after a loss", () => {
    const core = held();
    assert.equal(core.nextWakeAt, 250);
    assert.deepEqual(core.tick(250).map(actionText), ["send HEARTBEAT"]);
    assert.equal(core.nextWakeAt, 800, "in flight: only the deadline");
    assert.deepEqual(core.tick(800).map(actionText), ["lost timeout"]);
    assert.equal(core.nextWakeAt, 1000);
    core.tick(1000);
    assert.equal(core.nextWakeAt, undefined);
  });

  test("a frozen owner: loss and close in one step, loss first", () => {
    const core = held();
    assert.deepEqual(core.tick(5000).map(actionText), ["lost timeout", "close"]);
  });

  test("release of a valid held lock hands it back; after a loss it does not", () => {
    const a = held();
    assert.deepEqual(a.release(10), [{ type: "close", handBack: true }]);
    const b = held();
    b.tick(900);
    assert.deepEqual(b.release(910), [{ type: "close", handBack: false }]);
  });

  test("release past the deadline tells the loss first", () => {
    assert.deepEqual(held().release(850).map(actionText), ["lost timeout", "close"]);
  });

  test("garbage after a loss is ignored; the connection stays until the lease", () => {
    const core = held();
    core.tick(800);
    assert.deepEqual(core.receive(Uint8Array.of(0x7f), 850), []);
    assert.deepEqual(core.receive(serverFrame("ERROR 0x01"), 860), [], "unparseable after garbage");
    assert.equal(core.state, "lost");
    assert.deepEqual(core.tick(1000).map(actionText), ["close"]);
  });

  test("garbage while held is a protocol loss", () => {
    assert.deepEqual(held().receive(Uint8Array.of(0x7f), 10).map(actionText), ["lost protocol", "close"]);
  });

  test("a frame split over chunks, and frames sharing one", () => {
    const core = new SessionCore({ leaseMs: 1000, name, mode: "wait" });
    core.connect(0);
    assert.deepEqual(core.receive(Uint8Array.of(0x11, 0x12, 0, 0), 1).map(actionText), ["waiting"]);
    assert.deepEqual(core.receive(Uint8Array.of(0, 0, 0, 0, 0, 9), 2).map(actionText), ["grant 9"]);
  });

  test("a first byte that starts no server message: not monolock, with the bytes it sent", () => {
    const core = new SessionCore({ leaseMs: 1000, name, mode: "wait" });
    core.connect(0);
    const http = new TextEncoder().encode("HTTP/1.1 400 Bad Request\r\n");
    const actions = core.receive(http, 1);
    assert.deepEqual(actions.map(actionText), ["fail not_monolock", "close"]);
    const fail = actions[0];
    assert.ok(fail?.type === "fail" && fail.cause.kind === "not_monolock");
    assert.deepEqual(fail.cause.sent, http);
  });

  test("garbage after a valid first frame is a protocol violation, not a wrong server", () => {
    const core = new SessionCore({ leaseMs: 1000, name, mode: "wait" });
    core.connect(0);
    assert.deepEqual(core.receive(Uint8Array.of(0x11), 1).map(actionText), ["waiting"]);
    assert.deepEqual(core.receive(Uint8Array.of(0x48), 2).map(actionText), ["fail protocol", "close"]);
  });

  test("a refused certificate fails the claim with certificate, before or after the ACQUIRE", () => {
    const before = new SessionCore({ leaseMs: 1000, name, mode: "wait" });
    assert.deepEqual(before.certificateRefused(5, "server", "x").map(actionText), ["fail certificate", "close"]);
    const after = new SessionCore({ leaseMs: 1000, name, mode: "wait" });
    after.connect(0);
    const actions = after.certificateRefused(1, "client", "tlsv13 alert certificate required");
    assert.deepEqual(actions.map(actionText), ["fail certificate", "close"]);
    const fail = actions[0];
    assert.ok(fail?.type === "fail" && fail.cause.kind === "certificate" && fail.cause.side === "client");
  });

  test("proclaim: nothing before the grant; a replaced value keeps its number; one ack settles all", () => {
    const value = utf8.encode("a");
    const core = new SessionCore({ leaseMs: 1000, name, mode: "wait", value });
    assert.equal(core.proclaim(utf8.encode("b"), 0).seq, 0, "connecting: nothing to proclaim");
    core.connect(0);
    core.receive(serverFrame("ACQUIRED 7"), 0);
    // Replies come at once (no RTT), so the heartbeat interval stays a quarter lease.
    assert.deepEqual(core.tick(250).map(actionText), ["send HEARTBEAT"]);
    assert.equal(core.proclaim(utf8.encode("c"), 250).seq, 1);
    assert.equal(core.proclaim(utf8.encode("d"), 250).seq, 2);
    assert.equal(core.nextWakeAt, 800, "in flight: only the deadline");
    assert.deepEqual(core.receive(serverFrame("ACQUIRED 7"), 250).map(actionText), ["send PROCLAIM d"]);
    assert.deepEqual(core.receive(serverFrame("ACQUIRED 7"), 250).map(actionText), ["proclaimed 2"]);
    assert.equal(core.nextWakeAt, 500, "then heartbeats an interval after the PROCLAIM");
  });

  test("eof before connect fails the claim with io", () => {
    const core = new SessionCore({ leaseMs: 1000, name, mode: "wait" });
    assert.equal(core.nextWakeAt, undefined);
    assert.deepEqual(core.eof(5, "refused").map(actionText), ["fail io", "close"]);
  });
});
