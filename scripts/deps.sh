#!/usr/bin/env bash
# deps.sh: install the system tools of scripts/system-tools.tsv that this
# machine lacks, then check that every one of them is there.
#
#   deps.sh [GROUP...]        install and check GROUP's tools (default: test)
#   deps.sh check [GROUP...]  only check; exit 1 naming each missing package
#
# Idempotent; as root it calls apt-get directly, otherwise sudo.
set -euo pipefail
source "$(dirname "$0")/lib/system-tools.sh"

install=true
if [[ ${1:-} == check ]]; then
	install=false
	shift
fi
groups=("$@")
[[ ${#groups[@]} -gt 0 ]] || groups=(test)

missing_packages() {
	local name
	for name in $(tool_names "${groups[@]}"); do
		tool_installed "$name" >/dev/null || { tool_entry "$name"; echo "$tool_package"; }
	done | sort -u
}

if $install; then
	mapfile -t missing < <(missing_packages)
	if [[ ${#missing[@]} -gt 0 ]]; then
		as_root() { if [[ $(id -u) == 0 ]]; then "$@"; else sudo "$@"; fi; }
		echo "deps: installing ${missing[*]}" >&2
		# Another apt-get (the benchmarks' peers) may hold the lock: wait for it.
		as_root apt-get -o DPkg::Lock::Timeout=300 update -q
		# Only the packages: no service starts from their init scripts here;
		# tests and benchmarks start what they need with their own data.
		as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
	fi
fi

failed=0
for name in $(tool_names "${groups[@]}"); do
	tool_path "$name" >/dev/null || failed=1
done
if [[ $failed != 0 ]]; then
	echo "deps: some system tools of ${groups[*]} are missing (above)" >&2
	exit 1
fi
echo "deps: every system tool of ${groups[*]} is installed" >&2
