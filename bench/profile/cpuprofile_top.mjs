// Print the functions with the most self time in a V8 .cpuprofile file.
//   node bench/profile/cpuprofile_top.mjs FILE [count]
import { readFileSync } from "node:fs";

const [file, count = "15"] = process.argv.slice(2);
const prof = JSON.parse(readFileSync(file, "utf8"));
const dt = new Map(); // node id -> self microseconds
for (let i = 0; i < prof.samples.length; i++) {
  dt.set(prof.samples[i], (dt.get(prof.samples[i]) ?? 0) + (prof.timeDeltas[i] ?? 0));
}
const self = new Map();
let total = 0;
for (const node of prof.nodes) {
  const t = dt.get(node.id) ?? 0;
  total += t;
  const f = node.callFrame;
  const key = `${f.functionName || "(anonymous)"} ${f.url.split("/").slice(-2).join("/")}:${f.lineNumber + 1}`;
  self.set(key, (self.get(key) ?? 0) + t);
}
const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, Number(count));
for (const [k, t] of top) console.log(`${((100 * t) / total).toFixed(1).padStart(5)}%  ${k}`);
