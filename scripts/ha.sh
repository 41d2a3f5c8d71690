#!/usr/bin/env bash
# ha.sh: a local HA cell to try failover by hand: a three-member etcd
# cluster and three `monolock serve` on loopback, until Ctrl-C.
#
#   scripts/ha.sh [BIN]     BIN defaults to bin/monolock (go run mage.go build)
#
# Servers: 127.0.0.1:7217, :7227, :7237 (admin off). etcd clients on
# 127.0.0.1:12479, :12489, :12499. Kill one server (its pid is printed) and
# watch another take over; clients given all three addresses follow.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-bin/monolock}
[ -x "$bin" ] || { echo "ha: $bin missing: run go run mage.go build" >&2; exit 1; }
bash scripts/deps.sh
source scripts/lib/system-tools.sh
source scripts/lib/ready.sh
etcd=$(tool_path etcd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/monolock-ha.XXXXXX")
pids=()
stop() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap stop EXIT INT TERM

cluster=""
for i in 0 1 2; do
	cluster+="e$i=http://127.0.0.1:1248$((i * 2 + 1)),"
done
cluster=${cluster%,}
endpoints=""
for i in 0 1 2; do
	client=127.0.0.1:124$((7 + i))9
	peer=http://127.0.0.1:1248$((i * 2 + 1))
	"$etcd" --name "e$i" --data-dir "$dir/e$i" --log-level warn \
		--listen-client-urls "http://$client" --advertise-client-urls "http://$client" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
		--initial-cluster "$cluster" --initial-cluster-state new 2>"$dir/e$i.log" &
	pids+=($!)
	endpoints+="$client,"
done
endpoints=${endpoints%,}
echo "ha: etcd members on $endpoints"

for i in 0 1 2; do
	addr=127.0.0.1:72$((1 + i))7
	"$bin" serve --listen "$addr" --advertise "$addr" --admin off --data-dir "$dir/s$i" \
		--etcd "$endpoints" --etcd-prefix /monolock/local/ --etcd-ttl 2s \
		--ready-file "$dir/s$i.ready" 2>"$dir/s$i.log" &
	pids+=($!)
	echo "ha: server $addr (pid $!, log $dir/s$i.log)"
done
# Ready means listening (leading comes later, for one of them).
for i in 0 1 2; do
	wait_ready "$dir/s$i.ready" "${pids[-3 + i]}" "$dir/s$i.log" >/dev/null
done
echo "ha: try: $bin run --server 127.0.0.1:7217,127.0.0.1:7227,127.0.0.1:7237 jobs/demo -- sleep 30"
echo "ha: Ctrl-C stops the cell"
wait
