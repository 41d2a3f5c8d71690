// Sessions (protocol version 4) against the real Go server: many claims on
// one connection, each an ordinary Lock.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  AcquireAbortedError,
  Client,
  EmptyNameError,
  InvalidLeaseError,
  InvalidModeError,
  LimitMismatchError,
  type Lock,
  LockBusyError,
  LockLostError,
  LockReleasedError,
  NameTooLongError,
  NoValueError,
  TooManyStreamsError,
  ValueTooLongError,
} from "../src/index.js";
import { makeSelfSignedCert } from "./helpers/certs.js";
import { PartitionProxy } from "./helpers/partition-proxy.js";
import { RealServer } from "./helpers/real-server.js";

interface Listing {
  locks: { name: string; holders: { session: number; token: number; value?: string }[] }[];
}

const lease = 5000;

describe("sessions against monolock serve", () => {
  let server: RealServer;
  let client: Client;
  let admin: string;
  before(async () => {
    server = await RealServer.start(["--admin", "127.0.0.1:0"]);
    client = new Client({ servers: server.address, leaseMs: lease });
    admin = await server.adminAddress();
  });
  after(async () => {
    await server.stop();
  });

  async function listed(name: string): Promise<Listing["locks"][number] | undefined> {
    const res = await fetch(`http://${admin}/v1/locks`);
    assert.equal(res.status, 200, await res.clone().text());
    return ((await res.json()) as Listing).locks.find((l) => l.name === name);
  }

  /** A lock's next WAITING, as a promise. */
  function waitingHook(): { onWaiting: () => void; queued: Promise<void> } {
    let onWaiting: () => void = () => {};
    const queued = new Promise<void>((r) => {
      onWaiting = r;
    });
    return { onWaiting: () => onWaiting(), queued };
  }

  test("50 pipelined acquires on one session: all granted, distinct tokens", async () => {
    await using session = await client.session();
    assert.equal(session.leaseMs, lease);
    assert.ok(session.maxStreams >= 50, `max streams ${session.maxStreams}`);
    const locks = await Promise.all(Array.from({ length: 50 }, (_, i) => session.acquire(`sess/many/${i}`)));
    assert.equal(locks.length, 50);
    assert.ok(locks.every((l) => l.held));
    assert.equal(new Set(locks.map((l) => l.token)).size, 50);
    assert.equal(locks[7]?.name, "sess/many/7");
    assert.equal(session.openStreams, 50);
    await Promise.all(locks.map((l) => l.release()));
    assert.equal(session.openStreams, 0, "every release was answered RELEASED");
  });

  test("the same name twice in one session: the second waits, granted when the first is released", async () => {
    await using session = await client.session();
    const first = await session.acquire("sess/twice");
    const hook = waitingHook();
    const second = session.acquire("sess/twice", { onWaiting: hook.onWaiting });
    await hook.queued;
    assert.ok(first.held);
    await first.release();
    const lock = await second;
    assert.ok(lock.held && lock.token > first.token);
  });

  test("release resolves once the server has the lock back: another client's tryAcquire succeeds at once", async () => {
    await using session = await client.session();
    for (let i = 0; i < 5; i++) {
      const lock = await session.acquire("sess/released");
      await lock.release();
      assert.equal(lock.state, "released");
      assert.ok(lock.signal.reason instanceof LockReleasedError);
      const other = await client.tryAcquire("sess/released");
      await other.release();
    }
  });

  test("a kick ends one claim; the session and its other claims live", async () => {
    await using session = await client.session();
    const a = await session.acquire("sess/kick/a");
    const b = await session.acquire("sess/kick/b");
    const holder = (await listed("sess/kick/a"))?.holders[0];
    assert.ok(holder !== undefined);
    assert.notEqual(holder.session, (await listed("sess/kick/b"))?.holders[0]?.session, "each claim has its own id");
    const res = await fetch(`http://${admin}/v1/sessions/${holder.session}/kick`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
    });
    assert.equal(res.status, 200, await res.text());
    const lost = await a.lost;
    assert.ok(lost instanceof LockLostError);
    assert.equal(lost.kind, "server");
    assert.equal(lost.code, 0x02);
    assert.equal(a.state, "lost");
    // The other claim lives on across heartbeats.
    await new Promise((r) => setTimeout(r, lease / 2));
    assert.ok(b.held && session.alive);
    const again = await client.tryAcquire("sess/kick/a");
    await again.release();
    await assert.rejects(client.tryAcquire("sess/kick/b"), LockBusyError);
  });

  test("shared claims and a semaphore in one session; a limit mismatch ends only its stream", async () => {
    await using session = await client.session();
    const r1 = await session.acquire("sess/shared", { shared: true });
    const r2 = await session.acquire("sess/shared", { shared: true });
    assert.ok(r1.held && r2.held && r1.token !== r2.token);
    const p1 = await session.acquire("sess/sem", { limit: 2 });
    const p2 = await session.acquire("sess/sem", { limit: 2 });
    await assert.rejects(session.tryAcquire("sess/sem", { limit: 2 }), (err: unknown) => {
      assert.ok(err instanceof LockBusyError);
      assert.equal(err.limit, 2);
      assert.equal(err.message, 'monolock: all 2 permits of "sess/sem" are taken');
      return true;
    });
    await assert.rejects(session.acquire("sess/sem", { limit: 3 }), LimitMismatchError);
    assert.ok(session.alive && p1.held && p2.held && r1.held);
    await p1.release();
    const p3 = await session.tryAcquire("sess/sem", { limit: 2 });
    assert.ok(p3.held);
  });

  test("a value, and proclaim replaces it; proclaim without a value is refused", async () => {
    await using session = await client.session();
    const lock = await session.acquire("sess/valued", { value: "10.0.0.7:8080" });
    assert.equal((await listed("sess/valued"))?.holders[0]?.value, "10.0.0.7:8080");
    await lock.proclaim("10.0.0.8:8080");
    assert.equal((await listed("sess/valued"))?.holders[0]?.value, "10.0.0.8:8080");
    assert.ok(lock.held);
    const plain = await session.acquire("sess/plain");
    await assert.rejects(plain.proclaim("x"), NoValueError);
    assert.ok(plain.held, "a refused proclaim sends nothing");
  });

  test("tryAcquire on a busy lock rejects and gives the place up", async () => {
    const holder = await client.acquire("sess/busy");
    await using session = await client.session();
    await assert.rejects(session.tryAcquire("sess/busy"), (err: unknown) => {
      assert.ok(err instanceof LockBusyError);
      assert.equal(err.message, 'monolock: lock "sess/busy" is held by another session');
      return true;
    });
    await holder.release();
    // Had the busy stream stayed queued, it would hold the lock now.
    const other = await client.tryAcquire("sess/busy");
    await other.release();
  });

  test("an aborted waiting acquire gives its place up", async () => {
    const holder = await client.acquire("sess/abort");
    await using session = await client.session();
    const controller = new AbortController();
    const hook = waitingHook();
    const waiting = session.acquire("sess/abort", { signal: controller.signal, onWaiting: hook.onWaiting });
    await hook.queued;
    controller.abort();
    await assert.rejects(waiting, AcquireAbortedError);
    await holder.release();
    const other = await client.tryAcquire("sess/abort");
    await other.release();
    assert.ok(session.alive);
  });

  test("bad input is refused before sending, with the server's code; the session lives", async () => {
    await using session = await client.session();
    await assert.rejects(session.acquire(""), EmptyNameError);
    await assert.rejects(session.acquire("x".repeat(256)), NameTooLongError);
    await assert.rejects(session.acquire("sess/bad", { leaseMs: lease + 1 }), (err: unknown) => {
      assert.ok(err instanceof InvalidLeaseError);
      assert.equal(err.origin, "client");
      return true;
    });
    await assert.rejects(session.acquire("sess/bad", { limit: 0 }), InvalidModeError);
    await assert.rejects(session.acquire("sess/bad", { value: "v".repeat(1025) }), ValueTooLongError);
    await assert.rejects(session.acquire("sess/bad", { timeoutMs: -1 }), TypeError);
    await assert.rejects(client.session({ leaseMs: 0 }), InvalidLeaseError);
    assert.equal(session.openStreams, 0, "nothing was opened");
    const lock = await session.acquire("sess/bad", { leaseMs: lease });
    assert.ok(lock.held && lock.leaseMs === lease);
  });

  test("close while holding releases every claim (told as released, not lost)", async () => {
    const session = await client.session();
    const locks: Lock[] = [await session.acquire("sess/close/a"), await session.acquire("sess/close/b")];
    let lostTold = false;
    for (const l of locks) void l.lost.then(() => (lostTold = true));
    await session.close();
    assert.ok(locks.every((l) => l.state === "released"));
    assert.ok(!session.alive);
    for (const name of ["sess/close/a", "sess/close/b"]) await (await client.tryAcquire(name)).release();
    await assert.rejects(session.acquire("sess/close/c"), /the session was closed/);
    await new Promise((r) => setImmediate(r));
    assert.equal(lostTold, false);
  });
});

describe("a session on a silent link", () => {
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

  test("every held claim is told lost before the server could grant it again", async () => {
    const short = 1000;
    const viaProxy = new Client({ servers: proxy.address, leaseMs: short });
    const direct = new Client({ servers: server.address, leaseMs: short });
    const session = await viaProxy.session();
    const a = await session.acquire("silent/a");
    const b = await session.acquire("silent/b", { limit: 3 });
    const lostAt: number[] = [];
    for (const l of [a, b]) void l.lost.then(() => lostAt.push(performance.now()));
    const partitionedAt = performance.now();
    proxy.partitioned = true;
    const waiter = direct.acquire("silent/a");
    const next = await waiter;
    const grantedAt = performance.now();
    assert.equal(lostAt.length, 2, "both claims told lost before the regrant");
    for (const t of lostAt) {
      assert.ok(t < grantedAt);
      // Told by the validity deadline (the last acked send + 0.8 x lease,
      // so by 0.8 x lease after the cut); the bound leaves room for a slow timer.
      assert.ok(t - partitionedAt < 2 * short, `told ${t - partitionedAt} ms after the cut`);
    }
    assert.ok(next.token > a.token);
    assert.ok(session.signal.aborted && !session.alive);
    await assert.rejects(session.acquire("silent/c"), /the session has ended/);
    await next.release();
    await session.close();
  });
});

describe("a session pool against monolock serve", () => {
  let server: RealServer;
  let proxy: PartitionProxy;
  before(async () => {
    // A server that lets a session carry 3 streams: the pool must spread.
    server = await RealServer.start(["--max-streams", "3"]);
    proxy = await PartitionProxy.start(server.address);
  });
  after(async () => {
    await proxy.close();
    await server.stop();
  });

  test("claims go to a session with room; a full pool refuses; a dead session is replaced on next use", async () => {
    const client = new Client({ servers: proxy.address, leaseMs: lease });
    await using pool = client.sessionPool({ maxSessions: 2 });
    assert.equal(pool.size, 0, "nothing opened before the first claim");
    const locks = await Promise.all(Array.from({ length: 6 }, (_, i) => pool.acquire(`pool/${i}`)));
    assert.equal(new Set(locks.map((l) => l.token)).size, 6);
    assert.equal(pool.size, 2);
    await assert.rejects(pool.acquire("pool/7"), TooManyStreamsError);
    await locks[0]?.release();
    const again = await pool.tryAcquire("pool/0");
    assert.equal(pool.size, 2, "the freed room was used");
    // Both connections drop: every claim is lost, and the next claim opens a new session.
    proxy.dropAll();
    const lost = await Promise.all([again, ...locks.slice(1)].map((l) => l.lost));
    assert.ok(lost.every((e) => e.kind === "io"));
    const fresh = await pool.acquire("pool/0");
    assert.ok(fresh.held);
    assert.equal(pool.size, 1);
  });

  test("a session that has used every stream id leaves the pool's count and closes once its last claim ends", async () => {
    const client = new Client({ servers: proxy.address, leaseMs: lease });
    await using pool = client.sessionPool({ maxSessions: 1 });
    const first = await pool.acquire("retire/a");
    // biome-ignore lint/suspicious/noExplicitAny: reaching the session and its core to use up the ids
    const old = (pool as any).sessions[0];
    old.core.highest = old.core.idsLeft + old.core.highest; // as if every id had been used
    assert.equal(old.idsLeft, 0);
    const second = await pool.acquire("retire/b");
    assert.ok(second.held, "a new session, in a pool of one");
    assert.ok(first.held && !old.signal.aborted, "the old session's claim lives on");
    await first.release();
    await pool.acquire("retire/c"); // the pick closes the spent session
    const late = new Promise((_, reject) =>
      setTimeout(() => reject(new Error("the spent session was not closed")), 5000).unref(),
    );
    await Promise.race([old.closed, late]);
    assert.ok(old.signal.aborted, "closed once its last claim was released");
    assert.ok(second.held);
  });
});

describe("watch streams in a session against monolock serve", () => {
  let server: RealServer;
  let proxy: PartitionProxy;
  const short = 1000;
  before(async () => {
    server = await RealServer.start();
    proxy = await PartitionProxy.start(server.address);
  });
  after(async () => {
    await proxy.close();
    await server.stop();
  });

  test("a watch follows the name; the session's heartbeats keep vouching for it past 0.8 x lease", async () => {
    const client = new Client({ servers: server.address, leaseMs: short });
    await using session = await client.session();
    const watch = await session.watch("sw/a");
    assert.ok(watch.state().known);
    assert.equal(watch.state().holders.length, 0);
    const lock = await client.acquire("sw/a");
    for await (const st of watch.changes()) if (st.holders[0]?.token === lock.token) break;
    // Only the ALIVEs can vouch after the first WATCHING: 2 x lease later it is still known.
    await new Promise((r) => setTimeout(r, 2 * short));
    const st = watch.state();
    assert.ok(st.known, "vouched for by the session's heartbeats");
    assert.ok(st.validUntil !== undefined && st.validUntil > performance.now());
    assert.equal(st.holders[0]?.token, lock.token);
    await lock.release();
    for await (const s of watch.changes()) if (s.holders.length === 0) break;
    await watch.close();
    assert.equal(await watch.ended, undefined);
    assert.ok(session.alive);
  });

  test("campaign and observe on sessions: the follower sees the leader, then no leader after resign", async () => {
    const client = new Client({ servers: server.address, leaseMs: short });
    await using leaderSession = await client.session();
    await using followerSession = await client.session();
    const term = await leaderSession.campaign("sw/lead", "10.0.0.7:8080");
    const seen: string[] = [];
    for await (const o of followerSession.observe("sw/lead")) {
      seen.push(o.state);
      if (o.state === "leader") {
        assert.equal(o.token, term.token);
        assert.equal(Buffer.from(o.value).toString(), "10.0.0.7:8080");
        await term.resign();
      }
      if (o.state === "no-leader" && seen.includes("leader")) break;
    }
    assert.deepEqual(seen.slice(-2), ["leader", "no-leader"]);
  });

  test("a silent session: its watch turns unknown by the deadline and ends with the session", async () => {
    const client = new Client({ servers: proxy.address, leaseMs: short });
    const session = await client.session();
    const watch = await session.watch("sw/silent");
    proxy.partitioned = true;
    const cutAt = performance.now();
    const error = await watch.ended;
    assert.ok(error !== undefined, "the session's end ends the watch with an error");
    assert.ok(!watch.state().known);
    assert.ok(performance.now() - cutAt < 2 * short);
    await session.close();
  });
});

describe("a session over TLS against monolock serve", () => {
  const cert = makeSelfSignedCert("monolock-session-server");
  let server: RealServer;
  before(async () => {
    server = await RealServer.start(["--tls-cert", cert.certPath, "--tls-key", cert.keyPath, "--admin", "off"]);
  });
  after(async () => {
    await server.stop();
  });

  test("claims over one TLS session; close (with TLS close_notify) releases them at once", async () => {
    // A FIN without close_notify would hold the claims for a lease: 10 s here.
    const client = new Client({ servers: server.address, leaseMs: 10_000, tls: { ca: cert.cert } });
    const session = await client.session();
    const [a, b] = await Promise.all([session.acquire("tls/s/a"), session.acquire("tls/s/b", { shared: true })]);
    assert.ok(a?.held && b?.held);
    await session.close();
    const start = performance.now();
    for (const name of ["tls/s/a", "tls/s/b"]) await (await client.tryAcquire(name)).release();
    assert.ok(performance.now() - start < 5_000);
  });
});
