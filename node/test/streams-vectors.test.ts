// Every case of spec/vectors/streams.json, against the pure core of a
// session (protocol version 4): whole frames fed as bytes, the actions
// written in the vectors' words and order.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MessageType, SESSION } from "../src/constants.js";
import type { Cause } from "../src/core.js";
import { type SessionAction, SessionCore, type SessionState } from "../src/session-core.js";
import { encodeOpen, encodeSession } from "../src/session-frames.js";
import { validateAcquire } from "../src/validate.js";
import { hex, loadSpec } from "./helpers/spec.js";

interface Step {
  at: number;
  in: string;
  out: string[];
  state?: string;
  valid_until?: number;
}
interface Vectors {
  cases: { name: string; description: string; lease_ms: number; steps: Step[] }[];
}
interface Frames {
  client_valid: { type: string; name?: string; lease_ms?: number; hex: string }[];
}

const spec = loadSpec<Vectors>("vectors/streams.json");
const frames = loadSpec<Frames>("vectors/frames.json");

/** The core's states in the vectors' words. */
const stateText: Record<SessionState, string> = {
  connecting: "connecting",
  open: "live",
  lost: "timed out",
  closed: "closed",
};

const u32 = (n: number): string => n.toString(16).padStart(8, "0");
const u8 = (hexCode: string): string => Number.parseInt(hexCode, 16).toString(16).padStart(2, "0");

/** Parses a decimal number of an input, strictly. */
function num(text: string | undefined, input: string): number {
  if (text === undefined || !/^\d+$/.test(text)) throw new Error(`bad number in vector input: ${input}`);
  return Number(text);
}

/** The wire bytes of a `recv ...` input: one whole server frame (docs/protocol.md "Version 4: sessions"). */
function serverFrame(input: string): Uint8Array {
  const [, type, a, b] = input.split(" ");
  switch (type) {
    case "SESSION_OK":
      return hex(`16${u32(num(a, input))}`);
    case "ALIVE":
      return hex("1a");
    case "WAITING":
      return hex(`17${u32(num(a, input))}11`);
    case "ACQUIRED":
      return hex(`17${u32(num(a, input))}12${BigInt(num(b, input)).toString(16).padStart(16, "0")}`);
    case "RELEASED":
      return hex(`18${u32(num(a, input))}`);
    case "STREAM_END": // an empty reason
      return hex(`19${u32(num(a, input))}${u8(b ?? "x")}00`);
    case "ERROR": // code, an empty reason
      return hex(`13${u8(a ?? "x")}00`);
    default:
      throw new Error(`unknown frame in vector: ${input}`);
  }
}

function causeText(cause: Cause): string {
  if (cause.kind !== "server") return cause.kind;
  return cause.code === null ? "server" : `server 0x${cause.code.toString(16).padStart(2, "0")}`;
}

/** The ACQUIRE every claim's OPEN carries: frames.json's exclusive version 1 ACQUIRE of `a` with this lease. */
function acquireOf(leaseMs: number): Uint8Array {
  const frame = frames.client_valid.find((f) => f.type === "ACQUIRE" && f.name === "a" && f.lease_ms === leaseMs);
  if (frame === undefined) throw new Error(`frames.json has no ACQUIRE of "a" with lease ${leaseMs}`);
  return hex(frame.hex);
}

/** A sent frame in the vectors' words; an OPEN must carry exactly `acquire`. */
function sendText(bytes: Uint8Array, acquire: Uint8Array): string {
  const id = bytes.length >= 5 ? new DataView(bytes.buffer, bytes.byteOffset).getUint32(1) : 0;
  switch (bytes[0]) {
    case SESSION.SESSION_TYPE:
      return "send SESSION";
    case MessageType.HEARTBEAT:
      return bytes.length === 1 ? "send HEARTBEAT" : `send bad HEARTBEAT ${Buffer.from(bytes).toString("hex")}`;
    case SESSION.OPEN_TYPE:
      assert.deepEqual(bytes, encodeOpen(id, acquire), "an OPEN carries the claim's ACQUIRE");
      return `send OPEN ${id}`;
    case SESSION.RELEASE_TYPE:
      return bytes.length === 5 ? `send RELEASE ${id}` : `send bad RELEASE ${Buffer.from(bytes).toString("hex")}`;
    default:
      return `send unknown ${Buffer.from(bytes).toString("hex")}`;
  }
}

/**
 * The actions in the vectors' words and order: `ready`, the tells by
 * stream id (stable), `ended`, the sends, `close`. The core's own order is
 * checked too where the owner depends on it: nothing after the close, and
 * every tell before the session's end.
 */
function inWords(actions: SessionAction[], acquire: Uint8Array, where: string): string[] {
  const closeAt = actions.findIndex((a) => a.type === "close");
  if (closeAt >= 0) assert.equal(closeAt, actions.length - 1, `${where}: close is the last action`);
  const endedAt = actions.findIndex((a) => a.type === "ended");
  const ready: string[] = [];
  const tells: { stream: number; text: string }[] = [];
  const ended: string[] = [];
  const sends: string[] = [];
  const close: string[] = [];
  actions.forEach((a, i) => {
    switch (a.type) {
      case "ready":
        ready.push("ready");
        return;
      case "waiting":
      case "released":
        tells.push({ stream: a.stream, text: `${a.type} ${a.stream}` });
        break;
      case "grant":
        tells.push({ stream: a.stream, text: `grant ${a.stream} ${a.token}` });
        break;
      case "lost":
      case "fail":
        tells.push({ stream: a.stream, text: `${a.type} ${a.stream} ${causeText(a.cause)}` });
        break;
      case "ended":
        ended.push(`ended ${causeText(a.cause)}`);
        return;
      case "send":
        sends.push(sendText(a.bytes, acquire));
        return;
      case "close":
        close.push("close");
        return;
      default:
        tells.push({ stream: "stream" in a ? a.stream : 0, text: `unexpected ${a.type}` });
        break;
    }
    if (endedAt >= 0) assert.ok(i < endedAt, `${where}: every stream is told before the session's end`);
  });
  tells.sort((x, y) => x.stream - y.stream);
  return [...ready, ...tells.map((t) => t.text), ...ended, ...sends, ...close];
}

/** Applies one input at `at`, then (unless it closed) ticks the core at the same instant. */
function feed(core: SessionCore, leaseMs: number, input: string, at: number, where: string): string[] {
  const acquire = acquireOf(leaseMs);
  const [verb, arg] = input.split(" ");
  let actions: SessionAction[];
  let refused = false;
  switch (verb) {
    case "connect":
      actions = core.connect(at);
      assert.deepEqual(
        actions.flatMap((a) => (a.type === "send" ? [a.bytes] : [])),
        [encodeSession(leaseMs)],
        `${where}: SESSION with the session's lease`,
      );
      break;
    case "timer":
      actions = core.tick(at);
      break;
    case "eof":
      actions = core.eof(at);
      break;
    case "close":
      actions = core.close(at);
      break;
    case "open": {
      if (arg !== "wait" && arg !== "try") throw new Error(`unknown open in vector: ${input}`);
      const v = validateAcquire("a", leaseMs);
      const opened = core.open({ name: v.bytes, shared: v.shared, value: v.value, mode: arg }, at);
      refused = opened.stream === 0;
      actions = opened.actions;
      break;
    }
    case "release":
      actions = core.release(num(arg, input), at);
      break;
    case "recv":
      actions = core.receive(serverFrame(input), at);
      break;
    default:
      throw new Error(`unknown input in vector: ${input}`);
  }
  if (verb !== "timer" && !actions.some((a) => a.type === "close")) actions = [...actions, ...core.tick(at)];
  const out = inWords(actions, acquire, where);
  return refused ? ["refused", ...out] : out;
}

describe("spec/vectors/streams.json", () => {
  test("has cases", () => assert.ok(spec.cases.length >= 14));
  for (const c of spec.cases) {
    test(c.name, () => {
      const core = new SessionCore(c.lease_ms);
      c.steps.forEach((step, i) => {
        const where = `step ${i + 1} (${step.in} at ${step.at})`;
        assert.deepEqual(feed(core, c.lease_ms, step.in, step.at, where), step.out, where);
        if (step.state !== undefined) assert.equal(stateText[core.state], step.state, `${where}: state`);
        if (step.valid_until !== undefined) assert.equal(core.validUntil, step.valid_until, `${where}: valid_until`);
      });
    });
  }
});
