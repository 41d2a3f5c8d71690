#!/usr/bin/env bash
# Runs every check of the Rust client. Run from rust/: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# The real server for the integration tests and the example run.
if [[ -z "${MONOLOCK_BIN:-}" ]]; then
  (cd ../go && go build -o ../bin/monolock ./cmd/monolock)
  MONOLOCK_BIN="$(cd .. && pwd)/bin/monolock"
fi
export MONOLOCK_BIN

echo "== cargo fmt --check"
cargo fmt --check

echo "== cargo clippy (all features, all targets)"
cargo clippy --all-features --all-targets -- -D warnings
# The default build has no dependencies and must be warning-free on its own.
cargo clippy --all-targets -- -D warnings

echo "== cargo test (all features): unit tests vs ../spec, integration, TLS, log, doc-tests"
cargo test --all-features

echo "== examples against a real server"
data_dir="$(mktemp -d)"
log="$data_dir/server.log"
"$MONOLOCK_BIN" serve --listen 127.0.0.1:0 --admin off --data-dir "$data_dir" --ready-file "$data_dir/ready.json" 2>"$log" &
server_pid=$!
cleanup() { kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; rm -rf "$data_dir"; }
trap cleanup EXIT
source ../scripts/lib/ready.sh
addr="$(wait_ready "$data_dir/ready.json" "$server_pid" "$log" 10)"
cargo run --quiet --example hold -- "$addr" example/blocking 1
cargo run --quiet --features tokio --example hold_async -- "$addr" example/tokio 1

echo "== README.md's programs in a fresh project, as a reader builds them"
bash scripts/readme.sh

echo "== cargo package"
# --allow-dirty: during development the tree has uncommitted files; in CI
# the checkout is clean and the flag is a no-op. Packaging verifies that the
# crate builds from the tarball alone (../spec is only read by tests).
cargo package --allow-dirty --quiet
echo "rust: all checks passed"
