// A closed session leaves nothing that keeps the event loop alive: a child
// process runs the client against the real server and must exit on its own.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { pathToFileURL } from "node:url";
import { RealServer } from "./helpers/real-server.js";
import { packageDir } from "./helpers/spec.js";

let server: RealServer;
before(async () => {
  server = await RealServer.start();
});
after(async () => {
  await server.stop();
});

const childSource = (indexUrl: string): string => `
import { Client } from ${JSON.stringify(indexUrl)};
const client = new Client({ servers: process.argv[2], leaseMs: 1000 });
const session = await client.session();
const a = await session.acquire("h/a");
await a.release();
const held = await session.acquire("h/b");
await session.tryAcquire("h/b").catch((e) => e.name);
await session.acquire("h/b", { timeoutMs: 50 }).catch((e) => e.name);
const ac = new AbortController();
const p = session.acquire("h/b", { signal: ac.signal }).catch((e) => e.name);
setTimeout(() => ac.abort(), 50);
await p;
const pending = session.acquire("h/b").catch((e) => e.name);
await session.close();
const pool = client.sessionPool();
await (await pool.acquire("h/c")).release();
await pool.close();
process.stdout.write(JSON.stringify({ held: held.state, pending: await pending }));
// No process.exit(): the process has to end by itself.
`;

test("after release, busy, timeout, abort and close no timer or socket of a session is left", async () => {
  const dir = mkdtempSync(join(tmpdir(), "monolock-session-handles-"));
  const script = join(dir, "child.mjs");
  writeFileSync(script, childSource(pathToFileURL(join(packageDir, "build", "src", "index.js")).href));
  const child = spawn(process.execPath, [script, server.address], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d: Buffer) => {
    out += d.toString();
  });
  const exited = once(child, "exit");
  const killer = setTimeout(() => child.kill("SIGKILL"), 20_000);
  try {
    const [code] = await exited;
    assert.equal(code, 0, `the child did not exit by itself: ${out}`);
    assert.deepEqual(JSON.parse(out), { held: "released", pending: "AcquireAbortedError" });
  } finally {
    clearTimeout(killer);
    rmSync(dir, { recursive: true, force: true });
  }
});
