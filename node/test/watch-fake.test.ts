// A watch's connection loop against scripted servers: the WATCH it sends and
// resumes with, heartbeats and the reply deadline, a gap, a watcher that
// fell behind, a passive server's leader hint, a terminal error.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { Client, NotAuthorizedError } from "../src/index.js";
import { type FakeConnection, FakeServer } from "./helpers/fake-server.js";

const servers: FakeServer[] = [];
async function fake(): Promise<FakeServer> {
  const s = await FakeServer.start();
  servers.push(s);
  return s;
}
after(async () => {
  for (const s of servers) await s.close();
});

/** Reads a WATCH: `[0x04][0x03][lease u32][name_len u16][name][epoch u64][seq u64]`. */
async function readWatch(conn: FakeConnection): Promise<{ leaseMs: number; name: string; epoch: bigint; seq: bigint }> {
  const head = await conn.read(8);
  assert.deepEqual([head[0], head[1]], [0x04, 0x03]);
  const name = (await conn.read(head.readUInt16BE(6))).toString();
  const tail = await conn.read(16);
  return { leaseMs: head.readUInt32BE(2), name, epoch: tail.readBigUInt64BE(0), seq: tail.readBigUInt64BE(8) };
}

const u64 = (n: bigint): string => n.toString(16).padStart(16, "0");
const at = (epoch: bigint, seq: bigint): string => u64(epoch) + u64(seq);
/** An empty snapshot, whole. */
const emptySnapshot = (epoch: bigint, seq: bigint): string =>
  `14${at(epoch, seq)}01${"00".repeat(13)}14${at(epoch, seq)}04`;
const watching = (epoch: bigint, seq: bigint): string => `15${at(epoch, seq)}`;
/** A live `ended` event (a release of `token`). */
const ended = (epoch: bigint, seq: bigint, token: bigint): string => `14${at(epoch, seq)}07${u64(token)}01`;

describe("a watch's connections", () => {
  test("the WATCH, the first picture, then a resume with its (epoch, seq) after the watcher fell behind", async () => {
    const server = await fake();
    const client = new Client({ servers: server.address, leaseMs: 10_000 });
    const opening = client.watch("w/a");
    const c1 = await server.accept();
    assert.deepEqual(await readWatch(c1), { leaseMs: 10_000, name: "w/a", epoch: 0n, seq: 0n });
    c1.write(emptySnapshot(9n, 5n) + watching(9n, 5n));
    const watch = await opening;
    try {
      assert.equal(watch.leader().state, "no-leader");
      c1.error(0x04); // watcher fell behind: temporary
      const c2 = await server.accept();
      assert.equal(watch.state().known, false, "unknown between connections");
      assert.deepEqual(await readWatch(c2), { leaseMs: 10_000, name: "w/a", epoch: 9n, seq: 5n });
      c2.write(watching(9n, 5n));
      const changes = watch.changes()[Symbol.asyncIterator]();
      for (;;) if ((await changes.next()).value?.known) break;
      assert.deepEqual([watch.state().epoch, watch.state().seq], [9n, 5n]);
    } finally {
      await watch.close();
    }
  });

  test("heartbeats on the lock's schedule; one unanswered for 0.8 x lease ends the connection", async () => {
    const server = await fake();
    const leaseMs = 400;
    const client = new Client({ servers: server.address, leaseMs });
    const opening = client.watch("w/b");
    const c1 = await server.accept();
    await readWatch(c1);
    c1.write(emptySnapshot(3n, 1n) + watching(3n, 1n));
    const watch = await opening;
    try {
      await c1.readHeartbeat();
      const sent = c1.lastDataAt;
      c1.write(watching(3n, 1n));
      await c1.readHeartbeat(); // not answered
      const unanswered = c1.lastDataAt;
      assert.ok(unanswered - sent < leaseMs, "the next heartbeat within the lease");
      await c1.closed;
      const waited = performance.now() - unanswered;
      // Not before the deadline: 0.8 x lease from the send, which came a
      // little before its arrival here (half of it is room for a slow loop).
      assert.ok(waited >= 0.4 * leaseMs, `closed ${Math.round(waited)} ms after the heartbeat arrived`);
      assert.equal(watch.state().known, false);
      const c2 = await server.accept();
      assert.deepEqual((await readWatch(c2)).seq, 1n);
    } finally {
      await watch.close();
    }
  });

  test("an event that skips one ends the connection, and the next resumes from the last it had", async () => {
    const server = await fake();
    const client = new Client({ servers: server.address, leaseMs: 10_000 });
    const opening = client.watch("w/c");
    const c1 = await server.accept();
    await readWatch(c1);
    c1.write(emptySnapshot(4n, 7n) + watching(4n, 7n));
    const watch = await opening;
    try {
      c1.write(ended(4n, 9n, 1n)); // seq 8 is missing
      await c1.closed;
      const c2 = await server.accept();
      assert.deepEqual((await readWatch(c2)).seq, 7n);
    } finally {
      await watch.close();
    }
  });

  test("a passive server's leader hint: the next connection goes to the leader it names", async () => {
    const [passive, skipped, active] = [await fake(), await fake(), await fake()];
    const client = new Client({ servers: [passive.address, skipped.address, active.address], leaseMs: 10_000 });
    const opening = client.watch("w/d");
    const c1 = await passive.accept();
    await readWatch(c1);
    c1.error(0x03, active.address);
    const c2 = await active.accept();
    await readWatch(c2);
    c2.write(emptySnapshot(1n, 0n) + watching(1n, 0n));
    const watch = await opening;
    assert.equal(skipped.connections.length, 0, "the server between was not asked");
    await watch.close();
  });

  test("a terminal error ends the watch: watch() rejects with it", async () => {
    const server = await fake();
    const client = new Client({ servers: server.address, leaseMs: 10_000 });
    const opening = client.watch("w/e");
    const c1 = await server.accept();
    await readWatch(c1);
    c1.error(0x18, "not authorized for lock");
    await assert.rejects(opening, NotAuthorizedError);
  });
});
