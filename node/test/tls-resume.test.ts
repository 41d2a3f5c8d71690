// TLS on connections of their own, against the real server: they end with
// close_notify (a release and a claim given up alike).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, LockBusyError } from "../src/index.js";
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
