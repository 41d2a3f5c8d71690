// Micro-benchmark of the Node client, for development (not part of the
// package). It runs the cells of docs/benchmarks.md section 5 against one
// `monolock serve`:
//
//   u1   1 worker: acquire + release on fresh names
//   u16  16 workers: the same
//   h16  16 claims on one name, each re-acquiring after its release
//
// on one or more targets, interleaved (round after round, cell after cell,
// target after target) so that every target sees the same load of a busy
// machine, and compares each with the first. A target is
//
//   LABEL=DIR          the package folder DIR in process (--via inproc) or
//                      its conformance driver (--via driver: JSON lines
//                      over a pipe, as the benchmark runs it)
//   LABEL=cmd:PROGRAM ARGS...   any conformance driver, e.g. the Go
//                      client's: go=cmd:/path/to/bin/drivers/go
//
// Besides the rate it reports the CPU time per operation of the process
// that runs the client (the driver, or this one in process), which is far
// less noisy than the rate.
//
//   node bench/cycles.mjs [--server 127.0.0.1:7117 | --bin ../bin/monolock]
//       [--via inproc|driver] [--cells u1,u16,h16] [--secs 3] [--rounds 1]
//       [--warmup SECS]   (every cell on every target first, unmeasured)
//       [--targets "old=/tmp/old-node,new=."]   (default: this folder)
//       [--node-args "--cpu-prof --cpu-prof-dir=/tmp/prof"]  (Node drivers)
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const args = { via: "inproc", cells: "u1,u16,h16", secs: "3", rounds: "1", targets: `this=${join(here, "..")}` };
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
let secs = Number(args.secs);

async function startServer(bin) {
  const dir = mkdtempSync(join(tmpdir(), "monolock-cycles-"));
  const ready = join(dir, "ready.json");
  const child = spawn(
    bin,
    ["serve", "--listen", "127.0.0.1:0", "--data-dir", join(dir, "data"), "--ready-file", ready],
    {
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  let stderr = ""; // read to the end, so that the server never blocks on its log
  child.stderr.on("data", (d) => (stderr = (stderr + d).slice(-16384)));
  let exited = false;
  child.once("exit", () => (exited = true));
  // The server renames its ready file into place whole (docs/operating.md).
  for (const deadline = Date.now() + 15000; Date.now() < deadline && !exited; ) {
    if (existsSync(ready)) {
      const stop = () => child.kill("SIGTERM");
      process.on("exit", stop); // also when a driver fails and this throws
      return { addr: JSON.parse(readFileSync(ready, "utf8")).lock_addr, stop };
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  child.kill("SIGKILL");
  throw new Error(`monolock serve ${exited ? "exited before it was ready" : "was not ready within 15 s"}:\n${stderr}`);
}

/** CPU time (ms) of a process: this one, or a child by pid. */
function cpuMs(pid) {
  if (pid === undefined) {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  }
  const f = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = f.slice(f.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime + stime, at USER_HZ 100
}

function percentile(sorted, p) {
  return sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/** The in-process target: acquire(name) resolves to a release function. */
async function inprocTarget(server, dir) {
  const { Client } = await import(pathToFileURL(join(dir, "dist", "esm", "index.js")).href);
  const client = new Client({ servers: [server], leaseMs: 10000 });
  return {
    pid: undefined,
    async acquire(name) {
      const lock = await client.acquire(name, { timeoutMs: 15000 });
      return () => lock.release();
    },
    close() {},
  };
}

/** A driver target: a conformance driver in a child process, like the benchmark. */
async function driverTarget(server, spec) {
  let command;
  let cwd;
  if (spec.startsWith("cmd:")) {
    command = spec.slice(4).split(" ");
    cwd = process.cwd();
  } else {
    const nodeArgs = args["node-args"] ? args["node-args"].split(" ") : [];
    command = [process.execPath, ...nodeArgs, join(spec, "conformance_driver", "driver.mjs")];
    cwd = spec;
  }
  const child = spawn(command[0], command.slice(1), { cwd, stdio: ["pipe", "pipe", "inherit"] });
  const waiters = new Map();
  let ready;
  const isReady = new Promise((r) => {
    ready = r;
  });
  createInterface({ input: child.stdout }).on("line", (line) => {
    const ev = JSON.parse(line);
    if (ev.event === "ready") return ready();
    const w = waiters.get(ev.id);
    if (w === undefined) return;
    if (ev.event === w.want) {
      waiters.delete(ev.id);
      w.resolve(ev);
    } else if (ev.event === "error" || ev.event === "lost" || ev.event === "driver_error") {
      waiters.delete(ev.id);
      w.reject(new Error(line));
    }
  });
  await isReady;
  let seq = 0;
  const call = (cmd, want) =>
    new Promise((resolve, reject) => {
      waiters.set(cmd.id, { want, resolve, reject });
      child.stdin.write(`${JSON.stringify(cmd)}\n`);
    });
  return {
    pid: child.pid,
    async acquire(name) {
      const id = `c${seq++}`;
      await call(
        { cmd: "acquire", id, servers: [server], name, lease_ms: 10000, mode: "wait", timeout_ms: 15000 },
        "acquired",
      );
      return () => call({ cmd: "release", id }, "released");
    },
    close() {
      child.stdin.end();
    },
  };
}

async function uncontended(target, workers) {
  const samples = [];
  const start = performance.now();
  const end = start + secs * 1000;
  const run = async (w) => {
    for (let seq = 0; performance.now() < end; seq++) {
      const t0 = performance.now();
      const release = await target.acquire(`cycles/u/${start}/${w}/${seq}`);
      await release();
      samples.push(performance.now() - t0);
    }
  };
  const cpu0 = cpuMs(target.pid);
  await Promise.all(Array.from({ length: workers }, (_, w) => run(w)));
  const cpu = cpuMs(target.pid) - cpu0;
  return { n: samples.length, secs: (performance.now() - start) / 1000, samples, cpu };
}

async function handoff(target, workers) {
  const samples = [];
  const start = performance.now();
  const end = start + secs * 1000;
  const name = `cycles/h/${start}`;
  let lastRelease = -1;
  let n = 0;
  const run = async () => {
    while (performance.now() < end) {
      const began = performance.now();
      const release = await target.acquire(name);
      const granted = performance.now();
      if (lastRelease >= began) samples.push(granted - lastRelease);
      n++;
      lastRelease = performance.now();
      await release();
    }
  };
  const cpu0 = cpuMs(target.pid);
  await Promise.all(Array.from({ length: workers }, () => run()));
  const cpu = cpuMs(target.pid) - cpu0;
  return { n, secs: (performance.now() - start) / 1000, samples, cpu };
}

const server = args.server ?? (await startServer(resolve(args.bin ?? join(here, "..", "..", "bin", "monolock"))));
const addr = typeof server === "string" ? server : server.addr;
const targets = [];
for (const t of args.targets.split(",")) {
  const [label, spec] = t.split("=");
  const s = spec.startsWith("cmd:") ? spec : resolve(spec);
  targets.push({ label, t: args.via === "driver" ? await driverTarget(addr, s) : await inprocTarget(addr, s) });
}
const cells = args.cells.split(",");
// A fresh Node process runs its first seconds in V8's lower tiers: --warmup
// SECS runs every target through every cell first, unmeasured.
if (Number(args.warmup ?? 0) > 0) {
  const measured = secs;
  secs = Number(args.warmup);
  for (const cell of cells) {
    for (const { t } of targets) {
      const workers = Number(cell.slice(1));
      await (cell.startsWith("h") ? handoff(t, workers) : uncontended(t, workers));
    }
  }
  secs = measured;
}
/** cell -> label -> [{rate, cpu}] */
const results = new Map(cells.map((c) => [c, new Map(targets.map(({ label }) => [label, []]))]));
for (let r = 0; r < Number(args.rounds); r++) {
  for (const cell of cells) {
    for (const { label, t } of targets) {
      const workers = Number(cell.slice(1));
      const res = cell.startsWith("h") ? await handoff(t, workers) : await uncontended(t, workers);
      const sorted = res.samples.sort((a, b) => a - b);
      const rate = res.n / res.secs;
      const cpu = (res.cpu * 1000) / res.n;
      results.get(cell).get(label).push({ rate, cpu });
      console.log(
        `round ${r + 1} ${args.via} ${cell.padEnd(4)} ${label.padEnd(6)} ${rate.toFixed(0).padStart(6)}/s` +
          `  p50 ${(percentile(sorted, 0.5) * 1000).toFixed(0)} µs  p99 ${(percentile(sorted, 0.99) * 1000).toFixed(0)} µs` +
          `  cpu ${cpu.toFixed(0)} µs/op`,
      );
    }
  }
}
console.log("medians (ratio: to the first target, per round, then the median of those)");
const first = targets[0].label;
for (const cell of cells) {
  for (const { label } of targets) {
    const xs = results.get(cell).get(label);
    const base = results.get(cell).get(first);
    const ratios = xs.map((x, i) => x.rate / base[i].rate);
    console.log(
      `${cell.padEnd(4)} ${label.padEnd(6)} ${median(xs.map((x) => x.rate))
        .toFixed(0)
        .padStart(6)}/s  cpu ${median(xs.map((x) => x.cpu)).toFixed(0)} µs/op` +
        `  ratio ${median(ratios).toFixed(2)} [${ratios.map((x) => x.toFixed(2)).join(" ")}]`,
    );
  }
}
for (const { t } of targets) t.close();
if (typeof server !== "string") server.stop();
