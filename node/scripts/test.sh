#!/usr/bin/env bash
# The Node client's full check: install from the lockfile (its prepare script
# builds dist/), type-check, lint, unit + integration tests (node --test),
# then the install smoke tests (npm pack tarball and clone folder).
# Run from anywhere; works in node/. Uses $MONOLOCK_BIN or builds ../bin/monolock.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== npm ci and build"
npm ci --no-audit --no-fund --loglevel=error
test -f dist/esm/index.js && test -f dist/cjs/index.js

echo "== type-check"
node_modules/.bin/tsc -p tsconfig.test.json --noEmit

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

echo "== install smoke tests"
bash scripts/pack-smoke.sh
