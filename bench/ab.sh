#!/usr/bin/env bash
# make bench-ab: one scenario end to end against two brokers, A and B,
# alternating, a fresh process per run, so that a change (or a setting) is
# compared with what it replaces in the same conditions (P6). Where
# bench-compare times the micro-benchmarks, this times the whole broker.
#
#   make bench-ab                                  # HEAD against the working tree
#   make bench-ab REV_A=HEAD~3 SCENARIO=throughput
#   make bench-ab REV_A=. ENV_B=QUEEN_EVENT_LOOPS=1 # a setting, same build
#
# Knobs: SCENARIO (reqreply), ROUNDS (3), D (5s), REV_A (HEAD), REV_B (.,
# the working tree), ENV_A and ENV_B (space-separated VAR=value for that
# broker), PORT (16640), QUEENBENCH_FLAGS (passed on), OUT (result directory).
set -euo pipefail
cd "$(dirname "$0")/.."

SCENARIO=${SCENARIO:-reqreply}
ROUNDS=${ROUNDS:-3}
D=${D:-5s}
REV_A=${REV_A:-HEAD}
REV_B=${REV_B:-.}
ENV_A=${ENV_A:-}
ENV_B=${ENV_B:-}
PORT=${PORT:-16640}
QUEENBENCH_FLAGS=${QUEENBENCH_FLAGS:-}
OUT=${OUT:-bench/results/ab-$(date -u +%Y%m%dT%H%M%SZ)}

root=$(pwd)
tmp=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	for side in a b; do git -C "$root" worktree remove --force "$tmp/tree-$side" >/dev/null 2>&1 || true; done
	git -C "$root" worktree prune >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# build SIDE REV: the broker of REV ("." = the working tree) into $tmp/queen-SIDE.
build() {
	local side=$1 rev=$2 tree=$root
	if [ "$rev" != . ]; then
		tree=$tmp/tree-$side
		git worktree add --detach "$tree" "$(git rev-parse --verify "$rev^{commit}")" >/dev/null 2>&1
	fi
	(cd "$tree" && go build -o "$tmp/queen-$side" ./cmd/queen)
	echo "== $side: $rev ($(git -C "$tree" rev-parse --short HEAD)$([ "$rev" = . ] && ! git diff --quiet HEAD -- && echo ' + uncommitted changes'))${3:+, env $3}"
}
build a "$REV_A" "$ENV_A"
build b "$REV_B" "$ENV_B"
(cd bench && go build -o "$tmp/queenbench" ./cmd/queenbench) # bench/ is a module of its own
mkdir -p "$OUT"

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if port_busy "$PORT"; then echo "bench-ab: port $PORT is taken; set PORT" >&2; exit 1; fi

# run SIDE ROUND: a fresh broker, the scenario, its report.
run() {
	local side=$1 round=$2 envs i
	envs=$ENV_A
	[ "$side" = b ] && envs=$ENV_B
	rm -rf "$tmp/data"
	# shellcheck disable=SC2086 # envs is a list of VAR=value words
	env HOST=127.0.0.1 PORT="$PORT" QUEEN_DATA_DIR="$tmp/data" QUEEN_LOG_LEVEL=warn $envs \
		"$tmp/queen-$side" >>"$tmp/queen-$side.log" 2>&1 &
	pid=$!
	for i in $(seq 100); do port_busy "$PORT" && break; sleep 0.1; done
	# shellcheck disable=SC2086 # QUEENBENCH_FLAGS is a list of flags
	"$tmp/queenbench" -q -scenario "$SCENARIO" -addr "127.0.0.1:$PORT" -pid "$pid" -d "$D" \
		-out "$OUT/$side-$round.json" $QUEENBENCH_FLAGS >"$OUT/$side-$round.txt" 2>&1 || {
		cat "$OUT/$side-$round.txt" >&2
		return 1
	}
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
}

echo "== machine: $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg); $SCENARIO, $ROUNDS rounds of $D, A and B alternating"
for round in $(seq "$ROUNDS"); do
	run a "$round"
	run b "$round"
done

# One table per round, side by side: the tool's table puts one target per
# column, so each report is printed alone and its broker column kept.
for round in $(seq "$ROUNDS"); do
	echo
	echo "== round $round"
	paste <("$tmp/queenbench" -table "$OUT/a-$round.json" | awk -F'  +' 'NF>3 && $3!="" && $3!="figure" {print $3 "\t" $4}') \
		<("$tmp/queenbench" -table "$OUT/b-$round.json" | awk -F'  +' 'NF>3 && $3!="" && $3!="figure" {print $4}') |
		awk -F'\t' 'BEGIN {printf "%-44s %14s %14s\n", "figure", "A", "B"} {printf "%-44s %14s %14s\n", $1, $2, $3}'
done | tee "$OUT/table.txt"
