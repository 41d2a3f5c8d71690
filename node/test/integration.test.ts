// The client against the real Go server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  AcquireAbortedError,
  AcquireTimeoutError,
  Client,
  ConnectionError,
  type Lock,
  LockBusyError,
  NotMonolockError,
  ShuttingDownError,
  UnsupportedVersionError,
} from "../src/index.js";
import { makeSelfSignedCert } from "./helpers/certs.js";
import { RealServer } from "./helpers/real-server.js";

/** Resolves on the next call of the returned hook. */
function signalOnce(): { hook: () => void; fired: Promise<void> } {
  let hook: () => void = () => {};
  const fired = new Promise<void>((r) => {
    hook = r;
  });
  return { hook: () => hook(), fired };
}

describe("against monolock serve", () => {
  let server: RealServer;
  let client: Client;
  before(async () => {
    server = await RealServer.start();
    client = new Client({ servers: server.address, leaseMs: 2000 });
  });
  after(async () => {
    await server.stop();
  });

  test("acquire, release, and tokens that only grow", async () => {
    const first = await client.acquire("it/basic");
    assert.ok(first.token >= 1n);
    assert.ok(first.remainingMs > 0 && first.remainingMs <= 1600);
    await first.release();
    const second = await client.acquire("it/basic");
    assert.ok(second.token > first.token);
    await second.release();
  });

  test("tryAcquire on a held lock: LockBusyError; free again after release", async () => {
    const holder = await client.acquire("it/try");
    await assert.rejects(client.tryAcquire("it/try"), LockBusyError);
    await holder.release();
    const lock = await client.tryAcquire("it/try");
    await lock.release();
  });

  test("waiters are promoted in FIFO order, each with a new token", async () => {
    const holder = await client.acquire("it/fifo");
    const order: string[] = [];
    const waiters: Promise<Lock>[] = [];
    for (const id of ["w1", "w2", "w3"]) {
      const queued = signalOnce();
      waiters.push(
        client.acquire("it/fifo", { onWaiting: queued.hook }).then((lock) => {
          order.push(id);
          return lock;
        }),
      );
      await queued.fired; // in the queue before the next one joins
    }
    let previous = holder.token;
    await holder.release();
    for (const w of waiters) {
      const lock = await w;
      assert.ok(lock.token > previous);
      previous = lock.token;
      await lock.release();
    }
    assert.deepEqual(order, ["w1", "w2", "w3"]);
  });

  test("a held lock outlives many leases thanks to heartbeats", async () => {
    const short = new Client({ servers: server.address, leaseMs: 250 });
    const lock = await short.acquire("it/heartbeat");
    await new Promise((r) => setTimeout(r, 1250)); // five leases
    assert.equal(lock.state, "held");
    assert.ok(lock.held);
    await assert.rejects(short.tryAcquire("it/heartbeat"), LockBusyError);
    await lock.release();
  });

  test("an aborted waiter leaves the queue; the next waiter gets the lock", async () => {
    const holder = await client.acquire("it/abort");
    const controller = new AbortController();
    const firstQueued = signalOnce();
    const aborted = client.acquire("it/abort", { signal: controller.signal, onWaiting: firstQueued.hook });
    await firstQueued.fired;
    const secondQueued = signalOnce();
    const next = client.acquire("it/abort", { onWaiting: secondQueued.hook });
    await secondQueued.fired;
    controller.abort();
    await assert.rejects(aborted, AcquireAbortedError);
    await holder.release();
    const lock = await next;
    assert.ok(lock.token > holder.token);
    await lock.release();
  });

  test("timeoutMs while queued rejects with AcquireTimeoutError", async () => {
    const holder = await client.acquire("it/timeout");
    await assert.rejects(client.acquire("it/timeout", { timeoutMs: 200 }), AcquireTimeoutError);
    await holder.release();
  });

  test("names up to 255 bytes of UTF-8, case and spaces kept", async () => {
    const name = `${"é".repeat(127)}a`;
    const a = await client.acquire(name);
    const b = await client.tryAcquire(" It/Case ");
    const c = await client.tryAcquire("it/case");
    assert.equal(a.name, name);
    await Promise.all([a.release(), b.release(), c.release()]);
  });

  test("await using releases at the end of the scope", async () => {
    {
      await using lock = await client.acquire("it/using");
      assert.equal(lock.state, "held");
    }
    const again = await client.tryAcquire("it/using");
    await again.release();
  });
});

describe("server going away", () => {
  test("SIGTERM while held: lost with ShuttingDownError (0x01)", async () => {
    const server = await RealServer.start();
    try {
      const client = new Client({ servers: server.address, leaseMs: 5000 });
      const lock = await client.acquire("it/shutdown");
      const stopped = server.stop("SIGTERM");
      const lost = await lock.lost;
      assert.equal(lost.kind, "server");
      assert.equal(lost.code, 0x01);
      assert.ok(lost.cause instanceof ShuttingDownError);
      assert.ok(lock.signal.aborted);
      await stopped;
    } finally {
      await server.stop();
    }
  });

  test("SIGKILL while held: lost, kind io or timeout, never re-acquired", async () => {
    const server = await RealServer.start();
    try {
      const client = new Client({ servers: server.address, leaseMs: 400 });
      const lock = await client.acquire("it/killed");
      await server.stop("SIGKILL");
      const lost = await lock.lost;
      assert.ok(lost.kind === "io" || lost.kind === "timeout", lost.kind);
      assert.equal(lock.state, "lost");
    } finally {
      await server.stop();
    }
  });
});

describe("pointed at the wrong thing", () => {
  let server: RealServer;
  before(async () => {
    server = await RealServer.start(["--admin", "127.0.0.1:0"]);
  });
  after(async () => {
    await server.stop();
  });

  test("the admin port: fails on its first bytes, says it is not monolock, asks whether it is the admin port", async () => {
    const admin = await server.adminAddress();
    // Current servers answer a non-HTTP first byte at once; older ones only
    // at the admin API's 10 s header timeout. A client timeout (0.8 x lease)
    // longer than that keeps this test about the client with either.
    const lease = 30_000;
    const client = new Client({ servers: admin, leaseMs: lease });
    const start = performance.now();
    await assert.rejects(client.acquire("it/admin-port"), (err: unknown) => {
      assert.ok(err instanceof NotMonolockError, String(err));
      assert.equal(
        err.message,
        `monolock: ${admin} does not speak the monolock protocol (it sent "HTTP/1.1 400…"); is this the admin port?`,
      );
      return true;
    });
    const took = performance.now() - start;
    const clientTimeout = 0.8 * lease;
    assert.ok(took < clientTimeout, `took ${Math.round(took)} ms: waited for the client timeout (${clientTimeout} ms)`);
  });

  test("TLS to the plaintext server: the handshake failed, and the server may not speak TLS", async () => {
    const client = new Client({ servers: server.address, leaseMs: 2000, tls: true });
    const expected = `monolock: TLS handshake with ${server.address} failed: the server may not speak TLS (wrong version number)`;
    await assert.rejects(client.tryAcquire("it/tls-plain"), (err: unknown) => {
      assert.ok(err instanceof ConnectionError && err.phase === "connect", String(err));
      assert.equal(err.message, expected);
      return true;
    });
    // Waiting, the deadline's error keeps that cause.
    await assert.rejects(client.acquire("it/tls-plain", { timeoutMs: 300 }), (err: unknown) => {
      assert.ok(err instanceof AcquireTimeoutError, String(err));
      assert.equal(
        err.message,
        `monolock: timed out waiting for the lock "it/tls-plain" (last attempt: ${expected.slice(10)})`,
      );
      return true;
    });
  });
});

describe("against monolock serve with TLS", () => {
  const cert = makeSelfSignedCert("monolock-it-server");
  let server: RealServer;
  before(async () => {
    server = await RealServer.start(["--tls-cert", cert.certPath, "--tls-key", cert.keyPath, "--admin", "off"]);
  });
  after(async () => {
    await server.stop();
  });

  test("a verified TLS connection: acquire, heartbeat, release", async () => {
    const client = new Client({ servers: server.address, leaseMs: 400, tls: { ca: cert.cert } });
    const lock = await client.acquire("it/tls");
    await new Promise((r) => setTimeout(r, 600)); // heartbeats past one lease
    assert.equal(lock.state, "held");
    await lock.release();
    await (await client.tryAcquire("it/tls")).release();
  });

  test("plaintext to the TLS server: it answers ERROR 0x10 in plaintext, so a waiting claim fails at once", async () => {
    // The server recognises a plaintext ACQUIRE on its TLS port and says
    // so instead of closing silently, which a waiting acquire would retry.
    const client = new Client({ servers: server.address, leaseMs: 10_000 });
    await assert.rejects(client.acquire("it/plain-to-tls", { timeoutMs: 5_000 }), (err: unknown) => {
      assert.ok(err instanceof UnsupportedVersionError, String(err));
      assert.equal(err.code, 0x10);
      assert.match(err.message, /this port speaks TLS: connect with TLS/);
      return true;
    });
  });
});
