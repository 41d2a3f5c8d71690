// Exact-byte client behaviour against a scripted fake server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { inspect } from "node:util";
import {
  AcquireAbortedError,
  AcquireTimeoutError,
  AdminClosedError,
  Client,
  ConnectionError,
  type Lock,
  LockBusyError,
  LockLostError,
  LockReleasedError,
  type Logger,
  NotActiveError,
  NotAuthorizedError,
  NotMonolockError,
  ServerError,
  SharedUnsupportedError,
  ShuttingDownError,
  UnsupportedVersionError,
  ValueTooLongError,
  ValueUnsupportedError,
} from "../src/index.js";
import { deadAddress, type FakeConnection, FakeServer } from "./helpers/fake-server.js";

let server: FakeServer;
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => {
  unhandled.push(reason);
};
before(async () => {
  process.on("unhandledRejection", onUnhandled);
  server = await FakeServer.start();
});
after(async () => {
  await server.close();
  // Give late rejections a turn to surface before counting them.
  await new Promise((r) => setImmediate(r));
  process.off("unhandledRejection", onUnhandled);
  assert.deepEqual(unhandled, [], "no unhandled promise rejections in the whole file");
});

/** Grants the next connection at once and returns it with the lock. */
async function grantedLock(leaseMs: number, token = 7n) {
  const client = new Client({ servers: server.address, leaseMs });
  const pending = client.acquire("held");
  const conn = await server.accept();
  await conn.readAcquire();
  conn.acquired(token);
  return { conn, lock: await pending };
}

describe("acquire against a fake server", () => {
  test("sends the exact ACQUIRE, decodes a split ACQUIRED, heartbeats, releases", async () => {
    const client = new Client({ servers: [server.address], leaseMs: 400 });
    const pending = client.acquire("jobs/nightly-report");
    const conn = await server.accept();
    const acq = await conn.readAcquire();
    assert.equal(acq.raw.toString("hex"), `0101000001900013${Buffer.from("jobs/nightly-report").toString("hex")}`);
    // ACQUIRED split over two writes, token above 2^53.
    conn.write("1200200000");
    await new Promise((r) => setTimeout(r, 20));
    conn.write("00000001");
    const lock = await pending;
    assert.equal(lock.token, 9007199254740993n);
    assert.equal(typeof lock.token, "bigint");
    assert.equal(lock.name, "jobs/nightly-report");
    assert.equal(lock.state, "held");
    assert.ok(lock.held);
    assert.ok(lock.remainingMs > 0 && lock.remainingMs <= 320);
    // The heartbeat comes about lease/4 after the ACQUIRE was sent.
    const t0 = performance.now();
    await conn.readHeartbeat();
    const before = lock.validUntil;
    conn.acquired(9007199254740993n);
    await conn.readHeartbeat(); // the next one only after the ack
    assert.ok(lock.validUntil > before, "the ack moved the deadline");
    assert.ok(performance.now() - t0 < 2000);
    await lock.release();
    await conn.closed;
    assert.equal(lock.state, "released");
    assert.ok(lock.signal.aborted);
    assert.ok(lock.signal.reason instanceof LockReleasedError);
    assert.equal(lock.remainingMs, 0);
    await lock.release(); // idempotent
  });

  test("a promotion during an in-flight heartbeat is not taken as its ack", async () => {
    const lease = 1000;
    const client = new Client({ servers: server.address, leaseMs: lease });
    let waitingCalls = 0;
    const pending = client.acquire("promo", { onWaiting: () => waitingCalls++ });
    const conn = await server.accept();
    await conn.readAcquire();
    conn.waiting();
    await conn.readHeartbeat(); // heartbeat in flight now
    const heartbeatSeenAt = conn.lastDataAt;
    conn.acquired(11n); // promotion, unsolicited
    const lock = await pending;
    assert.equal(lock.token, 11n);
    assert.equal(waitingCalls, 1);
    // Validity still rests on the ACQUIRE acked by WAITING, not on the heartbeat.
    assert.ok(
      lock.validUntil < heartbeatSeenAt + 0.8 * lease - 40,
      `validUntil ${lock.validUntil} vs heartbeat ${heartbeatSeenAt}`,
    );
    const atGrant = lock.validUntil;
    conn.acquired(11n); // now the heartbeat's ack
    await conn.readHeartbeat(); // schedule goes on
    assert.ok(lock.validUntil > atGrant);
    conn.acquired(11n);
    await conn.readHeartbeat();
    assert.equal(lock.state, "held");
    await lock.release();
  });

  test("WAITING and a promotion coalesced in one chunk", async () => {
    const client = new Client({ servers: server.address, leaseMs: 1000 });
    let waited = false;
    const pending = client.acquire("coalesced", { onWaiting: () => (waited = true) });
    const conn = await server.accept();
    await conn.readAcquire();
    conn.write("11120000000000000005");
    const lock = await pending;
    assert.equal(lock.token, 5n);
    assert.ok(waited);
    await lock.release();
  });

  test("onWaiting gets the lock name, also for a name given as bytes", async () => {
    const client = new Client({ servers: server.address, leaseMs: 1000 });
    const names: string[] = [];
    const pending = client.acquire(new TextEncoder().encode("jobs/ünïcode"), {
      onWaiting: (name) => names.push(name),
    });
    const conn = await server.accept();
    await conn.readAcquire();
    conn.waiting();
    conn.acquired(7n);
    const lock = await pending;
    assert.deepEqual(names, ["jobs/ünïcode"]);
    await lock.release();
  });

  test("an ERROR while held loses the lock with its code", async () => {
    const { conn, lock } = await grantedLock(1000);
    conn.error(0x01, "server shutting down");
    const lost = await lock.lost;
    assert.ok(lost instanceof LockLostError);
    assert.equal(lost.kind, "server");
    assert.equal(lost.code, 0x01);
    assert.equal(lost.temporary, true);
    assert.ok(lost.cause instanceof ShuttingDownError);
    assert.equal(lock.state, "lost");
    assert.equal(lock.signal.reason, lost);
    assert.equal(lock.held, false);
    await lock.release(); // allowed after loss
    assert.equal(lock.state, "lost");
  });

  test("0x03 while held is a lost lock like any temporary error, naming the new leader", async () => {
    const { conn, lock } = await grantedLock(1000);
    conn.error(0x03, "10.0.0.2:7117");
    const lost = await lock.lost;
    assert.equal(lost.kind, "server");
    assert.equal(lost.code, 0x03);
    assert.ok(lost.cause instanceof NotActiveError);
    assert.equal(lost.cause.reason, "10.0.0.2:7117");
    assert.equal(lost.message, "monolock: lock lost: not the active server; the active server is 10.0.0.2:7117 (0x03)");
    await lock.release();
  });

  test("unknown codes while held: plain ServerError, temporary by range", async () => {
    for (const [code, temporary] of [
      [0x09, true],
      [0x7e, false],
    ] as const) {
      const { conn, lock } = await grantedLock(1000);
      conn.error(code, "future");
      const lost = await lock.lost;
      assert.equal(lost.code, code);
      assert.equal(lost.temporary, temporary);
      assert.equal((lost.cause as ServerError).constructor, ServerError);
      assert.equal((lost.cause as ServerError).reason, "future");
    }
  });

  test("silence: the loss is told at the deadline, the connection kept until last acked send + lease", async () => {
    const lease = 2000;
    const { conn, lock } = await grantedLock(lease);
    const deadline = lock.validUntil;
    let serverSawFin: number | undefined;
    void conn.closed.then(() => {
      serverSawFin = performance.now();
    });
    await conn.readHeartbeat(); // never acknowledged in time
    let toldAt: number | undefined;
    let finBeforeTell: number | undefined;
    lock.signal.addEventListener("abort", () => {
      toldAt = performance.now();
      finBeforeTell = serverSawFin;
    });
    const lost = await lock.lost;
    assert.equal(lost.kind, "timeout");
    assert.equal(lost.code, null);
    // The same words in every client: the timeout and the lease it comes from.
    assert.equal(lost.message, "monolock: lock lost: no reply from the server within 1600 ms (0.8 x lease of 2000 ms)");
    assert.equal(lock.signal.reason, lost, "signal and promise tell the same loss");
    assert.ok(toldAt !== undefined && toldAt >= deadline - 1, "not before the deadline");
    assert.equal(finBeforeTell, undefined, "told before the connection was closed");
    assert.equal(lock.validUntil, deadline, "the deadline stays put");
    // A late ack changes nothing and no heartbeat follows the loss.
    conn.acquired(7n);
    await conn.closed;
    assert.equal(lock.state, "lost");
    assert.equal(conn.unread, 0, "nothing sent after the loss");
    // The FIN waits for the last acked send (the ACQUIRE) + lease = deadline + 0.2 x lease.
    const fin = serverSawFin ?? 0;
    assert.ok(fin >= deadline + 0.2 * lease - 2, `FIN ${fin - deadline} ms after the deadline`);
    await lock.release(); // nothing left to close
  });

  test("a polled check decides the loss at the deadline, before the timer; release then closes at once", async () => {
    const lease = 2000;
    const { conn, lock } = await grantedLock(lease);
    await conn.readHeartbeat(); // never acknowledged
    const aborts: unknown[] = [];
    lock.signal.addEventListener("abort", () => aborts.push(lock.signal.reason));
    // Keep the event loop busy past the deadline: no timer can run.
    while (performance.now() < lock.validUntil) {}
    assert.equal(lock.held, false);
    assert.equal(lock.state, "lost");
    assert.equal(lock.remainingMs, 0);
    assert.equal(aborts.length, 1, "the push signal fired from the same decision");
    assert.ok(aborts[0] instanceof LockLostError && aborts[0].kind === "timeout");
    assert.equal(await lock.lost, aborts[0]);
    const closeAt = lock.validUntil + 0.2 * lease;
    await lock.release();
    await conn.closed;
    assert.ok(performance.now() < closeAt, "release after a loss does not wait for the lease");
    assert.equal(aborts.length, 1);
  });

  test("the server closing the connection while held: lost, kind io", async () => {
    const { conn, lock } = await grantedLock(1000);
    conn.socket.end();
    const lost = await lock.lost;
    assert.equal(lost.kind, "io");
    assert.ok(lost.cause instanceof ConnectionError);
  });

  test("protocol violations while held: lost, kind io", async () => {
    const violations = [
      "7f", // unknown type byte
      "11", // WAITING after the grant
      "120000000000000007", // an ACQUIRED without a request in flight
    ];
    for (const bytes of violations) {
      const { conn, lock } = await grantedLock(60_000);
      conn.write(bytes);
      const lost = await lock.lost;
      assert.equal(lost.kind, "io", bytes);
      assert.match(lost.message, /protocol violation/);
    }
    const { conn, lock } = await grantedLock(200);
    await conn.readHeartbeat();
    conn.acquired(8n); // ack with another token
    const lost = await lock.lost;
    assert.equal(lost.kind, "io");
    assert.match(lost.message, /token/);
  });
});

describe("waiting, retries and giving up", () => {
  test("tryAcquire closes on WAITING and rejects with LockBusyError", async () => {
    const client = new Client({ servers: server.address, leaseMs: 1000 });
    const pending = client.tryAcquire("busy");
    const conn = await server.accept();
    await conn.readAcquire();
    conn.waiting();
    await assert.rejects(pending, (err: unknown) => err instanceof LockBusyError && err.code === null);
    await conn.closed;
  });

  test("a terminal ERROR while waiting goes to the caller, no retry", async () => {
    const client = new Client({ servers: server.address, leaseMs: 1000 });
    const before = server.connections.length;
    const pending = client.acquire("denied");
    const conn = await server.accept();
    await conn.readAcquire();
    conn.error(0x18, "not authorized for lock");
    await assert.rejects(pending, (err: unknown) => err instanceof NotAuthorizedError && err.origin === "server");
    assert.equal(server.connections.length, before + 1);
  });

  test("a temporary ERROR while waiting re-queues on a new connection", async () => {
    const client = new Client({ servers: server.address, leaseMs: 1000 });
    let waits = 0;
    const names: string[] = [];
    const pending = client.acquire("requeue", {
      onWaiting: (name) => {
        waits++;
        names.push(name);
      },
    });
    const first = await server.accept();
    await first.readAcquire();
    first.waiting();
    first.error(0x02, "closed by administrator");
    const second = await server.accept(); // after a backoff
    const acq = await second.readAcquire();
    assert.equal(acq.name.toString(), "requeue");
    second.waiting();
    second.acquired(21n);
    const lock = await pending;
    assert.equal(lock.token, 21n);
    assert.equal(waits, 2);
    assert.deepEqual(names, ["requeue", "requeue"]); // the lock name, as in the other clients
    await lock.release();
  });

  test("a passive server's 0x03 sends the next attempt to the leader it names, after a short pause", async () => {
    const skipped = await FakeServer.start();
    const leader = await FakeServer.start();
    try {
      const client = new Client({ servers: [server.address, skipped.address, leader.address], leaseMs: 1000 });
      const pending = client.acquire("ha/leader");
      const passive = await server.accept();
      await passive.readAcquire();
      passive.error(0x03, leader.address); // the active server's advertised address
      const t0 = performance.now();
      const conn = await leader.accept();
      const pause = performance.now() - t0;
      assert.ok(pause >= 20 && pause < 500, `paused ${pause} ms`);
      await conn.readAcquire();
      conn.acquired(31n);
      const lock = await pending;
      assert.equal(lock.token, 31n);
      assert.equal(skipped.connections.length, 0, "the server between was skipped");
      await lock.release();
    } finally {
      await skipped.close();
      await leader.close();
    }
  });

  test("a 0x03 naming no server of the list moves on as any failure does", async () => {
    const other = await FakeServer.start();
    try {
      const client = new Client({ servers: [server.address, other.address], leaseMs: 1000 });
      const pending = client.acquire("ha/elsewhere");
      const passive = await server.accept();
      await passive.readAcquire();
      passive.error(0x03, "10.9.9.9:7117"); // never resolved nor dialled
      const conn = await other.accept();
      await conn.readAcquire();
      conn.acquired(32n);
      await (await pending).release();
    } finally {
      await other.close();
    }
  });

  test("tryAcquire does not retry a temporary ERROR", async () => {
    const client = new Client({ servers: server.address, leaseMs: 1000 });
    const pending = client.tryAcquire("try-temp");
    const conn = await server.accept();
    await conn.readAcquire();
    conn.error(0x02);
    await assert.rejects(pending, AdminClosedError);
  });

  test("tryAcquire moves on after a temporary ERROR (a passive server of a cell) to the next server", async () => {
    const active = await FakeServer.start();
    try {
      const client = new Client({ servers: [server.address, active.address], leaseMs: 1000 });
      const pending = client.tryAcquire("try-cell");
      const passive = await server.accept();
      await passive.readAcquire();
      passive.error(0x01, "not the active server");
      const conn = await active.accept();
      await conn.readAcquire();
      conn.acquired(8n);
      const lock = await pending;
      assert.equal(lock.token, 8n);
      await lock.release();
    } finally {
      await active.close();
    }
  });

  test("a silent server while waiting: re-queue after the client timeout", async () => {
    const client = new Client({ servers: server.address, leaseMs: 100 });
    const pending = client.acquire("silent");
    const first = await server.accept();
    await first.readAcquire(); // never answered
    await first.closed;
    const second = await server.accept();
    await second.readAcquire();
    second.acquired(3n);
    const lock = await pending;
    await lock.release();
  });

  test("abort while waiting closes the connection and rejects", async () => {
    const client = new Client({ servers: server.address, leaseMs: 1000 });
    const controller = new AbortController();
    const pending = client.acquire("abort", { signal: controller.signal });
    const conn = await server.accept();
    await conn.readAcquire();
    conn.waiting();
    const reason = new Error("changed my mind");
    controller.abort(reason);
    await assert.rejects(pending, (err: unknown) => err instanceof AcquireAbortedError && err.cause === reason);
    await conn.closed;
  });

  test("an already aborted signal rejects without connecting", async () => {
    const client = new Client({ servers: server.address, leaseMs: 1000 });
    const before = server.connections.length;
    await assert.rejects(client.acquire("x", { signal: AbortSignal.abort() }), AcquireAbortedError);
    assert.equal(server.connections.length, before);
  });

  test("timeoutMs while waiting closes the connection and rejects", async () => {
    const client = new Client({ servers: server.address, leaseMs: 1000 });
    const start = performance.now();
    const pending = client.acquire("timeout", { timeoutMs: 150 });
    const conn = await server.accept();
    await conn.readAcquire();
    conn.waiting();
    await assert.rejects(pending, AcquireTimeoutError);
    assert.ok(performance.now() - start >= 149);
    await conn.closed;
  });

  test("validation errors reject before any connection", async () => {
    const client = new Client({ servers: server.address, leaseMs: 1000 });
    const before = server.connections.length;
    for (const [name, lease, code] of [
      ["", 1000, 0x14],
      ["a".repeat(256), 1000, 0x15],
      ["\udc00", 1000, 0x16],
      ["a", 0, 0x17],
      ["a", 2 ** 32, 0x17],
    ] as const) {
      await assert.rejects(
        client.acquire(name, { leaseMs: lease }),
        (err: unknown) => err instanceof ServerError && err.code === code && err.origin === "client",
      );
    }
    assert.equal(server.connections.length, before);
  });
});

describe("servers and connections", () => {
  test("tryAcquire with no reachable server: ConnectionError", async () => {
    const client = new Client({ servers: [await deadAddress(), await deadAddress()], leaseMs: 1000 });
    await assert.rejects(
      client.tryAcquire("x"),
      (err: unknown) => err instanceof ConnectionError && err.phase === "connect",
    );
  });

  test("a dead first server: tryAcquire moves to the next", async () => {
    const client = new Client({ servers: [await deadAddress(), server.address], leaseMs: 1000 });
    const pending = client.tryAcquire("second");
    const conn = await server.accept();
    await conn.readAcquire();
    conn.acquired(4n);
    const lock = await pending;
    await lock.release();
  });

  test("acquire retries an unreachable server until its deadline; the error says what the last attempt met", async () => {
    const dead = await deadAddress();
    const client = new Client({ servers: dead, leaseMs: 1000 });
    await assert.rejects(
      client.acquire("x", { timeoutMs: 300 }),
      (err: unknown) =>
        err instanceof AcquireTimeoutError &&
        err.cause instanceof ConnectionError &&
        err.message.startsWith(
          `monolock: timed out waiting for the lock "x" (last attempt: ${dead}: connect ECONNREFUSED`,
        ),
    );
  });

  test("acquire follows the retry plan: a dead server is skipped, a failed claim moves to the next server", async () => {
    const other = await FakeServer.start();
    try {
      const client = new Client({ servers: [await deadAddress(), server.address, other.address], leaseMs: 1000 });
      const pending = client.acquire("rotate");
      const first = await server.accept(); // the dead one skipped
      await first.readAcquire();
      first.waiting();
      first.error(0x01, "server shutting down");
      const second = await other.accept(); // the next one, not the first again
      await second.readAcquire();
      second.acquired(12n);
      const lock = await pending;
      assert.equal(lock.token, 12n);
      await lock.release();
    } finally {
      await other.close();
    }
  });

  test("connect timeout (TLS handshake never answered)", async () => {
    // A plain TCP server that accepts and says nothing: the TLS handshake stalls.
    const client = new Client({ servers: server.address, leaseMs: 1000, connectTimeoutMs: 100, tls: true });
    const pending = client.tryAcquire("x");
    const conn = await server.accept();
    await assert.rejects(
      pending,
      (err: unknown) =>
        err instanceof ConnectionError &&
        err.message === `monolock: TLS handshake with ${server.address} timed out after 100 ms`,
    );
    await conn.closed;
  });

  test("bad server addresses are a TypeError at construction", () => {
    assert.throws(() => new Client({ servers: [] }), TypeError);
    assert.throws(() => new Client({ servers: "host:notaport" }), TypeError);
    assert.throws(() => new Client({ servers: "h", connectTimeoutMs: 0 }), TypeError);
  });
});

describe("release", () => {
  async function halfOpenLock() {
    const halfOpen = await FakeServer.start(undefined, true);
    const client = new Client({ servers: halfOpen.address, leaseMs: 10_000 });
    const pending = client.acquire("half-open");
    const conn = await halfOpen.accept();
    await conn.readAcquire();
    conn.acquired(1n);
    return { halfOpen, conn, lock: await pending };
  }

  test("resolves once the server has closed its side (the lock is free there)", async () => {
    const { halfOpen, conn, lock } = await halfOpenLock();
    const order: string[] = [];
    conn.socket.once("end", () => {
      order.push("server saw FIN");
      setTimeout(() => {
        order.push("server closes");
        conn.socket.end();
      }, 50);
    });
    await lock.release();
    order.push("released");
    assert.deepEqual(order, ["server saw FIN", "server closes", "released"]);
    await halfOpen.close();
  });

  test("a signal read before release aborts in release(), before the FIN; every read gives the same signal", async () => {
    const { conn, lock } = await grantedLock(10_000);
    const signal = lock.signal;
    assert.equal(lock.signal, signal);
    assert.equal(signal.aborted, false);
    let finSeen = false;
    conn.socket.once("end", () => {
      finSeen = true;
    });
    const reasons: unknown[] = [];
    signal.addEventListener("abort", () => reasons.push(signal.reason));
    const released = lock.release();
    assert.equal(reasons.length, 1, "aborted before release() returned");
    assert.ok(reasons[0] instanceof LockReleasedError);
    assert.equal(finSeen, false);
    await released;
    await conn.closed;
    assert.equal(lock.signal, signal);
  });

  test("gives up waiting on a server that never closes", async () => {
    const { halfOpen, conn, lock } = await halfOpenLock();
    const start = performance.now();
    await lock.release();
    const took = performance.now() - start;
    assert.ok(took >= 490 && took < 5000, `took ${took} ms`);
    await conn.closed;
    await halfOpen.close();
  });
});

describe("await using", () => {
  test("leaving the scope releases the lock", async () => {
    let conn: FakeConnection;
    {
      const got = await grantedLock(1000);
      conn = got.conn;
      await using lock = got.lock;
      assert.equal(lock.state, "held");
    }
    await conn.closed;
  });
});

/** The message of a wrong server that sent `sent`, as the spec words it. */
const notMonolockMessage = (address: string, quoted: string, admin: boolean): string =>
  `monolock: ${address} does not speak the monolock protocol (it sent "${quoted}")${admin ? "; is this the admin port?" : ""}`;

describe("a server that does not speak monolock", () => {
  test("an HTTP answer fails the acquisition at once, says so, and is not asked again", async () => {
    const lease = 10_000;
    const client = new Client({ servers: server.address, leaseMs: lease });
    const pending = client.acquire("wrong-port");
    const conn = await server.accept();
    await conn.readAcquire();
    const before = server.connections.length;
    const start = performance.now();
    conn.write(Buffer.from("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"));
    const err = await pending.then(
      () => assert.fail("granted"),
      (e: unknown) => e,
    );
    const took = performance.now() - start;
    // "At once": well before the client timeout (0.8 x lease) it used to wait for.
    assert.ok(took < 0.4 * lease, `took ${Math.round(took)} ms, over 0.4 x lease = ${0.4 * lease} ms`);
    assert.ok(err instanceof NotMonolockError && err instanceof ConnectionError);
    assert.equal(err.message, notMonolockMessage(server.address, "HTTP/1.1 400…", true));
    assert.equal(err.temporary, false);
    assert.equal(err.address, server.address);
    assert.equal(Buffer.from(err.sent).toString(), "HTTP/1.1 400");
    await conn.closed;
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(server.connections.length, before, "no second connection to a wrong server");
  });

  test("other bytes are quoted as \\xNN, without the admin-port hint", async () => {
    const client = new Client({ servers: server.address, leaseMs: 1000 });
    const pending = client.tryAcquire("tls-alert");
    const conn = await server.accept();
    await conn.readAcquire();
    // A TLS alert record, then a quote and a backslash.
    conn.write(Buffer.concat([Buffer.from("150303000202", "hex"), Buffer.from('2"\\')]));
    await assert.rejects(pending, (err: unknown) => {
      assert.ok(err instanceof NotMonolockError);
      assert.equal(err.message, notMonolockMessage(server.address, "\\x15\\x03\\x03\\x00\\x02\\x022\\x22\\x5c", false));
      return true;
    });
  });

  test("it leaves the rotation: the other server is tried at once, and retried alone", async () => {
    const wrong = await FakeServer.start();
    try {
      const client = new Client({ servers: [wrong.address, server.address], leaseMs: 1000 });
      const pending = client.acquire("rotation");
      const bad = await wrong.accept();
      await bad.readAcquire();
      bad.write(Buffer.from("SSH-2.0-OpenSSH_9.6\r\n"));
      const first = await server.accept();
      await first.readAcquire();
      first.error(0x01, "server shutting down"); // a re-queue: the next server would be the wrong one
      const second = await server.accept();
      await second.readAcquire();
      second.acquired(5n);
      const lock = await pending;
      assert.equal(lock.token, 5n);
      assert.equal(wrong.connections.length, 1, "the wrong server was asked once");
      await lock.release();
    } finally {
      await wrong.close();
    }
  });
});

describe("newcomer's view", () => {
  /** A logger that keeps every line, by level. */
  function recorder(): Logger & { lines: [string, string][] } {
    const lines: [string, string][] = [];
    return {
      lines,
      debug: (m: string) => lines.push(["debug", m]),
      info: (m: string) => lines.push(["info", m]),
      warn: (m: string) => lines.push(["warn", m]),
    };
  }

  test("new Client() talks to 127.0.0.1:7117; a bare host means port 7117", async () => {
    for (const [options, expected] of [
      [{}, "127.0.0.1:7117"],
      [{ servers: "localhost" }, "localhost:7117"],
      [{ servers: "::1" }, "[::1]:7117"],
    ] as const) {
      const logger = recorder();
      const client = new Client({ ...options, logger });
      const controller = new AbortController();
      const pending = client.tryAcquire("defaults", { signal: controller.signal });
      controller.abort();
      await assert.rejects(pending, AcquireAbortedError);
      assert.deepEqual(logger.lines[0], ["debug", `monolock: connecting to ${expected} for "defaults"`]);
    }
    assert.doesNotThrow(() => new Client());
  });

  test("the logger: retries at warn with the cause and what comes next, loss at info, the rest at debug", async () => {
    const dead = await deadAddress();
    const logger = recorder();
    const client = new Client({ servers: [dead, server.address], leaseMs: 1000, logger });
    const pending = client.acquire("logged");
    const first = await server.accept();
    await first.readAcquire();
    first.waiting();
    first.error(0x01, "server shutting down");
    const second = await server.accept();
    await second.readAcquire();
    second.acquired(9n);
    const lock = await pending;
    second.error(0x02, "closed by administrator");
    await lock.lost;
    const text = logger.lines.map(([level, m]) => `${level} ${m}`);
    const expected: RegExp[] = [
      new RegExp(`^debug monolock: connecting to ${dead} for "logged"$`),
      new RegExp(`^warn monolock: acquire "logged": ${dead}: connect ECONNREFUSED .*; trying ${server.address}$`),
      new RegExp(`^debug monolock: connecting to ${server.address} for "logged"$`),
      new RegExp(`^debug monolock: "logged" queued on ${server.address}$`),
      /^warn monolock: acquire "logged": server shutting down \(0x01\); retrying in \d+ ms$/,
      new RegExp(`^debug monolock: connecting to ${dead} for "logged"$`),
      new RegExp(`^warn monolock: acquire "logged": ${dead}: connect ECONNREFUSED .*; trying ${server.address}$`),
      new RegExp(`^debug monolock: connecting to ${server.address} for "logged"$`),
      new RegExp(`^debug monolock: acquired "logged" on ${server.address}, token 9$`),
      /^info monolock: lock "logged" \(token 9\) lost: closed by administrator \(0x02\)$/,
    ];
    assert.equal(text.length, expected.length, text.join("\n"));
    for (const [i, line] of text.entries()) assert.match(line, expected[i] as RegExp);
    await lock.release();
  });

  test("a logger that throws does not break the client", async () => {
    const boom = (): never => {
      throw new Error("logger down");
    };
    const client = new Client({
      servers: server.address,
      leaseMs: 1000,
      logger: { debug: boom, info: boom, warn: boom },
    });
    const pending = client.acquire("throwing-logger");
    const conn = await server.accept();
    await conn.readAcquire();
    conn.acquired(3n);
    await (await pending).release();
  });

  test("util.inspect(lock) shows name, token and state only", async () => {
    const { lock } = await grantedLock(1000, 42n);
    assert.equal(inspect(lock), "Lock { name: 'held', token: 42n, state: 'held' }");
    await lock.release();
    assert.equal(inspect(lock), "Lock { name: 'held', token: 42n, state: 'released' }");
    assert.equal(inspect({ lock }), "{ lock: Lock { name: 'held', token: 42n, state: 'released' } }");
  });

  test("one 'monolock: ' prefix per message, also when an error wraps another", async () => {
    const messages: string[] = [];
    const { conn, lock } = await grantedLock(1000);
    conn.error(0x02, "closed by administrator");
    const lost = await lock.lost;
    assert.equal(lost.message, "monolock: lock lost: closed by administrator (0x02)");
    messages.push(lost.message);
    const dead = new Client({ servers: await deadAddress(), leaseMs: 1000 });
    const messageOf = (p: Promise<unknown>): Promise<string> =>
      p.then(
        () => assert.fail("no error"),
        (e: Error) => e.message,
      );
    messages.push(await messageOf(dead.acquire("x", { timeoutMs: 100 })));
    messages.push(await messageOf(dead.tryAcquire("x")));
    messages.push(await messageOf(dead.acquire("")));
    messages.push(await messageOf(dead.acquire("x", { leaseMs: 1.5 })));
    for (const m of messages) {
      assert.ok(m.startsWith("monolock: "), m);
      assert.equal(m.split("monolock: ").length, 2, `more than one prefix in ${JSON.stringify(m)}`);
    }
  });
});

describe("shared claims against a fake server", () => {
  const nameHex = Buffer.from("pool/gpu").toString("hex");

  test("a shared claim sends a version 2 ACQUIRE, mode 1, limit 0, and is granted as usual", async () => {
    const client = new Client({ servers: server.address, leaseMs: 30000 });
    const pending = client.acquire("pool/gpu", { shared: true });
    const conn = await server.accept();
    const acq = await conn.readAcquire();
    assert.equal(acq.raw.toString("hex"), `0102000075300100000008${nameHex}`);
    conn.acquired(11n);
    const lock = await pending;
    assert.equal(lock.token, 11n);
    await lock.release();
  });

  test("a semaphore sends its limit; tryAcquire too", async () => {
    const client = new Client({ servers: server.address, leaseMs: 30000 });
    for (const attempt of [
      () => client.acquire("pool/gpu", { limit: 3 }),
      () => client.tryAcquire("pool/gpu", { limit: 3 }),
      () => client.tryAcquire("pool/gpu", { shared: true, limit: 3 }),
    ]) {
      const pending = attempt();
      const conn = await server.accept();
      const acq = await conn.readAcquire();
      assert.equal(acq.raw.toString("hex"), `0102000075300100030008${nameHex}`);
      conn.acquired(12n);
      await (await pending).release();
    }
  });

  test("exclusive claims (default, shared: false) still send version 1 bytes", async () => {
    const client = new Client({ servers: server.address, leaseMs: 30000 });
    for (const options of [{}, { shared: false }]) {
      const pending = client.acquire("pool/gpu", options);
      const conn = await server.accept();
      const acq = await conn.readAcquire();
      assert.equal(acq.raw.toString("hex"), `0101000075300008${nameHex}`);
      conn.acquired(13n);
      await (await pending).release();
    }
  });

  test("a shared tryAcquire answered WAITING is busy and closes", async () => {
    const client = new Client({ servers: server.address, leaseMs: 30000 });
    const pending = client.tryAcquire("pool/gpu", { limit: 2 });
    const conn = await server.accept();
    await conn.readAcquire();
    conn.waiting();
    await assert.rejects(pending, (err: unknown) => {
      assert.ok(err instanceof LockBusyError);
      assert.equal(err.message, 'monolock: all 2 permits of "pool/gpu" are taken');
      assert.equal(err.shared, true);
      assert.equal(err.limit, 2);
      return true;
    });
    await conn.closed;
  });

  test("0x10 to a version 2 ACQUIRE: SharedUnsupportedError at once, no second connection", async () => {
    const other = await FakeServer.start();
    try {
      // Two servers: a retried claim would move on to the second one.
      const client = new Client({ servers: [server.address, other.address], leaseMs: 30000 });
      for (const attempt of [
        () => client.acquire("pool/gpu", { shared: true, timeoutMs: 5000 }),
        () => client.tryAcquire("pool/gpu", { limit: 4 }),
      ]) {
        const before = server.connections.length;
        const pending = attempt();
        const conn = await server.accept();
        const acq = await conn.readAcquire();
        assert.equal(acq.version, 2);
        conn.error(0x10, "unsupported protocol version");
        const err = await pending.then(
          () => assert.fail("granted"),
          (e: unknown) => e,
        );
        assert.ok(err instanceof SharedUnsupportedError, String(err));
        assert.ok(err instanceof UnsupportedVersionError);
        assert.equal(err.code, 0x10);
        assert.equal(err.temporary, false);
        assert.equal(err.reason, "unsupported protocol version");
        assert.equal(
          err.message,
          `monolock: server ${server.address} does not support shared locks or semaphores (it answered a ` +
            "protocol version 2 ACQUIRE with 0x10 unsupported protocol version); use an exclusive lock, or upgrade the server",
        );
        await new Promise((r) => setTimeout(r, 100));
        assert.equal(server.connections.length, before + 1, "no second connection");
        assert.equal(other.connections.length, 0, "the next server is not tried");
      }
    } finally {
      await other.close();
    }
  });

  test("0x10 to an exclusive (version 1) claim stays a plain UnsupportedVersionError", async () => {
    const client = new Client({ servers: server.address, leaseMs: 30000 });
    const pending = client.acquire("pool/gpu");
    const conn = await server.accept();
    await conn.readAcquire();
    conn.error(0x10);
    const err = await pending.then(
      () => assert.fail("granted"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof UnsupportedVersionError);
    assert.ok(!(err instanceof SharedUnsupportedError));
  });

  test("a bad limit is refused before connecting", async () => {
    const client = new Client({ servers: server.address, leaseMs: 30000 });
    const before = server.connections.length;
    for (const limit of [0, -3, 65536]) {
      await assert.rejects(
        client.acquire("pool/gpu", { limit }),
        (err: unknown) => err instanceof ServerError && err.code === 0x19 && err.origin === "client",
      );
    }
    assert.equal(server.connections.length, before);
  });
});

describe("claims with a value against a fake server", () => {
  test("a claim with a value sends the exact version 3 ACQUIRE of the vectors, and is granted as usual", async () => {
    // spec/vectors/frames.json, client_valid_v3: "exclusive, an address as
    // the value" and "semaphore of 2, a JSON value".
    const cases = [
      {
        name: "service/leader",
        leaseMs: 5000,
        options: { value: "10.0.0.7:8080" },
        hex: "010300001388000000000e736572766963652f6c6561646572000d31302e302e302e373a38303830",
      },
      {
        name: "service/leader",
        leaseMs: 5000,
        options: { value: Buffer.from("10.0.0.7:8080") },
        hex: "010300001388000000000e736572766963652f6c6561646572000d31302e302e302e373a38303830",
      },
      {
        name: "pool/gpu",
        leaseMs: 30000,
        options: { limit: 2, value: new TextEncoder().encode('{"host":"gpu-3"}') },
        hex: "0103000075300100020008706f6f6c2f67707500107b22686f7374223a226770752d33227d",
      },
    ];
    for (const c of cases) {
      for (const attempt of ["acquire", "tryAcquire"] as const) {
        const client = new Client({ servers: server.address, leaseMs: c.leaseMs });
        const pending = client[attempt](c.name, c.options);
        const conn = await server.accept();
        const acq = await conn.readAcquire();
        assert.equal(acq.raw.toString("hex"), c.hex);
        assert.equal(acq.version, 3);
        conn.acquired(21n);
        const lock = await pending;
        assert.equal(lock.token, 21n);
        await lock.release();
        await conn.closed;
      }
    }
  });

  test("an empty value is no value: version 1 (exclusive) or 2 (shared) bytes", async () => {
    const nameHex = Buffer.from("pool/gpu").toString("hex");
    const client = new Client({ servers: server.address, leaseMs: 30000 });
    for (const [options, hex] of [
      [{ value: "" }, `0101000075300008${nameHex}`],
      [{ value: new Uint8Array(0) }, `0101000075300008${nameHex}`],
      [{ shared: true, value: "" }, `0102000075300100000008${nameHex}`],
    ] as const) {
      const pending = client.acquire("pool/gpu", options);
      const conn = await server.accept();
      const acq = await conn.readAcquire();
      assert.equal(acq.raw.toString("hex"), hex);
      conn.acquired(22n);
      await (await pending).release();
    }
  });

  test("0x10 to a version 3 ACQUIRE: ValueUnsupportedError at once, no second connection", async () => {
    const other = await FakeServer.start();
    try {
      // Two servers: a retried claim would move on to the second one.
      const client = new Client({ servers: [server.address, other.address], leaseMs: 30000 });
      for (const attempt of [
        () => client.acquire("service/leader", { value: "10.0.0.7:8080", timeoutMs: 5000 }),
        () => client.tryAcquire("service/leader", { value: "10.0.0.7:8080" }),
        // A shared claim with a value: the value is what the server lacks.
        () => client.acquire("pool/gpu", { limit: 2, value: "gpu-3", timeoutMs: 5000 }),
      ]) {
        const before = server.connections.length;
        const pending = attempt();
        const conn = await server.accept();
        const acq = await conn.readAcquire();
        assert.equal(acq.version, 3);
        conn.error(0x10, "unsupported protocol version");
        const err = await pending.then(
          () => assert.fail("granted"),
          (e: unknown) => e,
        );
        assert.ok(err instanceof ValueUnsupportedError, String(err));
        assert.ok(err instanceof UnsupportedVersionError);
        assert.ok(!(err instanceof SharedUnsupportedError));
        assert.equal(err.code, 0x10);
        assert.equal(err.temporary, false);
        assert.equal(err.reason, "unsupported protocol version");
        assert.equal(err.address, server.address);
        assert.equal(
          err.message,
          `monolock: server ${server.address} does not support claims with a value (it answered a ` +
            "protocol version 3 ACQUIRE with 0x10 unsupported protocol version); claim without a value, or upgrade the server",
        );
        await new Promise((r) => setTimeout(r, 100));
        assert.equal(server.connections.length, before + 1, "no second connection");
        assert.equal(other.connections.length, 0, "the next server is not tried");
      }
    } finally {
      await other.close();
    }
  });

  test("a value over 1024 bytes is refused with ValueTooLongError before connecting, after the other checks", async () => {
    const client = new Client({ servers: server.address, leaseMs: 30000 });
    const before = server.connections.length;
    for (const value of ["v".repeat(1025), new Uint8Array(1025), Buffer.alloc(4096)]) {
      for (const attempt of [() => client.acquire("a", { value }), () => client.tryAcquire("a", { value })]) {
        await assert.rejects(
          attempt(),
          (err: unknown) =>
            err instanceof ValueTooLongError && err.code === 0x1b && err.origin === "client" && !err.temporary,
        );
      }
    }
    // The lease, the limit and the name come first, as the server checks them.
    const long = "v".repeat(1025);
    await assert.rejects(
      client.acquire("a", { value: long, leaseMs: 0 }),
      (e: unknown) => (e as ServerError).code === 0x17,
    );
    await assert.rejects(
      client.acquire("a", { value: long, limit: 0 }),
      (e: unknown) => (e as ServerError).code === 0x19,
    );
    await assert.rejects(client.acquire("", { value: long }), (e: unknown) => (e as ServerError).code === 0x14);
    assert.equal(server.connections.length, before);
  });
});

describe("proclaim against a fake server", () => {
  /** A lock claimed with value "a", and its connection with the ACQUIRE read. */
  async function valued(): Promise<{ lock: Lock; conn: FakeConnection }> {
    const client = new Client({ servers: server.address, leaseMs: 30000 });
    const pending = client.acquire("service/leader", { value: "a" });
    const conn = await server.accept();
    await conn.readAcquire();
    conn.acquired(5n);
    return { lock: await pending, conn };
  }

  test("sends [0x03][value_len u16][value] and resolves at its reply", async () => {
    const { lock, conn } = await valued();
    let settled = false;
    const proclaimed = lock.proclaim("10.0.0.7:9090").then(() => {
      settled = true;
    });
    assert.equal((await conn.read(16)).toString("hex"), `03000d${Buffer.from("10.0.0.7:9090").toString("hex")}`);
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(settled, false, "not before the reply");
    conn.acquired(5n);
    await proclaimed;
    await lock.release();
  });

  test("no hang: the lock's loss, its release or the caller's abort ends the wait", async () => {
    const lost = await valued();
    const p1 = lost.lock.proclaim("b");
    await lost.conn.read(4);
    lost.conn.socket.destroy();
    await assert.rejects(p1, LockLostError);
    await assert.rejects(lost.lock.proclaim("c"), LockLostError, "and at once afterwards");

    const released = await valued();
    const p2 = released.lock.proclaim("b");
    await released.conn.read(4);
    const rejected = assert.rejects(p2, LockReleasedError); // handled before release rejects it
    await released.lock.release();
    await rejected;

    const aborted = await valued();
    const controller = new AbortController();
    const p3 = aborted.lock.proclaim("b", { signal: controller.signal });
    await aborted.conn.read(4);
    controller.abort(new Error("enough"));
    await assert.rejects(p3, { message: "enough" });
    assert.ok(aborted.lock.held, "the lock is not touched");
    await assert.rejects(aborted.lock.proclaim("c", { signal: controller.signal }), { message: "enough" });
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(aborted.conn.unread, 0, "an aborted signal sends nothing");
    await aborted.lock.release();
  });
});
