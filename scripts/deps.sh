#!/usr/bin/env bash
# deps.sh: install the system packages the Go tests need that a fresh
# machine lacks: etcd (Debian's etcd-server), which the HA tests run for
# real, and iproute2's ip, with which they build network namespaces.
# Idempotent; as root it calls apt-get directly, otherwise sudo.
set -euo pipefail

missing=()
command -v etcd >/dev/null || missing+=(etcd-server)
command -v ip >/dev/null || missing+=(iproute2)
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
echo "deps: installing ${missing[*]}" >&2
# Another apt-get (the benchmarks' peers) may hold the lock: wait for it.
as_root apt-get -o DPkg::Lock::Timeout=300 update -q
as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
