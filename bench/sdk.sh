#!/usr/bin/env bash
# make bench-sdk: request/reply through the clients a user has, in one run and
# one table: our JS SDK (queen-mq) against nats.js and ioredis, and
# our Go SDK (package client) against nats.go and go-redis; for reference, the
# broker through a plain undici Pool (JS) and through the bench's raw HTTP
# client (Go). Same shape everywhere: 32
# requesters, 4 responders, 64 B payloads, a fresh reply address per request.
#
# Installs redis-server and nats-server from Debian's packages when missing
# (needs root, as bench-peers), the JavaScript clients from npm into
# bench/sdk/node_modules (npm ci against the committed package-lock.json;
# queen-mq is copied from clients/js as it is now), builds the broker and
# queenbench, and for every client of every round starts a fresh server of
# the kind the client talks to, on a free private loopback port, runs the client
# against it, and stops exactly the process it started. Only one server and
# one client run at a time.
#
# Each client runs ROUNDS times, the order rotated between rounds; the table
# gives each figure's median, and the goals met or missed (table.md); chart.svg
# draws its round trips/s and CPU per round trip, ours against the peers'.
#
# Knobs (environment): D (measured seconds per run, 5), WARMUP (seconds, 1),
# ROUNDS (3), CLIENTS (a subset of: js-queen js-nats js-ioredis js-undici go-sdk go-sdk-http
# go-raw go-nats go-redis), OUT (result directory, bench/results/<UTC time>-sdk),
# BROKER_PORT (19632), REDIS_PORT (19379), NATS_PORT (19222; each the first of
# the ports tried: a taken one is skipped for the next), BROKER_ENV (extra
# VAR=value for the broker), QUEENBENCH_FLAGS and NODE_FLAGS (passed on).
set -euo pipefail
cd "$(dirname "$0")/.."

D=${D:-5}
D=${D%s} # "5s" works too
WARMUP=${WARMUP:-1}
WARMUP=${WARMUP%s}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-js-queen js-nats js-ioredis js-undici go-sdk go-nats go-redis go-raw}
BROKER_PORT=${BROKER_PORT:-19632}
REDIS_PORT=${REDIS_PORT:-19379}
NATS_PORT=${NATS_PORT:-19222}
BROKER_ENV=${BROKER_ENV:-}
OUT=${OUT:-bench/results/$(date -u +%Y%m%dT%H%M%SZ)-sdk}
QUEENBENCH_FLAGS=${QUEENBENCH_FLAGS:-}
NODE_FLAGS=${NODE_FLAGS:-}

name=bench-sdk
# shellcheck source=bench/servers.sh
. bench/servers.sh # sets tmp, and stops what it started on exit

for c in $CLIENTS; do
	case $c in
	js-queen | js-nats | js-ioredis | js-undici | go-sdk | go-sdk-http | go-raw | go-nats | go-redis) ;;
	*)
		echo "$name: unknown client $c (js-queen js-nats js-ioredis js-undici go-sdk go-sdk-http go-raw go-nats go-redis)" >&2
		exit 2
		;;
	esac
done
install_peers
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "$name: node and npm are needed for the JavaScript clients (Node 20.3 or later)" >&2
	exit 1
fi

echo "== installing the JavaScript clients (bench/sdk)"
(
	cd bench/sdk
	npm ci --no-audit --no-fund --loglevel=error
	# npm ci trusts the lock file for queen-mq's own dependencies; installing
	# it again from clients/js picks up a dependency added there since.
	npm install --no-audit --no-fund --loglevel=error queen-mq@file:../../clients/js
)
# The copy is what `npm pack` of clients/js holds: a module missing from its
# package.json "files" is missing here too (and from the published package).
if ! (cd bench/sdk && node -e "import('queen-mq').catch(e => { console.error(e.message); process.exit(1) })"); then
	echo "$name: queen-mq, as packed from clients/js, does not load; does clients/js/package.json \"files\" list every module it imports?" >&2
	exit 1
fi
if ! git diff --quiet -- bench/sdk/package-lock.json 2>/dev/null; then
	echo "$name: note: bench/sdk/package-lock.json changed (clients/js's dependencies did); commit it" >&2
fi

echo "== building the broker and queenbench"
go build -o "$tmp/queen" ./cmd/queen
(cd bench && go build -o "$tmp/queenbench" ./cmd/queenbench) # bench/ is a module of its own
mkdir -p "$OUT"
echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== node $(node --version), nats.js $(node -p "require('./bench/sdk/node_modules/nats/package.json').version"), ioredis $(node -p "require('./bench/sdk/node_modules/ioredis/package.json').version"); redis $(redis-server --version | awk '{print $3}'), nats-server $("$NATS_SERVER" --version | awk '{print $2}')"
echo "== D=${D}s, warmup ${WARMUP}s, $ROUNDS rounds; results in $OUT"

# serve KIND: a fresh server for the client; sets addr and started_pid.
serve() {
	local port
	case $1 in
	broker)
		port=$(free_port "$BROKER_PORT")
		# shellcheck disable=SC2086 # BROKER_ENV is a list of VAR=value
		start_broker "$port" $BROKER_ENV
		;;
	redis)
		port=$(free_port "$REDIS_PORT")
		start_redis "$port"
		;;
	nats)
		port=$(free_port "$NATS_PORT")
		start_nats "$port"
		;;
	esac
	addr=127.0.0.1:$port
	wait_port "$port"
}

# run CLIENT ROUND: one run, its result in $OUT/CLIENT-ROUND.json.
run() {
	local c=$1 round=$2 kind js="" go_target="" go_flags=""
	case $c in
	js-queen) kind=broker js=queen ;;
	js-nats) kind=nats js=nats ;;
	js-ioredis) kind=redis js=ioredis ;;
	js-undici) kind=broker js=undici ;;
	go-sdk) kind=broker go_target=broker go_flags="-client sdk" ;;
	go-sdk-http) kind=broker go_target=broker go_flags="-client sdk-http" ;;
	go-raw) kind=broker go_target=broker go_flags="-client raw" ;;
	go-nats) kind=nats go_target=nats ;;
	go-redis) kind=redis go_target=redis ;;
	esac
	serve "$kind"
	local out="$OUT/$c-$round" ok=0
	if [ -n "$js" ]; then
		# shellcheck disable=SC2086 # NODE_FLAGS is a list of flags
		node $NODE_FLAGS bench/sdk/reqreply.mjs --target "$js" --addr "$addr" --pid "$started_pid" \
			--d "$D" --warmup "$WARMUP" --quiet >"$out.json" 2>"$out.err" || ok=$?
	else
		# shellcheck disable=SC2086 # go_flags and QUEENBENCH_FLAGS are lists of flags
		"$tmp/queenbench" -q -scenario reqreply -inbox request -target "$go_target" $go_flags \
			-addr "$addr" -pid "$started_pid" -d "${D}s" -warmup "${WARMUP}s" \
			-out "$out.json" $QUEENBENCH_FLAGS >"$out.txt" 2>"$out.err" || ok=$?
	fi
	stop_all
	if [ "$ok" != 0 ]; then
		echo "   $c: FAILED (exit $ok); $(tail -n 3 "$out.err" | tr '\n' ' ')"
		status=1
	fi
	"$tmp/queenbench" -sdk-table "$out.json" 2>/dev/null | sed -n 3p | sed 's/^/   /' || true
	[ -s "$out.err" ] || rm -f "$out.err"
}

status=0
read -ra clients <<<"$CLIENTS"
n=${#clients[@]}
for round in $(seq "$ROUNDS"); do
	# Rotate the order: each round starts its own way into the list, so no
	# client always runs first (or right after another).
	shift_by=$((((round - 1) * n / ROUNDS) % n))
	order=("${clients[@]:shift_by}" "${clients[@]:0:shift_by}")
	echo "== round $round of $ROUNDS: ${order[*]} (a fresh server per client)"
	for c in "${order[@]}"; do
		run "$c" "$round"
	done
done

echo
echo "== request/reply through each language's clients, medians of $ROUNDS rounds (results in $OUT)"
"$tmp/queenbench" -sdk-table -svg "$OUT/chart.svg" "$OUT"/*.json | tee "$OUT/table.md"
echo "load after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
