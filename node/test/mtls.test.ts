// Mutual TLS and the ACL against the real server, with every file made by
// `monolock certs`: the ACL's cn:deployer takes its lock, a CN the ACL does
// not name is refused with ERROR 0x18.
import assert from "node:assert/strict";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Client, NotAuthorizedError } from "../src/index.js";
import { makeMonolockPki } from "./helpers/certs.js";
import { RealServer } from "./helpers/real-server.js";

let pki: string;
let server: RealServer;
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
});
after(async () => {
  await server?.stop();
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

test("mTLS + ACL: a CN the ACL does not name gets ERROR 0x18", async () => {
  await assert.rejects(clientAs("intruder").tryAcquire("deploy/node-intruder"), (err: unknown) => {
    assert.ok(err instanceof NotAuthorizedError, String(err));
    assert.equal(err.code, 0x18);
    return true;
  });
});
