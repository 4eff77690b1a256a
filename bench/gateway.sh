#!/usr/bin/env bash
# make bench-gateway: request/reply and batched throughput through the
# multi-tenant gateway against the broker directly, in one run and one table
# (docs/gateway.md; BENCHMARKS.md, "The gateway against the broker
# directly").
#
# Both paths carry the same JWT: "direct" is a broker in jwt mode verifying
# it itself; "gateway" is a gateway verifying it (plan gate, allowance, rate,
# slots and metering on, every limit unlimited) in front of a broker in
# gateway mode with a grant for the tenant. Each run starts fresh processes
# on private loopback ports and stops exactly those; the paths alternate
# within a round and swap order between rounds. queenbench measures the
# target's CPU over the window and, through the gateway, the broker's behind
# it (-behind-pid), so one run gives both hops' cost per operation.
#
# Paths: direct; gateway, the gateway as it ships (push, pop and ack on its
# link to the broker, docs/gateway.md); gateway-http, the same gateway with
# QUEEN_GATEWAY_LINK=false (every request on HTTP connections).
#
# Scenarios: reqreply (32 requesters, 4 responders: the machine loaded, so
# its p50 is mostly queueing for CPU), reqreply-1 (one requester and one
# responder: nothing waits for a core, so the p50 is the transport time a
# hop adds) and throughput (batches of 100).
#
# PIN=1 gives the gateway a core of its own (taskset: the broker and the load
# tool on CPU 0, the gateway on CPU 1, on both paths), as a gateway on a
# host of its own would have: the hop's cost without the gateway taking
# cycles from the broker and the load tool. Unpinned, all three share the
# machine's cores.
#
# Knobs (environment): SCENARIOS ("reqreply reqreply-1 throughput"), PATHS
# ("direct gateway gateway-http"),
# ROUNDS (3), D (measured seconds per run, 5), WARMUP (1), OUT (result
# directory, bench/results/<UTC time>-gateway), BROKER_PORT (19640),
# GATEWAY_PORT (19630; each the first port tried), BROKER_ENV and
# GATEWAY_ENV (extra VAR=value), QUEENBENCH_FLAGS (passed on), PIN (0),
# BROKER_BIN (a broker binary to run instead of building ./cmd/queen),
# GATEWAY_BIN (likewise, instead of building ./cmd/queen-gateway).
set -euo pipefail
cd "$(dirname "$0")/.."

SCENARIOS=${SCENARIOS:-reqreply reqreply-1 throughput}
PATHS=${PATHS:-direct gateway gateway-http}
ROUNDS=${ROUNDS:-3}
D=${D:-5}
D=${D%s}
WARMUP=${WARMUP:-1}
WARMUP=${WARMUP%s}
BROKER_PORT=${BROKER_PORT:-19640}
GATEWAY_PORT=${GATEWAY_PORT:-19630}
BROKER_ENV=${BROKER_ENV:-}
GATEWAY_ENV=${GATEWAY_ENV:-}
QUEENBENCH_FLAGS=${QUEENBENCH_FLAGS:-}
BROKER_BIN=${BROKER_BIN:-}
GATEWAY_BIN=${GATEWAY_BIN:-}
PIN=${PIN:-0}
suffix=-gateway
[ "$PIN" = 1 ] && suffix=-gateway-pinned
OUT=${OUT:-bench/results/$(date -u +%Y%m%dT%H%M%SZ)$suffix}

name=bench-gateway
# shellcheck source=bench/servers.sh
. bench/servers.sh # sets tmp, and stops what it started on exit

load_wrap=() gateway_wrap=()
if [ "$PIN" = 1 ]; then
	[ "$(nproc)" -ge 2 ] || {
		echo "$name: PIN=1 needs two CPUs" >&2
		exit 1
	}
	broker_cpus=0 # start_broker (servers.sh)
	load_wrap=(taskset -c 0)
	gateway_wrap=(taskset -c 1)
fi

command -v curl >/dev/null || {
	echo "$name: curl is needed for the admin calls" >&2
	exit 1
}

echo "== building the broker, the gateway and queenbench"
if [ -n "$BROKER_BIN" ]; then
	cp "$BROKER_BIN" "$tmp/queen" # another build's broker, for an A/B of a broker change
else
	go build -o "$tmp/queen" ./cmd/queen
fi
if [ -n "$GATEWAY_BIN" ]; then
	cp "$GATEWAY_BIN" "$tmp/queen-gateway" # another build's gateway, for an A/B of a gateway change
else
	go build -o "$tmp/queen-gateway" ./cmd/queen-gateway
fi
(cd bench && go build -o "$tmp/queenbench" ./cmd/queenbench) # bench/ is a module of its own
mkdir -p "$OUT"

secret() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
jwt_secret=$(secret)
gateway_secret=$(secret)
admin_token=$(secret)
tenant=bench
client_token=$("$tmp/queenbench" -mint-token -jwt-secret "$jwt_secret" -jwt-tenant "$tenant" -jwt-role read-write)
ops_token=$("$tmp/queenbench" -mint-token -jwt-secret "$jwt_secret" -jwt-tenant ops -jwt-role admin)

echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== ${SCENARIOS// /, }; D=${D}s, warmup ${WARMUP}s, $ROUNDS rounds$([ "$PIN" = 1 ] && echo "; pinned: broker and load tool on CPU 0, gateway on CPU 1"); results in $OUT"

# admin METHOD URL TOKEN BODY: an admin call that must answer 2xx.
admin() {
	curl -fsS -o /dev/null -X "$1" -H "Authorization: Bearer $3" -H 'Content-Type: application/json' -d "$4" "$2" || {
		echo "$name: $1 $2 failed; logs in $tmp:" >&2
		tail -n 20 "$tmp"/*.log >&2 || true
		return 1
	}
}

# start_gateway PORT UPSTREAM [VAR=value...]: a fresh gateway, its embedded
# catalog in a new directory.
start_gateway() {
	local port=$1 upstream=$2
	shift 2
	port_free "$port"
	rm -rf "$tmp/gateway-data"
	# shellcheck disable=SC2086 # GATEWAY_ENV is a list of VAR=value
	env HOST=127.0.0.1 PORT="$port" QUEEN_DATA_DIR="$tmp/gateway-data" QUEEN_LOG_LEVEL=warn \
		QUEEN_GATEWAY_UPSTREAMS="$upstream" QUEEN_GATEWAY_SECRET="$gateway_secret" \
		QUEEN_JWT_SECRET="$jwt_secret" QUEEN_OPERATOR_TENANT=ops "$@" $GATEWAY_ENV \
		"${gateway_wrap[@]}" "$tmp/queen-gateway" >>"$tmp/gateway.log" 2>&1 &
	started_pid=$!
	pids+=("$started_pid")
}

# run SCENARIO PATH ROUND: one run, its report in $OUT/SCENARIO-PATH-ROUND.json.
run() {
	local sc=$1 path=$2 round=$3 bport gport broker_pid target_pid addr behind=()
	bport=$(free_port "$BROKER_PORT")
	if [ "$path" = direct ]; then
		# shellcheck disable=SC2086 # BROKER_ENV is a list of VAR=value
		start_broker "$bport" QUEEN_AUTH_MODE=jwt QUEEN_JWT_SECRET="$jwt_secret" $BROKER_ENV
		wait_port "$bport"
		target_pid=$started_pid
		addr=127.0.0.1:$bport
	else
		# shellcheck disable=SC2086 # BROKER_ENV is a list of VAR=value
		start_broker "$bport" QUEEN_AUTH_MODE=gateway QUEEN_GATEWAY_SECRET="$gateway_secret" \
			QUEEN_ADMIN_TOKEN="$admin_token" $BROKER_ENV
		wait_port "$bport"
		broker_pid=$started_pid
		admin PUT "http://127.0.0.1:$bport/api/v1/system/ephemeral/grants/$tenant" "$admin_token" \
			'{"maxBytes":0,"maxQueues":0,"messagesPerSecond":0}'
		gport=$(free_port "$GATEWAY_PORT")
		local link=()
		[ "$path" = gateway-http ] && link=(QUEEN_GATEWAY_LINK=false)
		start_gateway "$gport" "http://127.0.0.1:$bport" "${link[@]}"
		wait_port "$gport"
		target_pid=$started_pid
		admin PUT "http://127.0.0.1:$gport/api/v1/gateway/plans/bench" "$ops_token" '{"features":{"ephemeral":true}}'
		admin PUT "http://127.0.0.1:$gport/api/v1/gateway/tenants/$tenant" "$ops_token" '{"plan":"bench"}'
		addr=127.0.0.1:$gport
		behind=(-behind-pid "$broker_pid")
	fi
	local out="$OUT/$sc-$path-$round" ok=0 flags=(-scenario "$sc")
	[ "$sc" = reqreply-1 ] && flags=(-scenario reqreply -c 1 -w 1)
	# shellcheck disable=SC2086 # QUEENBENCH_FLAGS is a list of flags
	"${load_wrap[@]}" "$tmp/queenbench" -q "${flags[@]}" -label "$path" -token "$client_token" -addr "$addr" \
		-pid "$target_pid" "${behind[@]}" -d "${D}s" -warmup "${WARMUP}s" \
		-out "$out.json" $QUEENBENCH_FLAGS >"$out.txt" 2>"$out.err" || ok=$?
	stop_all
	if [ "$ok" != 0 ]; then
		echo "   $sc $path: FAILED (exit $ok); $(tail -n 3 "$out.err" | tr '\n' ' ')"
		status=1
	fi
	sed -n '1,3p' "$out.txt" | sed "s/^/   $path: /"
	[ -s "$out.err" ] || rm -f "$out.err"
}

status=0
for round in $(seq "$ROUNDS"); do
	read -ra order <<<"$PATHS"
	if [ $((round % 2)) = 0 ]; then # the reverse order in even rounds
		rev=()
		for ((i = ${#order[@]} - 1; i >= 0; i--)); do rev+=("${order[i]}"); done
		order=("${rev[@]}")
	fi
	echo "== round $round of $ROUNDS: ${order[*]}"
	for sc in $SCENARIOS; do
		for path in "${order[@]}"; do
			run "$sc" "$path" "$round"
		done
	done
done

echo
echo "== through the gateway against the broker directly, medians of $ROUNDS rounds (results in $OUT)"
"$tmp/queenbench" -gateway-table "$OUT"/*.json | tee "$OUT/table.md"
echo "load after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
