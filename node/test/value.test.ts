// Claims with a value (protocol version 3) against the real Go server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, LockReleasedError, NoValueError, ValueTooLongError } from "../src/index.js";
import { RealServer } from "./helpers/real-server.js";

interface ListedSession {
  token?: number;
  value?: string;
  value_hex?: string;
}

interface Listing {
  locks: { name: string; holders: ListedSession[]; waiters: ListedSession[] }[];
}

describe("claims with a value against monolock serve", () => {
  let server: RealServer;
  let client: Client;
  let admin: string;
  before(async () => {
    server = await RealServer.start(["--admin", "127.0.0.1:0"]);
    client = new Client({ servers: server.address, leaseMs: 5000 });
    admin = await server.adminAddress();
  });
  after(async () => {
    await server.stop();
  });

  /** The admin listing's entry of `name`. */
  async function listed(name: string): Promise<Listing["locks"][number] | undefined> {
    const res = await fetch(`http://${admin}/v1/locks`);
    assert.equal(res.status, 200, await res.clone().text());
    const body = (await res.json()) as Listing;
    return body.locks.find((l) => l.name === name);
  }

  test("a claim with a value is granted, and the server lists its holder with it", async () => {
    const lock = await client.acquire("val/leader", { value: "10.0.0.7:8080" });
    assert.ok(lock.held && lock.token >= 1n);
    const entry = await listed("val/leader");
    assert.equal(entry?.holders.length, 1);
    assert.equal(entry?.holders[0]?.value, "10.0.0.7:8080");
    // A waiter shows its value too, and is granted after the holder lets go.
    let queued: () => void = () => {};
    const waiting = new Promise<void>((r) => {
      queued = r;
    });
    const next = client.acquire("val/leader", { value: Buffer.from([0x00, 0xff, 0x10]), onWaiting: () => queued() });
    await waiting;
    assert.equal((await listed("val/leader"))?.waiters[0]?.value_hex, "00ff10");
    await lock.release();
    const second = await next;
    assert.ok(second.token > lock.token);
    assert.equal((await listed("val/leader"))?.holders[0]?.value_hex, "00ff10");
    await second.release();
  });

  test("semaphore permits with values; tryAcquire with a value; an empty value is none", async () => {
    const a = await client.acquire("val/pool", { limit: 2, value: '{"host":"gpu-1"}' });
    const b = await client.tryAcquire("val/pool", { limit: 2, value: '{"host":"gpu-2"}' });
    const values = (await listed("val/pool"))?.holders.map((h) => h.value).sort();
    assert.deepEqual(values, ['{"host":"gpu-1"}', '{"host":"gpu-2"}']);
    await Promise.all([a.release(), b.release()]);
    const plain = await client.acquire("val/none", { value: "" });
    const holder = (await listed("val/none"))?.holders[0];
    assert.equal(holder?.value, undefined);
    assert.equal(holder?.value_hex, undefined);
    await plain.release();
  });

  test("the longest value, 1024 bytes, is granted", async () => {
    const value = "v".repeat(1024);
    const lock = await client.acquire("val/longest", { value });
    assert.equal((await listed("val/longest"))?.holders[0]?.value, value);
    await lock.release();
  });

  test("proclaim replaces the held lock's value, keeps its token, and resolves once the server has it", async () => {
    const lock = await client.acquire("val/proclaim", { value: "10.0.0.7:8080" });
    for (const value of ["10.0.0.7:9090", "10.0.0.7:9191"]) {
      await lock.proclaim(value);
      const holder = (await listed("val/proclaim"))?.holders[0];
      assert.equal(holder?.value, value, "the server has it when proclaim resolves");
      assert.equal(BigInt(holder?.token ?? -1), lock.token);
    }
    await lock.proclaim(Buffer.from([0x00, 0xff]));
    assert.equal((await listed("val/proclaim"))?.holders[0]?.value_hex, "00ff");
    // Two at once: the second goes after the first's reply (or replaces it, were a heartbeat in flight).
    await Promise.all([lock.proclaim("first"), lock.proclaim("second")]);
    assert.equal((await listed("val/proclaim"))?.holders[0]?.value, "second");
    assert.ok(lock.held);
    await lock.release();
  });

  test("proclaim rejects a value too long, after release, and for a lock claimed without a value", async () => {
    const lock = await client.acquire("val/refused", { value: "a" });
    await assert.rejects(lock.proclaim("v".repeat(1025)), ValueTooLongError);
    assert.ok(lock.held, "refused before anything is sent");
    await lock.release();
    await assert.rejects(lock.proclaim("b"), LockReleasedError);

    const plain = await client.acquire("val/plain");
    await assert.rejects(plain.proclaim("x"), (err: unknown) => {
      assert.ok(err instanceof NoValueError);
      assert.equal(
        err.message,
        'monolock: lock "val/plain" was claimed without a value (use the value option to proclaim)',
      );
      return true;
    });
    // A PROCLAIM on its version 1 connection would end the session (0x13).
    await new Promise((r) => setTimeout(r, 100));
    assert.ok(plain.held, "refused before anything is sent");
    await plain.release();
  });
});
