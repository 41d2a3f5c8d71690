#!/usr/bin/env bash
# Builds dist/esm (ESM + .d.ts) and dist/cjs (CommonJS + .d.ts).
# Self-sufficient: installs the dev dependencies from the lockfile if needed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x node_modules/.bin/tsc ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi

rm -rf dist
node_modules/.bin/tsc -p tsconfig.json
node_modules/.bin/tsc -p tsconfig.cjs.json
# The package is "type": "module"; this marks the CommonJS tree as such.
printf '{\n  "type": "commonjs"\n}\n' > dist/cjs/package.json
