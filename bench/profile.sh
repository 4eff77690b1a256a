#!/usr/bin/env bash
# make profile: run one scenario against a broker started with
# QUEEN_PPROF_ADDR and save its CPU, heap, allocs, mutex and block profiles
# under profiles/SCENARIO/ (open one with `go tool pprof -http=: FILE`),
# with the top entries of each as text beside them.
#
# Knobs: SCENARIO (reqreply), PROFILE_SECONDS (15: the CPU profile's length;
# the load runs a little longer), BROKER_PORT (16632), PPROF_PORT (16060),
# QUEENBENCH_FLAGS (passed on), OUT (profiles).
set -euo pipefail
cd "$(dirname "$0")/.."

SCENARIO=${SCENARIO:-reqreply}
PROFILE_SECONDS=${PROFILE_SECONDS:-15}
BROKER_PORT=${BROKER_PORT:-16632}
PPROF_PORT=${PPROF_PORT:-16060}
QUEENBENCH_FLAGS=${QUEENBENCH_FLAGS:-}
OUT=${OUT:-profiles}/$SCENARIO

command -v curl >/dev/null || { echo "profile: needs curl" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "$BROKER_PORT" "$PPROF_PORT"; do
	if port_busy "$p"; then echo "profile: port $p is taken; set BROKER_PORT or PPROF_PORT" >&2; exit 1; fi
done

go build -o "$tmp/queen" ./cmd/queen
(cd bench && go build -o "$tmp/queenbench" ./cmd/queenbench) # bench/ is a module of its own
HOST=127.0.0.1 PORT=$BROKER_PORT QUEEN_DATA_DIR="$tmp/data" QUEEN_LOG_LEVEL=warn \
	QUEEN_EPHEMERAL_IMPLICIT_IDLE_S=5 QUEEN_PPROF_ADDR="127.0.0.1:$PPROF_PORT" "$tmp/queen" &
pids+=($!)
for i in $(seq 100); do port_busy "$BROKER_PORT" && port_busy "$PPROF_PORT" && break; sleep 0.1; done

mkdir -p "$OUT"
pprof="http://127.0.0.1:$PPROF_PORT/debug/pprof"
echo "== $SCENARIO against the broker, CPU profile over ${PROFILE_SECONDS}s"
# shellcheck disable=SC2086 # QUEENBENCH_FLAGS is a list of flags
"$tmp/queenbench" -scenario "$SCENARIO" -addr "127.0.0.1:$BROKER_PORT" -warmup 2s \
	-d "$((PROFILE_SECONDS + 2))s" -out "$OUT/run.json" $QUEENBENCH_FLAGS >"$OUT/run.txt" &
bench=$!
sleep 2
curl -fsS -o "$OUT/cpu.pb.gz" "$pprof/profile?seconds=$PROFILE_SECONDS"
for p in heap allocs mutex block; do
	curl -fsS -o "$OUT/$p.pb.gz" "$pprof/$p"
done
wait "$bench"
cat "$OUT/run.txt"

for p in cpu heap allocs mutex block; do
	case $p in
	heap) idx=-sample_index=inuse_space ;;
	allocs) idx=-sample_index=alloc_space ;;
	*) idx= ;;
	esac
	go tool pprof -top -nodecount=20 $idx "$OUT/$p.pb.gz" >"$OUT/$p.top.txt" 2>/dev/null || true
done
echo "== saved in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
echo "   open one with: go tool pprof -http=: $OUT/cpu.pb.gz"
head -n 16 "$OUT/cpu.top.txt"
