// A released (or lost, or failed) lock leaves nothing that keeps the event
// loop alive: a child process runs the client and must exit on its own.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { pathToFileURL } from "node:url";
import { FakeServer } from "./helpers/fake-server.js";
import { packageDir } from "./helpers/spec.js";

let server: FakeServer;
before(async () => {
  server = await FakeServer.start();
});
after(async () => {
  await server.close();
});

const childSource = (indexUrl: string): string => `
import { Client } from ${JSON.stringify(indexUrl)};
const client = new Client({ servers: process.argv[2], leaseMs: 1000 });
const lock = await client.acquire("a");
await lock.release();
const lost = await client.acquire("b");
await lost.lost;
await client.tryAcquire("c").catch((e) => e.name);
await client.acquire("d", { timeoutMs: 100 }).catch((e) => e.name);
const ac = new AbortController();
const p = client.acquire("e", { signal: ac.signal }).catch((e) => e.name);
setTimeout(() => ac.abort(), 50);
await p;
await client.acquire("g").catch((e) => e.name);
const busy = process.getActiveResourcesInfo().filter((r) => r !== "PipeWrap" && r !== "TTYWrap");
process.stdout.write(JSON.stringify(busy));
// Lost by timeout and never released: its connection closes at the last
// acked send + lease, and then nothing is left.
await (await client.acquire("f")).lost;
// No process.exit(): the process has to end by itself.
`;

test("after release, loss, busy, timeout, abort and a wrong server no timer or socket is left; a lost lock closes by itself", async () => {
  const dir = mkdtempSync(join(tmpdir(), "monolock-handles-"));
  const script = join(dir, "child.mjs");
  writeFileSync(script, childSource(pathToFileURL(join(packageDir, "build", "src", "index.js")).href));
  const child = spawn(process.execPath, [script, server.address], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString();
  });
  const exited = once(child, "exit");

  // a: grant, then the child releases.
  let conn = await server.accept();
  await conn.readAcquire();
  conn.acquired(1n);
  await conn.closed;
  // b: grant, then lose it by an ERROR.
  conn = await server.accept();
  await conn.readAcquire();
  conn.acquired(2n);
  await conn.readHeartbeat();
  conn.error(0x02);
  // c: busy.
  conn = await server.accept();
  await conn.readAcquire();
  conn.waiting();
  await conn.closed;
  // d: waits past its timeout (heartbeats keep being answered).
  conn = await server.accept();
  await conn.readAcquire();
  conn.waiting();
  await conn.closed;
  // e: aborted while waiting.
  conn = await server.accept();
  await conn.readAcquire();
  conn.waiting();
  await conn.closed;
  // g: not a monolock server.
  conn = await server.accept();
  await conn.readAcquire();
  conn.write(Buffer.from("HTTP/1.1 400 Bad Request\r\n\r\n"));
  await conn.closed;
  // f: heartbeats never answered; the child lets go of nothing.
  conn = await server.accept();
  await conn.readAcquire();
  conn.acquired(6n);
  await conn.readHeartbeat();
  await conn.closed;

  const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  const [code, signal] = await exited;
  clearTimeout(killer);
  rmSync(dir, { recursive: true, force: true });
  assert.equal(signal, null, "the child had to be killed: something kept it alive");
  assert.equal(code, 0);
  assert.deepEqual(JSON.parse(out), []);
});
