#!/usr/bin/env bash
# services.sh: throwaway Redis and PostgreSQL servers for tests, the one
# launcher that the Go and the Python tests share.
#
#   services.sh start redis|postgres DIR [OWNER]
#                                          start one, print its port on stdout
#   services.sh stop DIR                   stop every service started under DIR
#
# DIR is the caller's own directory (a test's temporary directory): it
# holds the pid files and the logs. Each service listens on 127.0.0.1 only,
# on a free port of 20000-32767: below the kernel's ephemeral ports (where
# `monolock serve --listen 127.0.0.1:0` lands) and away from the benchmark's
# fixed peers (bench/scripts/peers.sh: 16379, 15432), tried again on another
# port when the one chosen turns out taken. Nothing is kept: Redis saves
# nothing, PostgreSQL's cluster is made by initdb in a directory of its own
# under ${TMPDIR:-/tmp}, which stop removes.
#
# Readiness is checked with the servers' own protocols, not log lines: the
# Redis on the port must report our process id (INFO server), PostgreSQL's
# postmaster.pid must say "ready" for the port and pg_isready must agree.
#
# The caller should run stop when it is done; if its owner dies first (a
# test binary killed at its timeout) or DIR is removed without stop, a
# watcher stops the service and removes its files within about a second.
# The owner is the process OWNER, by default this script's parent: a
# shell that starts a service in a command substitution, port=$(...), is
# not that subshell but the shell itself, so it gives its own pid ($$).
# PostgreSQL refuses to run as root: as root, initdb and postgres run as the
# package's user postgres (runuser), as bench/scripts/peers.sh does.
set -euo pipefail
source "$(dirname "$0")/lib/system-tools.sh"

log() { echo "services: $*" >&2; }
die() { log "$*"; exit 1; }

# Ready within this many tenths of a second, or the start fails.
READY_TENTHS=300
PORT_TRIES=20

# port_open PORT: something accepts connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port prints a port of 20000-32767 that nothing listens on now.
free_port() {
	local port
	for _ in $(seq 1 50); do
		port=$((20000 + RANDOM % 12768))
		port_open "$port" || { echo "$port"; return 0; }
	done
	die "no free port found in 20000-32767"
}

# alive PID: process PID runs. A zombie does not count: nobody may reap an
# orphan of ours for a while.
alive() {
	local stat
	[[ -d /proc/self ]] || { kill -0 "$1" 2>/dev/null; return; }
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat:0:1} != Z ]]
}

# show_log FILE: its last lines on stderr.
show_log() { log "last lines of $1:"; tail -n 20 "$1" >&2 || true; }

# watch NAME OWNER PID RUNNER BASE: halt NAME when OWNER is gone, or DIR
# (then nobody could stop it any more), unless stop came first (it kills
# the watcher). In the background, on no descriptor of the caller's, so
# that a caller reading our stdout sees it end.
watch() {
	(
		trap '' INT HUP
		while alive "$2" && [[ -d $DIR ]]; do sleep 1; done
		halt "$1" "$3" "$4" "$5"
		rm -f "$DIR/$1".{pid,port,runner,base,watcher} 2>/dev/null
	) </dev/null >/dev/null 2>&1 &
	echo $! >"$DIR/$1.watcher"
}

# redis_is PORT PID: the Redis that answers on PORT is process PID.
redis_is() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'INFO server\r\n' >&3
		while IFS= read -r -t 2 line <&3; do
			line=${line%$'\r'}
			[[ $line == "process_id:$2" ]] && exit 0
			[[ $line == process_id:* ]] && exit 1
		done
		exit 1
	) 2>/dev/null
}

start_redis() {
	local bin port pid tenths
	bin=$(tool_path redis-server)
	mkdir -p "$DIR/redis"
	for _ in $(seq 1 $PORT_TRIES); do
		port=$(free_port)
		"$bin" --bind 127.0.0.1 --port "$port" --dir "$DIR/redis" \
			--save '' --appendonly no --protected-mode no --daemonize no \
			</dev/null >"$DIR/redis.log" 2>&1 &
		pid=$!
		for ((tenths = 0; tenths < READY_TENTHS; tenths++)); do
			if redis_is "$port" "$pid"; then
				echo "$pid" >"$DIR/redis.pid"
				echo "$port" >"$DIR/redis.port"
				watch redis "$OWNER" "$pid" - "$DIR/redis"
				echo "$port"
				return 0
			fi
			alive "$pid" || break
			sleep 0.1
		done
		if alive "$pid"; then
			kill -KILL "$pid"
			show_log "$DIR/redis.log"
			die "redis-server on port $port not ready after $((READY_TENTHS / 10)) s"
		fi
		wait "$pid" || true
		grep -q 'Address already in use' "$DIR/redis.log" || { show_log "$DIR/redis.log"; die "redis-server exited"; }
		log "port $port was taken; trying another"
	done
	die "redis-server: no free port after $PORT_TRIES tries"
}

# pg_ready DATA PORT: postmaster.pid of DATA says it is ready on PORT.
pg_ready() {
	local f=$1/postmaster.pid lines
	[[ -r $f ]] || return 1
	mapfile -t lines <"$f"
	[[ ${#lines[@]} -ge 8 && ${lines[3]} == "$2" && ${lines[7]// /} == ready ]]
}

start_postgres() {
	local initdb postgres pg_isready base run=() port runner tenths postmaster
	initdb=$(tool_path initdb)
	postgres=$(tool_path postgres)
	pg_isready=$(tool_path pg_isready)
	# Its own directory, not under DIR: as root, postgres must be able to
	# reach it, and a test's temporary directory is private to root.
	base=$(mktemp -d "${TMPDIR:-/tmp}/monolock-pg.XXXXXX")
	echo "$base" >"$DIR/postgres.base"
	if [[ $(id -u) == 0 ]]; then
		id postgres >/dev/null 2>&1 || die "no user postgres to run PostgreSQL as (it refuses root); reinstall postgresql-15"
		chown postgres "$base"
		run=(runuser -u postgres --)
	fi
	if ! "${run[@]}" "$initdb" -D "$base/data" -A trust -U postgres -E UTF8 --no-locale \
		--no-sync --no-instructions </dev/null >"$DIR/postgres-initdb.log" 2>&1; then
		show_log "$DIR/postgres-initdb.log"
		rm -rf "$base"
		die "initdb failed"
	fi
	for _ in $(seq 1 $PORT_TRIES); do
		port=$(free_port)
		# TCP on loopback only, no Unix socket; durability is not wanted.
		"${run[@]}" "$postgres" -D "$base/data" -p "$port" \
			-c listen_addresses=127.0.0.1 -c unix_socket_directories= \
			-c fsync=off -c synchronous_commit=off -c full_page_writes=off \
			</dev/null >"$DIR/postgres.log" 2>&1 &
		runner=$!
		for ((tenths = 0; tenths < READY_TENTHS; tenths++)); do
			if pg_ready "$base/data" "$port" && "$pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres; then
				postmaster=$(head -n 1 "$base/data/postmaster.pid")
				echo "$postmaster" >"$DIR/postgres.pid"
				echo "$runner" >"$DIR/postgres.runner"
				echo "$port" >"$DIR/postgres.port"
				watch postgres "$OWNER" "$postmaster" "$runner" "$base"
				echo "$port"
				return 0
			fi
			alive "$runner" || break
			sleep 0.1
		done
		if alive "$runner"; then
			[[ -r $base/data/postmaster.pid ]] && kill -KILL "$(head -n 1 "$base/data/postmaster.pid")" 2>/dev/null
			kill -KILL "$runner" 2>/dev/null || true
			wait "$runner" || true
			show_log "$DIR/postgres.log"
			rm -rf "$base"
			die "postgres on port $port not ready after $((READY_TENTHS / 10)) s"
		fi
		wait "$runner" || true
		if ! grep -q 'could not bind' "$DIR/postgres.log"; then
			show_log "$DIR/postgres.log"
			rm -rf "$base"
			die "postgres exited"
		fi
		log "port $port was taken; trying another"
	done
	rm -rf "$base"
	die "postgres: no free port after $PORT_TRIES tries"
}

# wait_gone PID TENTHS: wait up to TENTHS tenths of a second for PID to end.
wait_gone() {
	local tenths
	for ((tenths = 0; tenths < $2; tenths++)); do
		alive "$1" || return 0
		sleep 0.1
	done
	! alive "$1"
}

# halt NAME PID RUNNER BASE: end service NAME, process PID (started
# through process RUNNER, or "-"), and remove its directory BASE.
halt() {
	local name=$1 pid=$2 runner=$3 base=$4
	case $name in
	redis)
		kill -TERM "$pid" 2>/dev/null || true
		wait_gone "$pid" 100 || kill -KILL "$pid" 2>/dev/null || true
		;;
	postgres)
		# SIGINT is PostgreSQL's fast shutdown: it does not wait for clients.
		kill -INT "$pid" 2>/dev/null || true
		wait_gone "$pid" 150 || kill -KILL "$pid" 2>/dev/null || true
		;;
	esac
	wait_gone "$pid" 50 || true
	[[ $runner == - ]] || wait_gone "$runner" 50 || true
	rm -rf "$base"
}

# stop_service NAME stops NAME of DIR, if it runs, and removes its files.
stop_service() {
	local name=$1 f runner=- base
	[[ -e $DIR/$name.pid ]] || return 0
	f=$DIR/$name.watcher
	[[ -e $f ]] && { kill -TERM "$(cat "$f")" 2>/dev/null || true; }
	[[ -e $DIR/$name.runner ]] && runner=$(cat "$DIR/$name.runner")
	case $name in
	redis) base=$DIR/redis ;;
	postgres) base=$(cat "$DIR/postgres.base") ;;
	esac
	halt "$name" "$(cat "$DIR/$name.pid")" "$runner" "$base"
	rm -f "$DIR/$name".{pid,port,runner,base,watcher}
	log "$name stopped"
}

usage() { echo "usage: $0 start redis|postgres DIR [OWNER_PID] | stop DIR" >&2; exit 2; }

case ${1:-} in
start)
	[[ $# == 3 || $# == 4 ]] || usage
	DIR=$3
	[[ -d $DIR ]] || die "no directory $DIR"
	DIR=$(cd "$DIR" && pwd)
	OWNER=${4:-$PPID}
	[[ $OWNER =~ ^[0-9]+$ ]] && alive "$OWNER" || die "no running process $OWNER to stop the service with"
	[[ ! -e $DIR/$2.pid ]] || die "$2 already started under $DIR"
	case $2 in
	redis) start_redis ;;
	postgres) start_postgres ;;
	*) usage ;;
	esac
	;;
stop)
	[[ $# == 2 ]] || usage
	DIR=$2
	[[ -d $DIR ]] || exit 0
	DIR=$(cd "$DIR" && pwd)
	stop_service redis
	stop_service postgres
	;;
*) usage ;;
esac
