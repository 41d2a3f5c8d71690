#!/usr/bin/env bash
# Installs the package the two ways a user does and runs the README's quick
# start and its shared locks example in each against a real `monolock
# serve`: in a fresh `npm init -y` project (CommonJS, npm's default), then
# the same project as an ES module ("type": "module"), compiled with the
# README's tsconfig.json as written and the types of the installed package,
# plus a CommonJS require:
#   1. the `npm pack` tarball (what the registry would serve);
#   2. this folder as a fresh clone has it (no node_modules, no dist),
#      installed with `npm install <folder>` and only node, npm and sh on PATH:
#      the prepare script must build it with nothing else installed.
# Needs $MONOLOCK_BIN (scripts/test.sh sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
pkg_dir="$(pwd)"

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
npm_quiet=(--no-audit --no-fund --loglevel=error --prefer-offline)

data_dir="$work/data"
"$MONOLOCK_BIN" serve --listen 127.0.0.1:0 --admin off --data-dir "$data_dir" --ready-file "$work/ready.json" 2> "$work/server.log" &
server_pid=$!
source ../scripts/lib/ready.sh
addr="$(wait_ready "$work/ready.json" "$server_pid" "$work/server.log")"

# The README's quick start (the first ```ts block after "## Quick start",
# pointed at our server) and its tsconfig (the first ```json block there),
# both as the README writes them.
node -e '
  const fs = require("fs");
  const readme = fs.readFileSync(process.argv[1], "utf8");
  const section = readme.slice(readme.indexOf("## Quick start"));
  const ts = /```ts\n([\s\S]*?)```/.exec(section);
  const json = /```json\n([\s\S]*?)```/.exec(section);
  if (!ts || !json) { console.error("no quick start or tsconfig in README"); process.exit(1); }
  fs.writeFileSync(process.argv[2] + "/quickstart.ts", ts[1].replaceAll("127.0.0.1:7117", process.argv[3]));
  const config = JSON.parse(json[1]);
  if (config.compilerOptions.target !== "ES2022") { console.error("README tsconfig: target must be ES2022"); process.exit(1); }
  fs.writeFileSync(process.argv[2] + "/tsconfig.json", json[1]);
  // The example of "## Shared locks and semaphores", compiled and run beside it.
  const shared = /```ts\n([\s\S]*?)```/.exec(readme.slice(readme.indexOf("## Shared locks and semaphores")));
  if (!shared) { console.error("no shared locks example in README"); process.exit(1); }
  fs.writeFileSync(process.argv[2] + "/shared.ts", shared[1].replaceAll("127.0.0.1:7117", process.argv[3]));
' "$pkg_dir/README.md" "$work" "$addr"

# What the README tells a reader to install beside monolock, taken from this
# folder's own dev dependencies (no download): linked into the project after
# the monolock install, which would otherwise prune them as extraneous.
link_dev_tools() {
  mkdir -p node_modules/@types node_modules/.bin
  ln -s "$pkg_dir/node_modules/typescript" node_modules/typescript
  ln -s "$pkg_dir/node_modules/@types/node" node_modules/@types/node
  ln -s ../typescript/bin/tsc node_modules/.bin/tsc
}

# The quick start as the README says to build and run it: `npx tsc`, then
# `node quickstart.js`; `npx tsc` compiles the shared locks example too.
run_quickstart() {
  rm -f quickstart.js
  npx --no-install tsc
  timeout 60 node quickstart.js | tee out.txt
  grep -q "fencing token" out.txt
  timeout 60 node shared.js | tee out.txt
  grep -q "two readers" out.txt && grep -q "both permits of pool/gpu are taken" out.txt
}

# A fresh `npm init -y` project in $1 with `monolock` from $2, then the checks.
check_install() {
  local app="$1" spec="$2"
  mkdir -p "$app"
  cp "$work/quickstart.ts" "$work/shared.ts" "$work/tsconfig.json" "$app/"
  (
    cd "$app"
    npm init -y >/dev/null
    [ "$(npm pkg get type)" != '"module"' ] || { echo "npm init -y made an ES module project" >&2; exit 1; }
    PATH="$shim_path" npm install "${npm_quiet[@]}" "$spec"
    link_dev_tools
    echo "-- the quick start in npm init's CommonJS project (types from the installed package)"
    run_quickstart
    grep -q 'require("monolock")' quickstart.js || { echo "tsc did not emit CommonJS" >&2; exit 1; }
    echo "-- the same in an ES module project (\"type\": \"module\")"
    npm pkg set type=module
    run_quickstart
    grep -q 'from "monolock"' quickstart.js || { echo "tsc did not emit an ES module" >&2; exit 1; }
    npm pkg set type=commonjs # back to what npm init made, for the require below
    echo "-- CommonJS require"
    timeout 60 node -e '
      const { Client, LockBusyError } = require("monolock");
      const client = new Client({ servers: process.argv[1] });
      client.acquire("smoke/cjs").then(async (lock) => {
        await client.tryAcquire("smoke/cjs").catch((e) => { if (!(e instanceof LockBusyError)) throw e; });
        console.log("cjs token", lock.token);
        await lock.release();
      });
    ' "$addr"
  )
}

# Only node, npm and the sh npm runs scripts with on PATH: no global
# TypeScript, no bash, no git for the build.
shim="$work/bin"
mkdir -p "$shim"
for tool in node npm sh; do ln -s "$(command -v "$tool")" "$shim/$tool"; done
shim_path="$shim"

echo "== from the npm pack tarball"
tarball="$(npm pack --silent --pack-destination "$work" | tail -n 1)" # prepare builds dist/
echo "packed $tarball"
if tar -tzf "$work/$tarball" | grep -vE '^package/(dist/(esm|cjs)/|README\.md$|LICENSE$|package\.json$)'; then
  echo "unexpected files in the tarball (above)" >&2
  exit 1
fi
check_install "$work/app-tarball" "$work/$tarball"

echo "== from a clone's folder"
clone="$work/clone/node"
mkdir -p "$clone"
# What git would check out: ignored build output and dependencies left out.
tar -C "$pkg_dir" --exclude=./node_modules --exclude=./dist --exclude=./build --exclude='*.tgz' -cf - . | tar -C "$clone" -xf -
check_install "$work/app-folder" "$clone"
test -f "$clone/dist/esm/index.js" || { echo "the prepare script did not build dist/" >&2; exit 1; }

echo "pack smoke test passed"
