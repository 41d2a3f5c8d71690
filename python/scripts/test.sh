#!/usr/bin/env bash
# Every check of the Python client: lint, types, unit and integration tests
# (against the real server binary) and a wheel + sdist build.
# Run from anywhere; works in python/. Its step lines start with "[python]":
# the arrow marker belongs to the top-level steps of test:all.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/venv.sh
py=.venv/bin/python

# The server binary for integration tests: $MONOLOCK_BIN, else build it.
if [[ -z ${MONOLOCK_BIN:-} ]]; then
    (cd ../go && go build -o ../bin/monolock ./cmd/monolock)
    export MONOLOCK_BIN=$PWD/../bin/monolock
fi

echo "[python] ruff"
$py -m ruff check .
$py -m ruff format --check .
echo "[python] mypy --strict"
$py -m mypy
echo "[python] pytest"
$py -m pytest
echo "[python] build and install smoke test"
bash scripts/build.sh
