#!/usr/bin/env bash
# make bench-compare REV=<revision>: the micro-benchmarks of PKGS (engine,
# arena, wire) in the working tree against those of REV, with benchstat.
#
# REV is checked out with `git worktree add` into a temporary directory
# (removed at the end). Each package's test binary is built once per tree,
# then old and new run alternately COUNT times (-count 1 each), so a drift
# of the machine's load hits both sides alike. A package REV lacks is
# compared against nothing.
#
# Knobs: REV (required), COUNT (10), BENCH (regexp, .), BENCHTIME (1s), PKGS.
set -euo pipefail
cd "$(dirname "$0")/.."

REV=${REV:?set REV, e.g. make bench-compare REV=HEAD~1}
COUNT=${COUNT:-10}
BENCH=${BENCH:-.}
BENCHTIME=${BENCHTIME:-1s}
PKGS=${PKGS:-./engine ./arena ./wire}

root=$(pwd)
tmp=$(mktemp -d)
cleanup() {
	git -C "$root" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true
	git -C "$root" worktree prune >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

rev=$(git rev-parse --verify "$REV^{commit}")
echo "== $REV is $rev; working tree: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo ' + uncommitted changes')"
git worktree add --detach "$tmp/old" "$rev" >/dev/null 2>&1

# build TREE SIDE: a test binary per package into $tmp/SIDE/
build() {
	local tree=$1 side=$2 pkg name
	mkdir -p "$tmp/$side"
	for pkg in $PKGS; do
		name=$(echo "$pkg" | tr -c 'a-zA-Z0-9\n' _)
		if [ -d "$tree/$pkg" ]; then
			(cd "$tree" && go test -c -o "$tmp/$side/$name.test" "$pkg")
		else
			echo "   ($side has no $pkg)"
		fi
	done
}
echo "== building test binaries"
build "$tmp/old" old
build "$root" new

# run TREE SIDE: one pass of every benchmark, appended to $tmp/SIDE.txt
run() {
	local tree=$1 side=$2 pkg name
	for pkg in $PKGS; do
		name=$(echo "$pkg" | tr -c 'a-zA-Z0-9\n' _)
		[ -x "$tmp/$side/$name.test" ] || continue
		(cd "$tree/$pkg" && "$tmp/$side/$name.test" -test.run '^$' -test.bench "$BENCH" \
			-test.benchmem -test.benchtime "$BENCHTIME" -test.count 1) >>"$tmp/$side.txt"
	done
}
for i in $(seq "$COUNT"); do
	echo "== pass $i of $COUNT"
	run "$tmp/old" old
	run "$root" new
done
go run golang.org/x/perf/cmd/benchstat@latest "old=$tmp/old.txt" "new=$tmp/new.txt"
