// The TLS path against a TLS fake server, with certificates made for this run.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, ConnectionError } from "../src/index.js";
import { makeSelfSignedCert } from "./helpers/certs.js";
import { FakeServer } from "./helpers/fake-server.js";

const serverCert = makeSelfSignedCert("monolock-test-server");
const otherCert = makeSelfSignedCert("monolock-test-other");

let server: FakeServer;
before(async () => {
  server = await FakeServer.start(serverCert);
});
after(async () => {
  await server.close();
});

test("TLS: the same bytes over a verified connection", async () => {
  const client = new Client({ servers: server.address, leaseMs: 200, tls: { ca: serverCert.cert } });
  const pending = client.acquire("tls/a");
  const conn = await server.accept();
  const acq = await conn.readAcquire();
  assert.equal(acq.raw.toString("hex"), `0101000000c80005${Buffer.from("tls/a").toString("hex")}`);
  conn.acquired(99n);
  const lock = await pending;
  assert.equal(lock.token, 99n);
  await conn.readHeartbeat();
  conn.acquired(99n);
  await lock.release();
  await conn.closed;
});

test("TLS: a certificate from an unknown CA is refused", async () => {
  const client = new Client({ servers: server.address, leaseMs: 1000, tls: { ca: otherCert.cert } });
  await assert.rejects(
    client.tryAcquire("tls/b"),
    (err: unknown) =>
      err instanceof ConnectionError &&
      err.phase === "connect" &&
      err.cause instanceof Error &&
      // The server speaks TLS: the message says what failed, not that it may not.
      err.message.startsWith(`monolock: TLS handshake with ${server.address} failed: `) &&
      !err.message.includes("may not speak TLS"),
  );
});

test("TLS: tls: true verifies against the system CAs (so a self-signed server fails)", async () => {
  const client = new Client({ servers: server.address, leaseMs: 1000, tls: true });
  await assert.rejects(client.tryAcquire("tls/c"), ConnectionError);
});
