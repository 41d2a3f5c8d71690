// The session core (protocol version 4) without sockets or clocks: the
// bytes it sends, what it tells, and when, for the rules of docs/protocol.md
// "Version 4: sessions".
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type SessionAction, SessionCore, type StreamClaimRequest } from "../src/session-core.js";
import { validateAcquire } from "../src/validate.js";
import { toHex } from "./helpers/spec.js";

const lease = 1000;
const hb = lease / 4;

function claim(
  name: string,
  request: { shared?: boolean; limit?: number; value?: string } = {},
  mode: "wait" | "try" = "wait",
): StreamClaimRequest {
  const v = validateAcquire(name, lease, request);
  return { name: v.bytes, shared: v.shared, value: v.value, mode };
}

const sent = (actions: SessionAction[]): string[] =>
  actions.flatMap((a) => (a.type === "send" ? [toHex(a.bytes)] : []));

/** Actions without the bytes of sends, for readable comparisons. */
const told = (actions: SessionAction[]): string[] =>
  actions.map((a) => {
    switch (a.type) {
      case "send":
        return `send ${toHex(a.bytes).slice(0, 2)}`;
      case "lost":
      case "fail":
        return `${a.type} ${a.stream} ${a.cause.kind}${a.cause.kind === "server" ? ` ${a.cause.code}` : ""}`;
      case "ended":
        return `ended ${a.cause.kind}`;
      case "close":
        return `close ${a.handBack}`;
      case "ready":
        return `ready ${a.maxStreams}`;
      case "grant":
        return `grant ${a.stream} ${a.token}`;
      case "proclaimed":
        return `proclaimed ${a.stream} ${a.seq}`;
      case "vouched":
        return `vouched ${a.streams.join(",")} ${a.sentAt}`;
      case "watch":
        return `watch ${a.stream} ${a.frame.type}`;
      case "watch_end":
        return `watch_end ${a.stream} ${a.cause.kind}${a.cause.kind === "server" ? ` ${a.cause.code}` : ""}`;
      default:
        return `${a.type} ${a.stream}`;
    }
  });

const hex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "hex"));
const u32 = (n: number): string => n.toString(16).padStart(8, "0");
const stream = (id: number, inner: string): Uint8Array => hex(`17${u32(id)}${inner}`);
const acquired = (id: number, token: number): Uint8Array => stream(id, `12${token.toString(16).padStart(16, "0")}`);
const waiting = (id: number): Uint8Array => stream(id, "11");
const SESSION_OK = hex("1600002710");
const ALIVE = hex("1a");

/** A core whose SESSION was sent at t=0 and answered at t=1. */
function opened(): SessionCore {
  const core = new SessionCore(lease);
  assert.deepEqual(sent(core.connect(0)), ["0504000003e8"]);
  assert.deepEqual(told(core.receive(SESSION_OK, 1)), ["ready 10000"]);
  assert.equal(core.state, "open");
  return core;
}

describe("session core", () => {
  test("streams start at 1 and increase; OPEN carries the single claim's ACQUIRE with the session's lease", () => {
    const core = opened();
    const a = core.open(claim("a"), 2);
    assert.equal(a.stream, 1);
    assert.deepEqual(sent(a.actions), ["06000000010101000003e8000161"]);
    const b = core.open(claim("pool/gpu", { limit: 3 }), 2);
    assert.equal(b.stream, 2);
    assert.deepEqual(sent(b.actions), [`06${u32(2)}0102000003e80100030008706f6f6c2f677075`]);
    const c = core.open(claim("v", { value: "x" }), 2);
    assert.equal(c.stream, 3);
    assert.equal(sent(c.actions)[0]?.slice(0, 14), `06${u32(3)}0103`);
    assert.equal(core.openStreams, 3);
  });

  test("nothing opens before SESSION_OK or after the end", () => {
    const core = new SessionCore(lease);
    core.connect(0);
    assert.equal(core.open(claim("a"), 1).stream, 0);
    core.receive(SESSION_OK, 1);
    core.eof(2);
    assert.equal(core.open(claim("a"), 3).stream, 0);
  });

  test("heartbeats on the single-claim schedule, one in flight; ALIVE moves the deadline to its send", () => {
    const core = opened();
    assert.equal(core.validUntil, 0 + 0.8 * lease, "the SESSION's send");
    assert.equal(core.nextWakeAt, 0 + hb - 2 * 1, "lease/4 - 2 x srtt after the last send (the SESSION, at 0)");
    assert.deepEqual(sent(core.tick(hb)), ["02"]);
    assert.deepEqual(sent(core.tick(2 * hb)), [], "the next waits for ALIVE");
    const out = core.receive(ALIVE, 2 * hb + 1);
    assert.equal(core.validUntil, hb + 0.8 * lease);
    assert.deepEqual(sent(out), ["02"], "overdue: at once");
  });

  test("an ALIVE with no HEARTBEAT in flight is a violation that ends the session", () => {
    const core = opened();
    core.open(claim("a"), 2);
    core.receive(acquired(1, 7), 3);
    assert.deepEqual(told(core.receive(ALIVE, 4)), ["lost 1 protocol", "ended protocol", "close false"]);
  });

  test("WAITING then the promotion; an ON's reply while waiting is not the grant", () => {
    const core = opened();
    const { stream: id } = core.open(claim("a"), 2);
    assert.deepEqual(told(core.receive(waiting(id), 3)), ["waiting 1"]);
    assert.deepEqual(told(core.receive(acquired(id, 9), 4)), ["grant 1 9"]);
    const { seq, actions } = core.proclaim(id, new Uint8Array([0x76]), 5);
    assert.equal(seq, 1);
    assert.deepEqual(sent(actions), [`07${u32(1)}03000176`]);
    assert.deepEqual(told(core.receive(acquired(id, 9), 6)), ["proclaimed 1 1"]);
    assert.deepEqual(told(core.receive(acquired(id, 10), 7)).slice(0, 1), ["lost 1 protocol"], "a changed token");
  });

  test("tryAcquire: WAITING sends RELEASE, and RELEASED fails it busy; the stream's frames between are dropped", () => {
    const core = opened();
    const { stream: id } = core.open(claim("a", {}, "try"), 2);
    const out = core.receive(waiting(id), 3);
    assert.deepEqual(sent(out), [`08${u32(id)}`]);
    assert.deepEqual(told(out), ["send 08"]);
    assert.deepEqual(told(core.receive(acquired(id, 5), 4)), [], "a grant that crossed the RELEASE");
    assert.deepEqual(told(core.receive(hex(`19${u32(id)}0200`), 5)), [], "an end that crossed the RELEASE");
    assert.deepEqual(told(core.receive(hex(`18${u32(id)}`), 6)), ["fail 1 busy"]);
    assert.equal(core.openStreams, 0);
  });

  test("tryAcquire: a busy claim fails busy when its release wait runs out or the session ends", () => {
    const waited = opened();
    waited.receive(waiting(waited.open(claim("a", {}, "try"), 2).stream), 3);
    // The wait is min(0.8 x lease, 1 s) = 800 ms; heartbeats keep the session alive meanwhile.
    for (let t = hb; t < 803; t += hb) if (sent(waited.tick(t)).includes("02")) waited.receive(ALIVE, t);
    assert.deepEqual(
      told(waited.tick(803)).filter((a) => a !== "send 02"),
      ["fail 1 busy"],
    );
    const ended = opened();
    ended.receive(waiting(ended.open(claim("a", {}, "try"), 2).stream), 3);
    assert.deepEqual(told(ended.eof(4)), ["fail 1 busy", "ended io", "close false"]);
  });

  test("STREAM_END: a claim not granted fails with the code, a held one is lost with it; the session lives", () => {
    const core = opened();
    const a = core.open(claim("a"), 2).stream;
    const b = core.open(claim("b"), 2).stream;
    core.receive(acquired(b, 4), 3);
    const end = (id: number, code: number): Uint8Array => hex(`19${u32(id)}${code.toString(16).padStart(2, "0")}00`);
    assert.deepEqual(told(core.receive(end(a, 0x1a), 4)), ["fail 1 server 26"]);
    assert.deepEqual(told(core.receive(end(b, 0x02), 5)), ["lost 2 server 2"]);
    assert.equal(core.state, "open");
    assert.equal(core.openStreams, 0);
  });

  test("release: RELEASE at once, later frames dropped, done at RELEASED or after the release wait", () => {
    const core = opened();
    const a = core.open(claim("a"), 2).stream;
    const b = core.open(claim("b"), 2).stream;
    core.receive(Buffer.concat([acquired(a, 1), acquired(b, 2)]), 3);
    assert.deepEqual(sent(core.release(a, 10)), [`08${u32(a)}`]);
    assert.deepEqual(told(core.receive(stream(a, "11"), 11)), [], "dropped, not a violation");
    assert.deepEqual(told(core.receive(hex(`18${u32(a)}`), 12)), ["released 1"]);
    core.release(b, 20);
    // The wait is min(0.8 x lease, 1 s) = 800 ms; heartbeats keep the session alive meanwhile.
    for (let t = 20; t < 820; t += hb) {
      const out = core.tick(t);
      if (sent(out).includes("02")) core.receive(ALIVE, t + 1);
      assert.ok(!told(out).includes("released 2"));
    }
    assert.deepEqual(
      told(core.tick(820)).filter((a) => a !== "send 02"),
      ["released 2"],
    );
    assert.deepEqual(told(core.release(b, 821)), ["released 2"], "nothing left to wait for");
  });

  test("the deadline: every held claim lost and pending failed, told first; connection kept until last ack + lease", () => {
    const core = opened();
    const a = core.open(claim("a"), 2).stream;
    core.open(claim("b"), 2);
    core.receive(acquired(a, 1), 3);
    core.release(core.open(claim("c"), 4).stream, 5);
    // No ALIVE ever comes: the deadline is the SESSION's send + 0.8 x lease.
    assert.equal(core.validUntil, 800);
    const out = core.tick(800);
    assert.deepEqual(
      told(out).filter((x) => x !== "send 02"),
      ["lost 1 timeout", "fail 2 timeout", "released 3", "ended timeout"],
    );
    assert.equal(core.state, "lost");
    assert.deepEqual(told(core.receive(ALIVE, 900)), [], "a late ack never revives it");
    assert.equal(core.nextWakeAt, 1000);
    assert.deepEqual(told(core.tick(1000)), ["close false"]);
  });

  test("an ERROR at its type byte alone: held claims lost before the close, no code", () => {
    const core = opened();
    const a = core.open(claim("a"), 2).stream;
    core.receive(acquired(a, 1), 3);
    assert.deepEqual(told(core.receive(hex("13"), 4)), ["lost 1 server null", "ended server", "close false"]);
    assert.equal(core.state, "closed");
  });

  test("the connection ends: held lost, pending failed, releases done, then close", () => {
    const core = opened();
    const a = core.open(claim("a"), 2).stream;
    const b = core.open(claim("b"), 2).stream;
    core.open(claim("c"), 2);
    core.receive(Buffer.concat([acquired(a, 1), acquired(b, 2)]), 3);
    core.release(b, 4);
    assert.deepEqual(told(core.eof(5)), ["lost 1 io", "released 2", "fail 3 io", "ended io", "close false"]);
  });

  test("close by the application: every claim released, the connection handed back, nothing told lost", () => {
    const core = opened();
    const a = core.open(claim("a"), 2).stream;
    const b = core.open(claim("b"), 2).stream;
    core.open(claim("c"), 2);
    core.receive(Buffer.concat([acquired(a, 1), acquired(b, 2)]), 3);
    core.release(a, 4);
    assert.deepEqual(told(core.close(5)), ["released 1", "released 2", "released 3", "close true"]);
    assert.equal(core.state, "closed");
  });

  test("the deadline with nothing held: the end told, the connection still kept until last ack + lease", () => {
    const core = new SessionCore(lease);
    core.connect(0);
    assert.deepEqual(told(core.tick(800)), ["ended timeout"]);
    assert.equal(core.state, "lost");
    assert.equal(core.nextWakeAt, 1000);
    assert.deepEqual(told(core.tick(1000)), ["close false"]);
  });

  test("stream ids the server never saw opened are a violation", () => {
    for (const frame of [hex(`18${u32(1)}`), hex(`19${u32(0)}0000`), waiting(3)]) {
      const core = opened();
      core.open(claim("a"), 2);
      assert.deepEqual(told(core.receive(frame, 3)).slice(-2), ["ended protocol", "close false"]);
    }
  });

  test("a watch stream: its frames handed on; ALIVE vouches for it once it had its first WATCHING", () => {
    const core = opened();
    const name = validateAcquire("w", lease).bytes;
    const { stream: id, actions } = core.openWatch(name, 5n, 7n, 2);
    assert.equal(id, 1);
    assert.deepEqual(sent(actions), [
      `06${u32(1)}040300000${(lease).toString(16)}000177${"0".repeat(15)}5${"0".repeat(15)}7`,
    ]);
    // The first heartbeat goes before its WATCHING: that ALIVE does not vouch for it.
    core.tick(hb);
    assert.deepEqual(told(core.receive(stream(id, `15${"0".repeat(15)}5${"0".repeat(15)}7`), hb + 1)), [
      "watch 1 watching",
    ]);
    assert.deepEqual(told(core.receive(ALIVE, hb + 2)), []);
    core.tick(2 * hb);
    assert.deepEqual(told(core.receive(ALIVE, 2 * hb + 1)), [`vouched 1 ${2 * hb}`]);
    assert.deepEqual(told(core.receive(waiting(id), 2 * hb + 2)).slice(-2), ["ended protocol", "close false"]);
  });

  test("a watch stream ends with STREAM_END or the session, never as a lost claim", () => {
    const core = opened();
    const name = validateAcquire("w", lease).bytes;
    const a = core.openWatch(name, 0n, 0n, 2).stream;
    core.openWatch(name, 0n, 0n, 2);
    assert.deepEqual(told(core.receive(hex(`19${u32(a)}0400`), 3)), ["watch_end 1 server 4"]);
    assert.equal(core.state, "open", "a watch that fell behind ends alone");
    assert.deepEqual(told(core.eof(4)), ["watch_end 2 io", "ended io", "close false"]);
  });

  test("garbage at the start is not monolock; a second SESSION_OK is a violation", () => {
    const core = new SessionCore(lease);
    core.connect(0);
    const out = core.receive(hex("485454502f"), 1);
    assert.deepEqual(told(out), ["ended not_monolock", "close false"]);
    const again = opened();
    assert.deepEqual(told(again.receive(SESSION_OK, 2)).slice(-2), ["ended protocol", "close false"]);
  });
});
