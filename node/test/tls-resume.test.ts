// TLS on connections of their own, against the real server: they resume
// the client's latest TLS session of that server, and end with close_notify
// (a release and a claim given up alike).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, LockBusyError } from "../src/index.js";
import { tlsSessionsOf } from "../src/tls-resume.js";
import { makeSelfSignedCert, type TestCert } from "./helpers/certs.js";
import { RealServer } from "./helpers/real-server.js";
import { type ProxiedConnection, RecordProxy } from "./helpers/record-proxy.js";

let cert: TestCert;
let server: RealServer;
before(async () => {
  cert = makeSelfSignedCert("monolock-test-server");
  server = await RealServer.start(["--admin", "off", "--tls-cert", cert.certPath, "--tls-key", cert.keyPath]);
});
after(async () => {
  await server?.stop();
});

/** TLS 1.3 pinned: the record sizes below are its. */
function tlsClient(servers: string): Client {
  return new Client({ servers, leaseMs: 2000, tls: { ca: cert.cert, minVersion: "TLSv1.3" } });
}

/**
 * A TLS 1.3 close_notify is one encrypted record of 19 bytes (the 2-byte
 * alert, its inner type, the 16-byte tag). No client frame is 2 bytes long
 * (a HEARTBEAT is 1, an ACQUIRE at least 8), so no other record has it.
 */
function endsWithCloseNotify(conn: ProxiedConnection): boolean {
  const last = conn.records().at(-1);
  return last !== undefined && last.type === 0x17 && last.length === 19;
}

test("TLS: a released lock's connection and a busy tryAcquire's both end with close_notify", async () => {
  const proxy = await RecordProxy.start(server.address);
  try {
    const lock = await tlsClient(proxy.address).acquire("tls-close/a", { timeoutMs: 10_000 });
    const held = proxy.connections.at(-1);
    assert.ok(held);

    await assert.rejects(tlsClient(proxy.address).tryAcquire("tls-close/a"), LockBusyError);
    const busy = proxy.connections.at(-1);
    assert.ok(busy && busy !== held);
    await busy.clientDone;
    assert.ok(endsWithCloseNotify(busy), `busy: ${JSON.stringify(busy.records())}`);

    await lock.release();
    await held.clientDone;
    assert.ok(endsWithCloseNotify(held), `released: ${JSON.stringify(held.records())}`);
  } finally {
    await proxy.close();
  }
});

/** The client's handshakes so far: full and resumed. */
function handshakes(client: Client): { full: number; resumed: number } {
  const { full, resumed } = tlsSessionsOf(client);
  return { full, resumed };
}

test("TLS: three acquire/release cycles on one client: the 2nd and 3rd resume the 1st's session", async () => {
  const client = tlsClient(server.address);
  const seen = [];
  for (let i = 0; i < 3; i++) {
    const lock = await client.acquire("tls-resume/cycle", { timeoutMs: 10_000 });
    assert.ok(lock.token > 0n);
    await lock.release();
    seen.push(handshakes(client));
  }
  assert.deepEqual(seen, [
    { full: 1, resumed: 0 },
    { full: 1, resumed: 1 },
    { full: 1, resumed: 2 },
  ]);
  // Another client keeps sessions of its own: its first handshake is full.
  const other = tlsClient(server.address);
  await (await other.tryAcquire("tls-resume/other")).release();
  assert.deepEqual(handshakes(other), { full: 1, resumed: 0 });
});

test("TLS: a claim given up (a busy tryAcquire) leaves the session to resume, with TLS 1.2 as well", async () => {
  for (const maxVersion of ["TLSv1.3", "TLSv1.2"] as const) {
    const client = new Client({ servers: server.address, leaseMs: 2000, tls: { ca: cert.cert, maxVersion } });
    const holder = await tlsClient(server.address).acquire(`tls-resume/busy-${maxVersion}`, { timeoutMs: 10_000 });
    await assert.rejects(client.tryAcquire(`tls-resume/busy-${maxVersion}`), LockBusyError);
    await holder.release();
    const lock = await client.acquire(`tls-resume/busy-${maxVersion}`, { timeoutMs: 10_000 });
    await lock.release();
    assert.deepEqual(handshakes(client), { full: 1, resumed: 1 }, maxVersion);
  }
});
