#!/usr/bin/env bash
# Builds and runs every ```rust block of README.md as a program of a fresh
# Cargo project (`cargo init`) that depends on this folder by path with
# `cargo add --path`, plus the README's other dependency lines verbatim
# (such as rustls = "0.23" with its default features). The blocks run
# unmodified but for the server address, against a real server and a real
# TLS server. Run from rust/ with MONOLOCK_BIN set: bash scripts/readme.sh
set -euo pipefail
cd "$(dirname "$0")/.."
crate="$(pwd)"
: "${MONOLOCK_BIN:?set MONOLOCK_BIN to the monolock server binary}"
source ../scripts/lib/system-tools.sh
source ../scripts/lib/ready.sh
openssl=$(tool_path openssl) # the TLS example's certificates

# Kept between runs so that the dependencies build once.
proj="$crate/target/readme-smoke"
work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# --- the project, as a reader would make it
rm -rf "$proj/src" "$proj/Cargo.toml"
mkdir -p "$proj"
cargo init --quiet --vcs none --bin --name readme-smoke "$proj"
rm "$proj/src/main.rs"
mkdir "$proj/src/bin"
awk -v dir="$proj/src/bin" '
  /^```rust$/ { n++; file = sprintf("%s/readme_%d.rs", dir, n); on = 1; next }
  /^```$/ { on = 0 }
  on { print > file }
' README.md
blocks=$(ls "$proj/src/bin" | wc -l)
[[ "$blocks" -ge 3 ]] || { echo "README.md has only $blocks rust blocks"; exit 1; }

toml="$(awk '/^```toml$/ { on = 1; next } /^```$/ { on = 0 } on' README.md)"
# The features the README's monolock lines name.
features="$(grep '^monolock' <<<"$toml" | grep -o 'features = \[[^]]*\]' | grep -o '"[a-z0-9_-]*"' | tr -d '"' | sort -u | paste -sd, -)"
(cd "$proj" && cargo add --quiet monolock --path "$crate" ${features:+--features "$features"})
# Every other dependency line, as the README writes it.
grep -v -e '^\[' -e '^monolock' -e '^#' -e '^$' <<<"$toml" | sort -u >>"$proj/Cargo.toml"
printf '\n[workspace]\n' >>"$proj/Cargo.toml"
echo "readme: $blocks programs; dependencies:"
sed -n '/^\[dependencies\]/,/^\[workspace\]/p' "$proj/Cargo.toml" | grep -v '^\[' | sed 's/^/  /'

# --- servers: plaintext, and TLS with a CA the TLS example reads as ca.pem
"$openssl" req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=readme-ca -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
"$openssl" req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
  -keyout "$work/key.pem" -out "$work/leaf.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$work/leaf.ext"
"$openssl" x509 -req -in "$work/leaf.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
  -days 2 -extfile "$work/leaf.ext" -out "$work/cert.pem" 2>/dev/null

# start NAME [FLAGS...]: a server on a free port; prints its address.
start() {
  local name=$1; shift
  mkdir "$work/$name"
  "$MONOLOCK_BIN" serve --listen 127.0.0.1:0 --admin off --data-dir "$work/$name" \
    --ready-file "$work/$name.ready" "$@" 2>"$work/$name.log" &
  pids+=($!)
  eval "pid_$name=$!"
}
# wait_addr NAME prints the address of server NAME, from its ready file.
wait_addr() {
  local pid_var="pid_$1"
  wait_ready "$work/$1.ready" "${!pid_var}" "$work/$1.log" || exit 1
}
start plain
start tls --tls-cert "$work/cert.pem" --tls-key "$work/key.pem"
addr="$(wait_addr plain)"
tls_port="$(wait_addr tls | sed 's/.*://')"

# The blocks name the default addresses; point them at these servers.
sed -i -e "s/127\.0\.0\.1:7117/$addr/g" -e "s/localhost:7117/localhost:$tls_port/g" "$proj"/src/bin/*.rs

(cd "$proj" && cargo build --quiet --bins)
for n in $(seq "$blocks"); do
  echo "== README rust block $n"
  # In the folder with ca.pem, as the TLS example expects.
  (cd "$work" && "$proj/target/debug/readme_$n")
done
echo "readme: all $blocks programs ran"
