#!/usr/bin/env bash
# Runs gotp's benchmarks for BENCHMARKS.md, each family beside its baseline,
# COUNT times (default 5), and prints benchstat medians. With ANCHORS=1 it
# first reruns the Erlang/Elixir anchors of docs/bench/beam in the same
# sitting (needs erlang-nox and elixir from apt).
#
#   scripts/bench.sh                 # gotp only
#   ANCHORS=1 COUNT=5 scripts/bench.sh
#
# Raw outputs go to bench/results/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${COUNT:-5}
OUT=bench/results
mkdir -p "$OUT"
export PATH="$PATH:$(go env GOPATH)/bin"
command -v benchstat >/dev/null || go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

if [ "${ANCHORS:-0}" = 1 ]; then
	ROUNDS=$COUNT OUT="$PWD/$OUT/beam" docs/bench/beam/run.sh | tee "$OUT/anchors.txt"
fi

run() { # name package pattern [benchtime]
	local name=$1 pkg=$2 pat=$3 bt=${4:-1s}
	echo "== $name ($pkg: $pat)"
	go test -run '^$' -bench "$pat" -benchtime "$bt" -count "$COUNT" -timeout 60m "$pkg" | tee "$OUT/$name.txt"
	benchstat "$OUT/$name.txt" | tee "$OUT/$name.stat"
}

run runtime . 'W6SpawnExit|W7|BaselineGoroutineSpawnExit|BaselineChannel'
run runtime-idle . 'Idle' 1x
run server ./server 'Call'
run supervisor ./supervisor 'W8' 1x
run registry ./registry 'W[1-4]' 1x
run pg ./pg '^BenchmarkW5PG(Join|Broadcast|BroadcastReceiveLoop)$' 3x
run pg-joincost ./pg 'W5PGJoinCost'
run cluster-c1 ./cluster 'C1' 2s
run cluster-c2 ./cluster 'C2' 10x
