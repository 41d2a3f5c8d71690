#!/usr/bin/env bash
# The Node client's full check: install from the lockfile, type-check, lint,
# unit + integration tests (node --test), then an npm pack smoke test.
# Run from anywhere; works in node/. Uses $MONOLOCK_BIN or builds ../bin/monolock.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== npm ci"
npm ci --no-audit --no-fund --loglevel=error

echo "== type-check and build"
node_modules/.bin/tsc -p tsconfig.test.json --noEmit
bash scripts/build.sh

echo "== lint"
node_modules/.bin/biome check

echo "== server binary"
if [ -z "${MONOLOCK_BIN:-}" ]; then
  (cd ../go && go build -o ../bin/monolock ./cmd/monolock)
  MONOLOCK_BIN="$(cd .. && pwd)/bin/monolock"
fi
export MONOLOCK_BIN
echo "$MONOLOCK_BIN"

echo "== node --test"
rm -rf build
node_modules/.bin/tsc -p tsconfig.test.json
node --test --test-concurrency=2 build/test/*.test.js

echo "== pack smoke test"
bash scripts/pack-smoke.sh
