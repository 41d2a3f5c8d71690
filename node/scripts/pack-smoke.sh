#!/usr/bin/env bash
# Packs the package, installs the tarball into a fresh directory and runs the
# README's quick start there against a real `monolock serve`: ESM import,
# CommonJS require, and TypeScript types resolved from the tarball.
# Expects dist/ built and $MONOLOCK_BIN set (scripts/test.sh does both).
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

tarball="$(npm pack --silent --pack-destination "$work" | tail -n 1)"
echo "packed $tarball"
if tar -tzf "$work/$tarball" | grep -vE '^package/(dist/(esm|cjs)/|README\.md$|LICENSE$|package\.json$)'; then
  echo "unexpected files in the tarball (above)" >&2
  exit 1
fi

app="$work/app"
mkdir -p "$app"
cd "$app"
printf '{ "name": "smoke", "private": true, "type": "module" }\n' > package.json
ts_version="$(node -p 'require(process.argv[1]).devDependencies.typescript' "$pkg_dir/package.json")"
types_version="$(node -p 'require(process.argv[1]).devDependencies["@types/node"]' "$pkg_dir/package.json")"
npm install --no-audit --no-fund --loglevel=error --prefer-offline \
  "$work/$tarball" "typescript@$ts_version" "@types/node@$types_version"

# The README's quick start: the first ```ts block after "## Quick start".
node -e '
  const fs = require("fs");
  const readme = fs.readFileSync(process.argv[1], "utf8");
  const section = readme.slice(readme.indexOf("## Quick start"));
  const m = /```ts\n([\s\S]*?)```/.exec(section);
  if (!m) { console.error("no quick start in README"); process.exit(1); }
  fs.writeFileSync("quickstart.ts", m[1].replaceAll("127.0.0.1:7117", "__ADDR__"));
' "$pkg_dir/README.md"
cat > tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "target": "ES2022",
    "lib": ["ES2022", "ESNext.Disposable"],
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "types": ["node"],
    "strict": true,
    "outDir": "out"
  },
  "files": ["quickstart.ts"]
}
JSON

data_dir="$work/data"
"$MONOLOCK_BIN" serve --listen 127.0.0.1:0 --data-dir "$data_dir" 2> "$work/server.log" &
server_pid=$!
addr=""
for _ in $(seq 1 150); do
  addr="$(grep -o 'msg=listening addr=[^ ]*' "$work/server.log" | head -n 1 | sed 's/.*addr=//')" || true
  [ -n "$addr" ] && break
  sleep 0.1
done
if [ -z "$addr" ]; then cat "$work/server.log" >&2; echo "server did not start" >&2; exit 1; fi
sed -i "s/__ADDR__/$addr/g" quickstart.ts

echo "-- tsc (types from the tarball)"
node_modules/.bin/tsc -p tsconfig.json
echo "-- run the quick start"
timeout 60 node out/quickstart.js | tee "$work/out.txt"
grep -q "fencing token" "$work/out.txt"

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
echo "pack smoke test passed"
