#!/usr/bin/env bash
# peers.sh: install, start and stop the lock services that monolock is
# benchmarked against, each on loopback with a throwaway data directory.
#
#   peers.sh install          apt-get the Debian packages (skips what is there)
#   peers.sh start [DIR]      start Redis, etcd, PostgreSQL, ZooKeeper under DIR
#   peers.sh stop  [DIR]      stop them and delete DIR
#   peers.sh status [DIR]     print which ones run
#
# start and stop are idempotent: a peer whose pid file names a live process
# is left alone, a stop of a stopped peer is a no-op. DIR defaults to
# ${TMPDIR:-/tmp}/monolock-bench-peers. Ports are fixed, away from the
# defaults, so a system service of the same kind does not collide:
#   redis 127.0.0.1:16379   etcd 127.0.0.1:12379 (peer 12380)
#   postgres 127.0.0.1:15432   zookeeper 127.0.0.1:12181
set -euo pipefail

DIR=${2:-${TMPDIR:-/tmp}/monolock-bench-peers}
REDIS_PORT=16379
ETCD_PORT=12379
ETCD_PEER_PORT=12380
PG_PORT=15432
ZK_PORT=12181

log() { echo "peers: $*" >&2; }

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

source "$(dirname "$0")/../../scripts/lib/system-tools.sh"

install() {
	# The peers are the bench group of scripts/system-tools.tsv.
	bash "$(dirname "$0")/../../scripts/deps.sh" bench test
}

alive() { # alive NAME: its pid file names a live process
	local f="$DIR/$1.pid"
	[ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

wait_for() { # wait_for NAME CMD...: poll CMD for up to 30 s
	local name=$1; shift
	for _ in $(seq 1 300); do
		if "$@" >/dev/null 2>&1; then log "$name ready"; return 0; fi
		if ! alive "$name"; then
			log "$name exited; its log:"; tail -20 "$DIR/$name.log" >&2 || true; return 1
		fi
		sleep 0.1
	done
	log "$name not ready after 30 s; its log:"; tail -20 "$DIR/$name.log" >&2 || true
	return 1
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_redis() {
	alive redis && return 0
	mkdir -p "$DIR/redis"
	"$(tool_path redis-server)" --bind 127.0.0.1 --port $REDIS_PORT --dir "$DIR/redis" \
		--save '' --appendonly no --protected-mode no --maxclients 200000 \
		--daemonize no >"$DIR/redis.log" 2>&1 &
	echo $! >"$DIR/redis.pid"
	wait_for redis port_open $REDIS_PORT
}

start_etcd() {
	alive etcd && return 0
	"$(tool_path etcd)" --name bench --data-dir "$DIR/etcd" \
		--listen-client-urls http://127.0.0.1:$ETCD_PORT --advertise-client-urls http://127.0.0.1:$ETCD_PORT \
		--listen-peer-urls http://127.0.0.1:$ETCD_PEER_PORT --initial-advertise-peer-urls http://127.0.0.1:$ETCD_PEER_PORT \
		--initial-cluster bench=http://127.0.0.1:$ETCD_PEER_PORT \
		--log-level warn >"$DIR/etcd.log" 2>&1 &
	echo $! >"$DIR/etcd.pid"
	wait_for etcd port_open $ETCD_PORT
}

start_postgres() {
	alive postgres && return 0
	local run=() initdb postgres pg_isready
	initdb=$(tool_path initdb) postgres=$(tool_path postgres) pg_isready=$(tool_path pg_isready)
	# initdb and postgres refuse to run as root: use the package's user.
	if [ "$(id -u)" = 0 ]; then run=(runuser -u postgres --); fi
	if [ ! -f "$DIR/pg/PG_VERSION" ]; then
		mkdir -p "$DIR/pg"
		[ "$(id -u)" = 0 ] && chown postgres "$DIR/pg"
		"${run[@]}" "$initdb" -D "$DIR/pg" -A trust -U postgres >"$DIR/postgres-initdb.log" 2>&1
	fi
	touch "$DIR/postgres.log"
	[ "$(id -u)" = 0 ] && chown postgres "$DIR/postgres.log"
	"${run[@]}" "$postgres" -D "$DIR/pg" -h 127.0.0.1 -p $PG_PORT -k "$DIR/pg" \
		-c max_connections=1200 -c shared_buffers=128MB -c fsync=off \
		>"$DIR/postgres.log" 2>&1 &
	echo $! >"$DIR/postgres.pid"
	wait_for postgres "$pg_isready" -h 127.0.0.1 -p $PG_PORT
}

start_zookeeper() {
	alive zookeeper && return 0
	mkdir -p "$DIR/zookeeper/data" "$DIR/zookeeper/conf"
	# tickTime 250 ms lets clients ask for sessions down to 500 ms (2 ticks),
	# so the dead-holder workload can use the same lease as the others.
	cat >"$DIR/zookeeper/conf/zoo.cfg" <<-EOF
		tickTime=250
		minSessionTimeout=500
		maxSessionTimeout=60000
		dataDir=$DIR/zookeeper/data
		clientPortAddress=127.0.0.1
		clientPort=$ZK_PORT
		maxClientCnxns=0
		admin.enableServer=false
		4lw.commands.whitelist=ruok,mntr
	EOF
	cp /etc/zookeeper/conf_example/log4j.properties "$DIR/zookeeper/conf/" 2>/dev/null || true
	"$(tool_path java)" -Xmx2g -Dzookeeper.log.dir="$DIR/zookeeper" -Dzookeeper.root.logger=WARN,CONSOLE \
		-cp "$DIR/zookeeper/conf:$(tool_path zookeeper.jar)" \
		org.apache.zookeeper.server.ZooKeeperServerMain "$DIR/zookeeper/conf/zoo.cfg" \
		>"$DIR/zookeeper.log" 2>&1 &
	echo $! >"$DIR/zookeeper.pid"
	wait_for zookeeper port_open $ZK_PORT
}

start() {
	mkdir -p "$DIR"
	chmod 755 "$DIR"
	start_redis
	start_etcd
	start_postgres
	start_zookeeper
	log "all peers running under $DIR"
}

stop() {
	[ -d "$DIR" ] || return 0
	local name pid
	for name in redis etcd postgres zookeeper; do
		alive "$name" || continue
		pid=$(cat "$DIR/$name.pid")
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		log "$name stopped"
	done
	rm -rf "$DIR"
}

status() {
	local name
	for name in redis etcd postgres zookeeper; do
		if alive "$name"; then echo "$name running (pid $(cat "$DIR/$name.pid"))"; else echo "$name stopped"; fi
	done
}

case "${1:-}" in
install) install ;;
start) start ;;
stop) stop ;;
status) status ;;
*) echo "usage: $0 install|start|stop|status [DIR]" >&2; exit 2 ;;
esac
