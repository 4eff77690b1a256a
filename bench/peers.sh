#!/usr/bin/env bash
# make bench-peers: every scenario against the broker, Redis and NATS in one
# run, on private loopback ports, and one table with the ratios broker/peer
# (table.txt) and a chart of request/reply (chart.svg).
#
# Installs redis-server and nats-server from Debian's packages when missing
# (needs root). For each scenario it starts a fresh broker, redis-server
# (--save '' --appendonly no) and nats-server (-js, a temporary store
# directory; the stream itself uses memory storage), runs the scenario
# against the three, and stops exactly the processes it started, so the
# memory scenarios measure processes that nothing else has grown.
#
# The host is shared, so one run of a target can land on a slow moment:
# each scenario runs ROUNDS times (fresh processes each round, the targets'
# order rotated), and the table gives each figure's median.
#
# Knobs (environment): D (measured duration per run, 5s), ROUNDS (3), SCENARIOS, OUT (result
# directory), BROKER_PORT, REDIS_PORT, NATS_PORT, INBOX_IDLE_S (the broker's
# QUEEN_EPHEMERAL_IMPLICIT_IDLE_S, 5, so the inboxes scenario sees
# collection), QUEENBENCH_FLAGS (passed on, e.g. "-c 64").
set -euo pipefail
cd "$(dirname "$0")/.."

D=${D:-5s}
ROUNDS=${ROUNDS:-3}
SCENARIOS=${SCENARIOS:-reqreply throughput fanout inboxes parked idle}
BROKER_PORT=${BROKER_PORT:-16632}
REDIS_PORT=${REDIS_PORT:-16379}
NATS_PORT=${NATS_PORT:-14222}
INBOX_IDLE_S=${INBOX_IDLE_S:-5}
OUT=${OUT:-bench/results/$(date -u +%Y%m%dT%H%M%SZ)}
QUEENBENCH_FLAGS=${QUEENBENCH_FLAGS:-}

name=bench-peers
# shellcheck source=bench/servers.sh
. bench/servers.sh # sets tmp, and stops what it started on exit
install_peers

start_all() {
	start_broker "$BROKER_PORT" QUEEN_EPHEMERAL_IMPLICIT_IDLE_S="$INBOX_IDLE_S"
	start_redis "$REDIS_PORT"
	start_nats "$NATS_PORT" -js
	wait_port "$BROKER_PORT"
	wait_port "$REDIS_PORT"
	wait_port "$NATS_PORT"
}

echo "== building the broker and queenbench"
go build -o "$tmp/queen" ./cmd/queen
(cd bench && go build -o "$tmp/queenbench" ./cmd/queenbench) # bench/ is a module of its own
mkdir -p "$OUT"
echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== redis $(redis-server --version | awk '{print $3}'), nats-server $("$NATS_SERVER" --version | awk '{print $2}')"

status=0
orders=(broker,redis,nats redis,nats,broker nats,broker,redis)
for s in $SCENARIOS; do
	for round in $(seq "$ROUNDS"); do
		order=${orders[$(((round - 1) % 3))]}
		echo "== $s, round $round of $ROUNDS ($order; fresh processes)"
		start_all
		# shellcheck disable=SC2086 # QUEENBENCH_FLAGS is a list of flags
		"$tmp/queenbench" -scenario "$s" -target "$order" -d "$D" \
			-broker-addr "127.0.0.1:$BROKER_PORT" -redis-addr "127.0.0.1:$REDIS_PORT" -nats-addr "127.0.0.1:$NATS_PORT" \
			-out "$OUT/$s-$round.json" $QUEENBENCH_FLAGS >"$OUT/$s-$round.txt" || status=1
		cat "$OUT/$s-$round.txt"
		stop_all
	done
done

echo
echo "== all scenarios (results in $OUT)"
files=("$OUT"/*.json)
svg=()
case " $SCENARIOS " in *" reqreply "*) svg=(-svg "$OUT/chart.svg") ;; esac # the chart is request/reply's
"$tmp/queenbench" -table "${svg[@]}" "${files[@]}" | tee "$OUT/table.txt"
echo "load after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
