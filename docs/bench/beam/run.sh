#!/bin/bash
# Run every BEAM anchor script ROUNDS times, one round after another (so
# that drift in the machine's speed spreads over all of them), and print the
# median of each figure. Raw outputs go to OUT, one file per script and round.
#
#   docs/bench/beam/run.sh                 # 5 rounds, about 3 minutes
#   ROUNDS=3 OUT=/tmp/beam docs/bench/beam/run.sh
#   GOTP_BENCH_SCALE=0.001 ROUNDS=1 docs/bench/beam/run.sh   # a quick check
#
# Needs Elixir and Erlang/OTP (apt-get install elixir erlang-nox). To compare
# with gotp, run docs/bench/quiet-sitting.sh instead: it interleaves these
# scripts with gotp's benchmarks.
set -euo pipefail
cd "$(dirname "$0")"
ROUNDS=${ROUNDS:-5}
OUT=${OUT:-${TMPDIR:-/tmp}/gotp-beam}
mkdir -p "$OUT"
scripts="w1_w2_registry_unique w3_registry_duplicate_dispatch w4_registry_cleanup w5_pg_join_broadcast w6_spawn w7_messaging w8_supervisor"
for r in $(seq 1 "$ROUNDS"); do
	for s in $scripts; do
		flags=()
		case $s in w4_* | w6_*) flags=(--erl '+P 2000000') ;; esac
		elixir "${flags[@]}" "$s.exs" >"$OUT/${s}_$r.txt" 2>&1
		echo "round $r: $s done"
	done
done
python3 medians.py "$OUT"
