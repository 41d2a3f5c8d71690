// Builds dist/esm (ESM + .d.ts) and dist/cjs (CommonJS + .d.ts) with the
// TypeScript compiler of the dev dependencies, installing them first when
// they are missing. It is the `prepare` script, so installing the package
// from a clone, a folder or a git URL builds it with no global tools.
// Plain Node, no shell: it runs wherever npm does.
import { execFileSync } from "node:child_process";
import { existsSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const packageDir = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(packageDir, "node_modules", "typescript", "bin", "tsc");

if (!existsSync(tsc)) installDevDependencies();

rmSync(join(packageDir, "dist"), { recursive: true, force: true });
for (const project of ["tsconfig.json", "tsconfig.cjs.json"]) {
  execFileSync(process.execPath, [tsc, "-p", project], { cwd: packageDir, stdio: "inherit" });
}
// The package is "type": "module"; this marks the CommonJS tree as such.
writeFileSync(join(packageDir, "dist", "cjs", "package.json"), '{\n  "type": "commonjs"\n}\n');

/**
 * `npm ci` from the lockfile in this folder. Run as the `prepare` script of
 * someone else's `npm install`, the environment carries that install's
 * settings: drop the ones that would send this install elsewhere (global,
 * prefix) or leave out the dev dependencies (omit, production).
 */
function installDevDependencies() {
  const env = { ...process.env };
  for (const key of Object.keys(env)) {
    if (/^npm_config_(global|location|prefix|omit|include|production|only|dev)$/i.test(key)) delete env[key];
  }
  const args = ["ci", "--include=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"];
  // The npm that runs this script, if any; else the one on PATH.
  const npmCli = process.env.npm_execpath;
  if (npmCli && /\.[cm]?js$/.test(npmCli)) {
    execFileSync(process.execPath, [npmCli, ...args], { cwd: packageDir, env, stdio: "inherit" });
  } else {
    execFileSync("npm", args, { cwd: packageDir, env, stdio: "inherit", shell: process.platform === "win32" });
  }
}
