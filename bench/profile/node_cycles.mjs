// Profile the Node client's acquire -> release cycle (workload 1, one
// worker) with V8's CPU profiler:
//
//   cd node && node --cpu-prof --cpu-prof-dir=/tmp/node-prof ../bench/profile/node_cycles.mjs ADDR [seconds]
//
// Prints cycles/s; open the .cpuprofile in Chrome DevTools, or summarise it
// with bench/profile/cpuprofile_top.mjs.
import { Client } from "../../node/dist/esm/index.js";

const [addr, secs = "3"] = process.argv.slice(2);
const client = new Client({ servers: [addr], leaseMs: 10_000 });
const end = performance.now() + Number(secs) * 1000;
let n = 0;
while (performance.now() < end) {
  const lock = await client.acquire(`prof/node/${n}`, { timeoutMs: 10_000 });
  await lock.release();
  n++;
}
console.log(`node: ${(n / Number(secs)).toFixed(0)} cycles/s under --cpu-prof`);
