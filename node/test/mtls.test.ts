// Mutual TLS and the ACL against the real server, with every file made by
// `monolock certs`: the ACL's cn:deployer takes its lock, a CN the ACL does
// not name is refused with ERROR 0x18; a certificate problem fails at once.
import assert from "node:assert/strict";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { CertificateError, Client, NotAuthorizedError } from "../src/index.js";
import { tlsSessionsOf } from "../src/tls-resume.js";
import { makeMonolockPki } from "./helpers/certs.js";
import { RealServer } from "./helpers/real-server.js";

let pki: string;
let server: RealServer;
/** The same certificates, without --tls-client-ca: any client may connect. */
let open: RealServer;
before(async () => {
  pki = makeMonolockPki(["deployer", "intruder"]);
  writeFileSync(join(pki, "acl"), "cn:deployer deploy/*\n");
  server = await RealServer.start([
    "--admin",
    "off",
    "--tls-cert",
    join(pki, "server.crt"),
    "--tls-key",
    join(pki, "server.key"),
    "--tls-client-ca",
    join(pki, "ca.crt"),
    "--acl",
    join(pki, "acl"),
  ]);
  open = await RealServer.start([
    "--admin",
    "off",
    "--tls-cert",
    join(pki, "server.crt"),
    "--tls-key",
    join(pki, "server.key"),
  ]);
});
after(async () => {
  await server?.stop();
  await open?.stop();
  rmSync(pki, { recursive: true, force: true });
});

function clientAs(name: string, servername?: string): Client {
  const file = (f: string) => readFileSync(join(pki, f));
  return new Client({
    servers: server.address,
    leaseMs: 2000,
    tls: { ca: file("ca.crt"), cert: file(`${name}.crt`), key: file(`${name}.key`), servername },
  });
}

test("mTLS + ACL: cn:deployer takes a deploy/ lock, by IP and by DNS name", async () => {
  for (const servername of [undefined, "localhost"]) {
    const lock = await clientAs("deployer", servername).acquire("deploy/node", { timeoutMs: 10_000 });
    assert.ok(lock.token > 0n);
    await lock.release();
  }
});

test("mTLS + ACL: the second claim of a client resumes its TLS session, its CN still the one the ACL matches", async () => {
  const client = clientAs("deployer");
  for (let i = 0; i < 2; i++) {
    const lock = await client.acquire("deploy/node-resumed", { timeoutMs: 10_000 });
    assert.ok(lock.token > 0n);
    await lock.release();
  }
  const { full, resumed } = tlsSessionsOf(client);
  assert.deepEqual({ full, resumed }, { full: 1, resumed: 1 });
  // The intruder's certificate is as good, but its CN is not in the ACL, resumed or not.
  const intruder = clientAs("intruder");
  for (let i = 0; i < 2; i++) await assert.rejects(intruder.tryAcquire("deploy/node-resumed"), NotAuthorizedError);
  assert.equal(tlsSessionsOf(intruder).resumed, 1);
});

test("mTLS + ACL: a CN the ACL does not name gets ERROR 0x18", async () => {
  await assert.rejects(clientAs("intruder").tryAcquire("deploy/node-intruder"), (err: unknown) => {
    assert.ok(err instanceof NotAuthorizedError, String(err));
    assert.equal(err.code, 0x18);
    return true;
  });
});

/** A waiting acquire that must fail at once with a CertificateError, well before its 10 s deadline. */
async function failsAtOnce(client: Client, name: string, side: "server" | "client", cause: string): Promise<void> {
  const start = performance.now();
  await assert.rejects(client.acquire(name, { timeoutMs: 10_000 }), (err: unknown) => {
    assert.ok(err instanceof CertificateError, String(err));
    assert.equal(err.side, side);
    assert.equal(err.phase, "connect");
    assert.equal(err.code, null);
    assert.equal(err.temporary, false);
    assert.ok(err.message.startsWith(`monolock: TLS handshake with ${server.address} failed: `), err.message);
    assert.ok(err.message.includes(cause), err.message);
    return true;
  });
  assert.ok(performance.now() - start < 3_000, "at once, not at the deadline");
}

test("mTLS: without a client certificate a waiting acquire fails at once (TLS 1.3: on the first read)", async () => {
  const client = new Client({ servers: server.address, leaseMs: 2000, tls: { ca: readFileSync(join(pki, "ca.crt")) } });
  await failsAtOnce(client, "deploy/no-cert", "client", "certificate required (the server refused this client's");
});

test("mTLS: a server name the certificate does not cover fails a waiting acquire at once", async () => {
  await failsAtOnce(clientAs("deployer", "wrong.example"), "deploy/wrong-name", "server", "wrong.example");
});

test("mTLS: with the server that refuses this client first in the list, the next server grants", async () => {
  const client = new Client({
    servers: [server.address, open.address],
    leaseMs: 2000,
    tls: { ca: readFileSync(join(pki, "ca.crt")) },
  });
  const start = performance.now();
  const lock = await client.acquire("deploy/second", { timeoutMs: 10_000 });
  assert.ok(lock.token > 0n);
  assert.ok(performance.now() - start < 3_000, "the next server at once");
  await lock.release();
});
