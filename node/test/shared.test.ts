// Shared locks and semaphores against the real Go server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  type AcquireOptions,
  Client,
  LimitMismatchError,
  type Lock,
  LockBusyError,
  type LockName,
} from "../src/index.js";
import { RealServer } from "./helpers/real-server.js";

/** An acquire whose WAITING can be awaited. */
function queued(
  client: Client,
  name: LockName,
  options: AcquireOptions,
): { lock: Promise<Lock>; waiting: Promise<void> } {
  let hook: () => void = () => {};
  const waiting = new Promise<void>((r) => {
    hook = r;
  });
  return { lock: client.acquire(name, { ...options, onWaiting: () => hook() }), waiting };
}

/** Whether the promise is still pending after a short while. */
async function stillPending(p: Promise<unknown>, ms = 150): Promise<boolean> {
  const marker = Symbol("pending");
  const got = await Promise.race([
    p.then(
      () => "settled",
      () => "settled",
    ),
    new Promise((r) => setTimeout(() => r(marker), ms)),
  ]);
  return got === marker;
}

describe("shared locks and semaphores against monolock serve", () => {
  let server: RealServer;
  let client: Client;
  before(async () => {
    server = await RealServer.start();
    client = new Client({ servers: server.address, leaseMs: 5000 });
  });
  after(async () => {
    await server.stop();
  });

  test("readers hold together, each with its own increasing token", async () => {
    const readers: Lock[] = [];
    for (let i = 0; i < 3; i++) readers.push(await client.acquire("sh/readers", { shared: true }));
    for (let i = 1; i < readers.length; i++) {
      assert.ok((readers[i]?.token ?? 0n) > (readers[i - 1]?.token ?? 0n), "tokens grow");
    }
    assert.ok(readers.every((r) => r.held));
    const extra = await client.tryAcquire("sh/readers", { shared: true });
    assert.ok(extra.token > (readers[2]?.token ?? 0n));
    await Promise.all([...readers, extra].map((r) => r.release()));
  });

  test("a writer waits for every reader", async () => {
    const r1 = await client.acquire("sh/writer", { shared: true });
    const r2 = await client.acquire("sh/writer", { shared: true });
    await assert.rejects(client.tryAcquire("sh/writer"), LockBusyError);
    const writer = queued(client, "sh/writer", {});
    await writer.waiting;
    await r1.release();
    assert.ok(await stillPending(writer.lock), "one reader still holds it");
    await r2.release();
    const w = await writer.lock;
    assert.ok(w.token > r2.token);
    await w.release();
  });

  test("a reader that comes after a waiting writer waits for it (no barging)", async () => {
    const r1 = await client.acquire("sh/fifo", { shared: true });
    const writer = queued(client, "sh/fifo", {});
    await writer.waiting;
    await assert.rejects(client.tryAcquire("sh/fifo", { shared: true }), LockBusyError);
    const r2 = queued(client, "sh/fifo", { shared: true });
    await r2.waiting;
    await r1.release();
    const w = await writer.lock;
    assert.ok(await stillPending(r2.lock), "the late reader waits for the writer");
    await w.release();
    const late = await r2.lock;
    assert.ok(late.token > w.token);
    await late.release();
  });

  test("a semaphore of 3: the 4th claimant waits (try is busy) until a release promotes it", async () => {
    const held: Lock[] = [];
    for (let i = 0; i < 3; i++) held.push(await client.acquire("sh/sem", { limit: 3 }));
    await assert.rejects(client.tryAcquire("sh/sem", { limit: 3 }), LockBusyError);
    const fourth = queued(client, "sh/sem", { limit: 3 });
    await fourth.waiting;
    assert.ok(await stillPending(fourth.lock));
    const first = held.shift();
    await first?.release();
    const promoted = await fourth.lock;
    assert.ok(promoted.token > (held[1]?.token ?? 0n));
    await Promise.all([...held, promoted].map((l) => l.release()));
  });

  test("a different limit on the same name is refused by the server with LimitMismatchError (0x1a)", async () => {
    const holder = await client.acquire("sh/mismatch", { limit: 3 });
    for (const options of [{ limit: 4 }, { shared: true }]) {
      await assert.rejects(
        client.acquire("sh/mismatch", { ...options, timeoutMs: 5000 }),
        (err: unknown) =>
          err instanceof LimitMismatchError && err.code === 0x1a && err.origin === "server" && !err.temporary,
      );
    }
    await holder.release();
  });

  test("an exclusive holder keeps shared claims out; they are granted together after it", async () => {
    const writer = await client.acquire("sh/after");
    const a = queued(client, "sh/after", { shared: true });
    await a.waiting;
    const b = queued(client, "sh/after", { shared: true });
    await b.waiting;
    await writer.release();
    const [la, lb] = await Promise.all([a.lock, b.lock]);
    assert.ok(la.held && lb.held, "both readers hold at once");
    assert.ok(la.token > writer.token && lb.token > la.token);
    await Promise.all([la.release(), lb.release()]);
  });
});
