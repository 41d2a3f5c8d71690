// Watches and leader election against the real Go server. Bounds derive
// from the lease and are generous: only the order of what is seen, and the
// 0.8 x lease rule, are checked exactly.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, EmptyNameError, type Observation, Term, type WatchState } from "../src/index.js";
import { PartitionProxy } from "./helpers/partition-proxy.js";
import { RealServer } from "./helpers/real-server.js";

/** How long any one expected thing may take to show, on a loaded machine. */
const WAIT_MS = 15_000;
const text = (b: Uint8Array): string => Buffer.from(b).toString();

/** Reads `items` until one satisfies `ok`, failing after WAIT_MS. */
async function until<T>(items: AsyncIterator<T>, ok: (item: T) => boolean, what: string): Promise<T> {
  const deadline = performance.now() + WAIT_MS;
  for (;;) {
    const left = deadline - performance.now();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), Math.max(left, 0));
    });
    const next = await Promise.race([items.next(), timeout]).finally(() => clearTimeout(timer));
    assert.ok(!next.done, `the stream ended before ${what}`);
    if (ok(next.value)) return next.value;
  }
}

describe("election against monolock serve", () => {
  let server: RealServer;
  let client: Client;
  before(async () => {
    server = await RealServer.start();
    client = new Client({ servers: server.address, leaseMs: 2000 });
  });
  after(async () => {
    await server.stop();
  });

  test("a follower sees no leader, each term with its value and token, a new value, the candidates, the next term", async () => {
    const stop = new AbortController();
    const obs = client.observe("el/leader", { signal: stop.signal })[Symbol.asyncIterator]();
    const first = await until(obs, () => true, "the first observation");
    assert.equal(first.state, "no-leader");

    const a = await client.campaign("el/leader", "10.0.0.7:80");
    assert.ok(a instanceof Term);
    let o = await until(obs, (x) => x.state === "leader", "the first term");
    assert.equal(o.token, a.token);
    assert.equal(text(o.value), "10.0.0.7:80");
    assert.equal(o.candidates, 0);

    await a.proclaim("10.0.0.7:81");
    o = await until(obs, (x) => text(x.value) === "10.0.0.7:81", "the proclaimed value");
    assert.equal(o.token, a.token, "a new value, the same term");

    const elected = client.campaign("el/leader", "10.0.0.8:80");
    o = await until(obs, (x) => x.candidates === 1, "a candidate");
    assert.equal(o.token, a.token);

    await a.resign();
    const b = await elected;
    o = await until(obs, (x) => x.state === "leader" && x.token !== a.token, "the next term");
    assert.equal(o.token, b.token);
    assert.equal(text(o.value), "10.0.0.8:80");
    assert.ok(b.token > a.token);

    const now = await client.leader("el/leader");
    assert.equal(now.state, "leader");
    assert.equal(now.token, b.token);
    await b.resign();
    o = await until(obs, (x) => x.state === "no-leader", "no leader after the last resign");
    stop.abort();
    assert.equal((await obs.next()).done, true, "the observation ends with its signal");
  });

  test("leader() is a one-shot: no leader, then the leader", async () => {
    assert.equal((await client.leader("el/once")).state, "no-leader");
    const term = await client.campaign("el/once", "me");
    const o: Observation = await client.leader("el/once");
    assert.deepEqual([o.state, o.token, text(o.value)], ["leader", term.token, "me"]);
    await term.resign();
  });

  test("a watch's state: holders, waiters, a known picture vouched for 0.8 x lease", async () => {
    await using watch = await client.watch("el/state");
    const st = watch.state();
    assert.equal(st.known, true);
    assert.deepEqual([st.holders.length, st.waiters.length], [0, 0]);
    assert.ok(st.validUntil !== undefined && st.validUntil - performance.now() <= 1600);
    const lock = await client.acquire("el/state", { value: "v" });
    const changes = watch.changes()[Symbol.asyncIterator]();
    const held = await until(changes, (s) => s.holders.length === 1, "the holder");
    assert.equal(held.holders[0]?.token, lock.token);
    assert.equal(text(held.holders[0]?.value ?? new Uint8Array()), "v");
    await lock.release();
    await until(changes, (s) => s.holders.length === 0, "the release");
  });

  test("campaign with an empty value is refused before anything is sent", async () => {
    await assert.rejects(client.campaign("el/empty", ""), (err: unknown) => {
      assert.ok(err instanceof TypeError);
      assert.match(err.message, /must not be empty/);
      return true;
    });
    await assert.rejects(client.campaign("el/empty", new Uint8Array(0)), TypeError);
  });

  test("a bad name is refused before connecting, as the server would", async () => {
    await assert.rejects(client.watch(""), EmptyNameError);
  });
});

describe("a watch behind a proxy", () => {
  let server: RealServer;
  let proxy: PartitionProxy;
  before(async () => {
    server = await RealServer.start();
    proxy = await PartitionProxy.start(server.address);
  });
  after(async () => {
    await proxy.close();
    await server.stop();
  });

  test("a follower whose server goes silent says unknown by 0.8 x lease after the cut", async () => {
    const leaseMs = 600;
    const leader = new Client({ servers: server.address, leaseMs: 5000 });
    const term = await leader.campaign("px/leader", "x");
    const follower = new Client({ servers: proxy.address, leaseMs });
    const watch = await follower.watch("px/leader");
    try {
      assert.equal(watch.leader().state, "leader");
      await new Promise((r) => setTimeout(r, leaseMs)); // a few heartbeats go through
      const changes = watch.changes()[Symbol.asyncIterator]();
      let lastKnown = watch.state();
      const cut = performance.now();
      proxy.partitioned = true;
      await until(
        changes,
        (st) => {
          if (st.known) lastKnown = st;
          return !st.known;
        },
        "unknown",
      );
      assert.equal(watch.leader().state, "unknown");
      // Vouched for at most until the last acknowledged send + 0.8 x lease,
      // and that send was before the cut.
      const validFor = (lastKnown.validUntil ?? Number.POSITIVE_INFINITY) - cut;
      assert.ok(validFor <= 0.8 * leaseMs, `vouched for ${validFor} ms after the cut`);
    } finally {
      proxy.partitioned = false;
      proxy.dropAll();
      await watch.close();
      await term.resign();
    }
  });

  test("a dropped connection: unknown, then known again on the next one, from where it left off", async () => {
    const leader = new Client({ servers: server.address, leaseMs: 5000 });
    const follower = new Client({ servers: proxy.address, leaseMs: 2000 });
    const watch = await follower.watch("px/resume");
    try {
      const changes = watch.changes()[Symbol.asyncIterator]();
      const before: WatchState = watch.state();
      proxy.dropAll();
      await until(changes, (s) => !s.known, "unknown after the drop");
      const term = await leader.campaign("px/resume", "y");
      const after = await until(changes, (s) => s.known && s.holders.length === 1, "known again, with the holder");
      assert.equal(after.holders[0]?.token, term.token);
      assert.equal(after.epoch, before.epoch, "resumed in the same history");
      assert.ok(after.seq > before.seq);
      await term.resign();
    } finally {
      await watch.close();
    }
  });

  test("an abort before the first picture rejects with the signal's reason", async () => {
    proxy.partitioned = true;
    try {
      const follower = new Client({ servers: proxy.address, leaseMs: 1000 });
      const reason = new Error("gave up");
      const ac = new AbortController();
      setTimeout(() => ac.abort(reason), 300);
      await assert.rejects(follower.watch("px/never", { signal: ac.signal }), (err) => err === reason);
    } finally {
      proxy.partitioned = false;
      proxy.dropAll();
    }
  });
});
