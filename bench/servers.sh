# Sourced by bench/peers.sh, bench/sdk.sh and bench/gateway.sh: installing
# Redis and NATS, and starting and stopping the broker, redis-server and
# nats-server on private loopback ports. The caller sets `name` (for
# messages) before sourcing it; sourcing makes `tmp` (a temporary directory
# for the broker binary `$tmp/queen`, the logs and the stores) and traps
# EXIT to stop every process started here and remove `tmp`.
#
# Every process started here is recorded in `pids` and `started_pid` is the
# last one; stop_all stops exactly those, by PID.

tmp=$(mktemp -d)
cleanup() {
	stop_all
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

find_nats() { command -v nats-server || { [ -x /usr/sbin/nats-server ] && echo /usr/sbin/nats-server; } || true; }

# install_peers installs redis-server and nats-server from Debian's packages
# when missing (needs root) and sets NATS_SERVER.
install_peers() {
	local missing=()
	command -v redis-server >/dev/null || missing+=(redis-server)
	[ -n "$(find_nats)" ] || missing+=(nats-server)
	if [ ${#missing[@]} -gt 0 ]; then
		if [ "$(id -u)" != 0 ]; then
			echo "$name: ${missing[*]} missing; install them (apt-get install ${missing[*]}) or run as root" >&2
			exit 1
		fi
		echo "== installing ${missing[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
	NATS_SERVER=$(find_nats)
}

pids=()
started_pid=
stop_all() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	pids=()
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
	local i
	for i in $(seq 100); do
		port_busy "$1" && return 0
		sleep 0.1
	done
	echo "$name: nothing answers on port $1; logs in $tmp:" >&2
	tail -n 20 "$tmp"/*.log >&2 || true
	return 1
}
port_free() {
	if port_busy "$1"; then
		echo "$name: port $1 is taken; set BROKER_PORT, REDIS_PORT or NATS_PORT" >&2
		exit 1
	fi
}

# free_port PORT: PORT, or the first port after it that nothing listens on
# (the machine may be shared with other benchmarks).
free_port() {
	local p=$1
	while port_busy "$p"; do
		p=$((p + 1))
		if [ "$p" -ge $(($1 + 100)) ]; then
			echo "$name: ports $1 to $p are all taken" >&2
			exit 1
		fi
	done
	echo "$p"
}

# start_broker PORT [VAR=value ...]: a fresh broker, embedded store in a new
# directory, the extra environment variables given; on the CPUs listed in
# broker_cpus (taskset -c) when the caller set it.
start_broker() {
	local port=$1
	shift
	port_free "$port"
	rm -rf "$tmp/data"
	# shellcheck disable=SC2086 # broker_cpus is one word when set
	${broker_cpus:+taskset -c $broker_cpus} env HOST=127.0.0.1 PORT="$port" QUEEN_DATA_DIR="$tmp/data" QUEEN_LOG_LEVEL=warn "$@" \
		"$tmp/queen" >>"$tmp/queen.log" 2>&1 &
	started_pid=$!
	pids+=("$started_pid")
}

# start_redis PORT: no persistence, room for a connection per parked waiter.
start_redis() {
	port_free "$1"
	redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no \
		--maxclients 30000 --dir "$tmp" --logfile "$tmp/redis.log" &
	started_pid=$!
	pids+=("$started_pid")
}

# start_nats PORT [-js]: JetStream (with -js) keeps its store in a new
# temporary directory.
start_nats() {
	port_free "$1"
	rm -rf "$tmp/nats"
	if [ "${2:-}" = -js ]; then
		"$NATS_SERVER" -a 127.0.0.1 -p "$1" -js -sd "$tmp/nats" -l "$tmp/nats.log" &
	else
		"$NATS_SERVER" -a 127.0.0.1 -p "$1" -l "$tmp/nats.log" &
	fi
	started_pid=$!
	pids+=("$started_pid")
}
