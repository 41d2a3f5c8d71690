// Sessions against a scripted server: what a real server cannot be made to do.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Client,
  ConnectionError,
  LockLostError,
  SessionUnsupportedError,
  ShuttingDownError,
  UnknownMessageError,
} from "../src/index.js";
import { FakeServer } from "./helpers/fake-server.js";

describe("sessions against a scripted server", () => {
  let server: FakeServer;
  let client: Client;
  before(async () => {
    server = await FakeServer.start();
    client = new Client({ servers: server.address, leaseMs: 2000 });
  });
  after(async () => {
    await server.close();
  });

  for (const code of [0x13, 0x10, 0x11]) {
    test(`a server that predates sessions (SESSION answered 0x${code.toString(16)}): SessionUnsupportedError, terminal`, async () => {
      const accepted = server.accept();
      const opening = client.session();
      const conn = await accepted;
      assert.equal((await conn.read(6)).toString("hex"), "0504000007d0");
      conn.error(code, "unknown message type: 0x05");
      await assert.rejects(opening, (err: unknown) => {
        assert.ok(err instanceof SessionUnsupportedError);
        assert.equal(err.code, code);
        assert.equal(err.temporary, false);
        return true;
      });
    });
  }

  test("a server that never answers SESSION: the open fails at the deadline (0.8 x lease), not at the lease's end", async () => {
    const leaseMs = 5000;
    const slow = new Client({ servers: server.address, leaseMs });
    const accepted = server.accept();
    const started = performance.now();
    const opening = slow.session();
    const conn = await accepted;
    await conn.read(6);
    await assert.rejects(opening, ConnectionError);
    const elapsed = performance.now() - started;
    assert.ok(elapsed >= 0.75 * leaseMs, `failed after ${elapsed} ms, before the deadline`);
    assert.ok(elapsed < leaseMs, `failed after ${elapsed} ms: held the connection to the lease's end for nothing`);
  });

  test("an open session's ERROR 0x13 is no sign of an old server", async () => {
    const accepted = server.accept();
    const opening = client.session();
    const conn = await accepted;
    await conn.read(6);
    conn.write("1600002710");
    const session = await opening;
    conn.error(0x13, "unknown message type: 0x7f");
    await new Promise<void>((resolve) => session.signal.addEventListener("abort", () => resolve(), { once: true }));
    assert.ok(session.signal.reason instanceof UnknownMessageError);
    assert.ok(!(session.signal.reason instanceof SessionUnsupportedError));
    await session.close();
  });

  test("an ERROR ends the session: every held lock told lost (with its code) before the close", async () => {
    const accepted = server.accept();
    const opening = client.session();
    const conn = await accepted;
    await conn.read(6);
    conn.write("1600002710");
    const session = await opening;
    const pending = [session.acquire("f/a"), session.acquire("f/b")];
    const opens = await conn.read(2 * 16);
    assert.equal(opens.subarray(0, 16).toString("hex"), "06000000010101000007d00003662f61");
    assert.equal(opens.subarray(16, 21).toString("hex"), "0600000002");
    conn.write("17000000011200000000000000071700000002120000000000000008");
    const [a, b] = await Promise.all(pending);
    assert.ok(a !== undefined && b !== undefined);
    assert.deepEqual([a.token, b.token], [7n, 8n]);
    // Told synchronously, before the session's own end is.
    let sessionEndedWhenTold: boolean | undefined;
    a.signal.addEventListener("abort", () => {
      sessionEndedWhenTold = session.signal.aborted;
    });
    const waiting = session.acquire("f/c");
    conn.error(0x01, "server shutting down");
    const [lostA, lostB] = await Promise.all([a.lost, b.lost]);
    assert.ok(lostA instanceof LockLostError && lostA.cause instanceof ShuttingDownError);
    assert.equal(lostB.code, 0x01);
    assert.equal(sessionEndedWhenTold, false);
    await assert.rejects(waiting, ShuttingDownError);
    assert.ok(session.signal.aborted && session.signal.reason instanceof ShuttingDownError);
    await assert.rejects(
      session.acquire("f/d"),
      (err: unknown) => err instanceof ConnectionError && /has ended/.test(err.message),
    );
    await session.close();
  });

  test("a watch stream the server ends alone (fell behind) is reopened, resuming; the session's ERROR ends the watch", async () => {
    const slow = new Client({ servers: server.address, leaseMs: 10_000 }); // no heartbeat during the test
    const accepted = server.accept();
    const opening = slow.session();
    const conn = await accepted;
    await conn.read(6);
    conn.write("1600002710");
    const session = await opening;
    const watching = session.watch("fw");
    const at = (epoch: number, seq: number): string =>
      `${epoch.toString(16).padStart(16, "0")}${seq.toString(16).padStart(16, "0")}`;
    // OPEN of a WATCH version 3, lease 10000, name "fw", from (epoch, seq).
    const open = (id: number, epoch: number, seq: number): string =>
      `06${id.toString(16).padStart(8, "0")}04030000271000026677${at(epoch, seq)}`;
    assert.equal((await conn.read(31)).toString("hex"), open(1, 0, 0));
    const picture = (id: number): string => {
      const s = `17${id.toString(16).padStart(8, "0")}`;
      return `${s}14${at(5, 7)}0100000000000000000000000000${s}14${at(5, 7)}04${s}15${at(5, 7)}`;
    };
    conn.write(picture(1));
    const watch = await watching;
    assert.ok(watch.state().known);
    conn.write("19000000010400"); // fell behind: this stream only
    assert.equal((await conn.read(31)).toString("hex"), open(2, 5, 7), "reopened from where it left off");
    assert.ok(session.alive);
    conn.error(0x01, "server shutting down");
    const ended = await watch.ended;
    assert.ok(ended instanceof ShuttingDownError);
    assert.ok(!watch.state().known);
    await session.close();
  });
});
