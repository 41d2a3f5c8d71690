#!/usr/bin/env bash
# Every check of the Python client: lint, types, unit and integration tests
# (against the real server binary) and a wheel + sdist build.
# Run from anywhere; works in python/.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/venv.sh
py=.venv/bin/python

# The server binary for integration tests: $MONOLOCK_BIN, else build it.
if [[ -z ${MONOLOCK_BIN:-} ]]; then
    (cd ../go && go build -o ../bin/monolock ./cmd/monolock)
    export MONOLOCK_BIN=$PWD/../bin/monolock
fi

echo "== ruff"
$py -m ruff check .
$py -m ruff format --check .
echo "== mypy --strict"
$py -m mypy
echo "== pytest"
$py -m pytest
echo "== build"
bash scripts/build.sh
