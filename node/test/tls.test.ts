// The TLS path against a TLS fake server, with certificates made for this run.
import assert from "node:assert/strict";
import { once } from "node:events";
import * as net from "node:net";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import type { ConnectionOptions } from "node:tls";
import { AcquireTimeoutError, CertificateError, Client, ConnectionError } from "../src/index.js";
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
      !err.message.includes("may not speak TLS") &&
      err.message.endsWith("(the server's certificate is not trusted: check the CA file and the server name)"),
  );
});

test("TLS: tls: true verifies against the system CAs (so a self-signed server fails)", async () => {
  const client = new Client({ servers: server.address, leaseMs: 1000, tls: true });
  await assert.rejects(client.tryAcquire("tls/c"), ConnectionError);
});

/** TCP connections a server accepted (a refused TLS handshake never reaches secureConnection). */
function countConnections(srv: net.Server): () => number {
  let n = 0;
  srv.on("connection", () => n++);
  return () => n;
}

/** The deadline a certificate problem must not wait for; at once means well under it. */
const DEADLINE_MS = 10_000;
const AT_ONCE_MS = 3_000;

test("TLS: a server certificate this client refuses fails a waiting acquire at once, that server asked once", async () => {
  const cases: [string, boolean | ConnectionOptions, string][] = [
    ["unknown CA", { ca: otherCert.cert }, "self-signed certificate"],
    ["system CAs, self-signed server", true, "self-signed certificate"],
    ["wrong server name", { ca: serverCert.cert, servername: "wrong.example" }, "wrong.example"],
  ];
  const connections = countConnections(server.server);
  for (const [label, tls, cause] of cases) {
    const before = connections();
    const client = new Client({ servers: server.address, leaseMs: 1000, tls });
    const start = performance.now();
    await assert.rejects(client.acquire("tls/refused", { timeoutMs: DEADLINE_MS }), (err: unknown) => {
      assert.ok(err instanceof CertificateError, `${label}: ${String(err)}`);
      assert.ok(err instanceof ConnectionError && err.phase === "connect", label);
      assert.equal(err.side, "server", label);
      assert.equal(err.address, server.address, label);
      assert.equal(err.code, null, label);
      assert.equal(err.temporary, false, label);
      assert.ok(err.cause instanceof Error, label);
      assert.match(err.message, new RegExp(`^monolock: TLS handshake with ${server.address} failed: `), label);
      assert.ok(err.message.includes(cause), `${label}: ${err.message}`);
      assert.ok(
        err.message.endsWith("(the server's certificate is not trusted: check the CA file and the server name)"),
        `${label}: ${err.message}`,
      );
      return true;
    });
    assert.ok(performance.now() - start < AT_ONCE_MS, `${label}: at once, not at the deadline`);
    await sleep(300);
    assert.equal(connections() - before, 1, `${label}: not asked again`);
  }
});

/** A TCP server that answers the ClientHello with one fatal TLS alert. */
async function alertServer(alert: number): Promise<{ address: string; connections: () => number; close(): void }> {
  const srv = net.createServer((sock) => {
    sock.on("error", () => {});
    sock.once("data", () => sock.end(Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, alert])));
  });
  const connections = countConnections(srv);
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const { port } = srv.address() as net.AddressInfo;
  return { address: `127.0.0.1:${port}`, connections, close: () => srv.close() };
}

test("TLS: every alert that refuses this client's certificate fails a waiting acquire at once", async () => {
  // bad_certificate ... access_denied, certificate_required.
  for (const alert of [42, 43, 44, 45, 46, 48, 49, 116]) {
    const srv = await alertServer(alert);
    try {
      const client = new Client({ servers: srv.address, leaseMs: 1000, tls: { ca: serverCert.cert } });
      const start = performance.now();
      await assert.rejects(client.acquire("tls/alert", { timeoutMs: DEADLINE_MS }), (err: unknown) => {
        assert.ok(err instanceof CertificateError, `alert ${alert}: ${String(err)}`);
        assert.equal(err.side, "client");
        assert.equal(err.temporary, false);
        assert.match(err.message, new RegExp(`^monolock: TLS handshake with ${srv.address} failed: \\S.* alert `));
        assert.ok(
          err.message.endsWith(
            "(the server refused this client's certificate: give a client certificate that its CA signs)",
          ),
          err.message,
        );
        return true;
      });
      assert.ok(performance.now() - start < AT_ONCE_MS, `alert ${alert}: at once`);
      assert.equal(srv.connections(), 1, `alert ${alert}: not asked again`);
    } finally {
      srv.close();
    }
  }
});

test("TLS: an alert that is not about a certificate is retried until the deadline, as before", async () => {
  const srv = await alertServer(40); // handshake_failure
  try {
    const client = new Client({ servers: srv.address, leaseMs: 1000, tls: { ca: serverCert.cert } });
    await assert.rejects(client.acquire("tls/handshake-failure", { timeoutMs: 600 }), (err: unknown) => {
      assert.ok(err instanceof AcquireTimeoutError, String(err));
      assert.ok(err.cause instanceof ConnectionError && !(err.cause instanceof CertificateError), String(err.cause));
      return true;
    });
    assert.ok(srv.connections() > 1, "retried");
  } finally {
    srv.close();
  }
});

test("TLS: with a refused server certificate first in the list, the next server grants", async () => {
  const other = await FakeServer.start(otherCert);
  try {
    const connections = countConnections(other.server);
    const client = new Client({
      servers: [other.address, server.address],
      leaseMs: 1000,
      tls: { ca: serverCert.cert },
    });
    const pending = client.acquire("tls/second", { timeoutMs: DEADLINE_MS });
    const conn = await server.accept();
    await conn.readAcquire();
    conn.acquired(7n);
    const lock = await pending;
    assert.equal(lock.token, 7n);
    await lock.release();
    assert.equal(connections(), 1);
  } finally {
    await other.close();
  }
});
