#!/bin/bash
# One quiet sitting of W1–W8: each round runs a BEAM anchor script
# (docs/bench/beam; Elixir and Erlang/OTP must be installed) and then the
# matching gotp benchmarks, so that drift in the machine's speed falls on
# both. Run it on an otherwise idle machine; results go to $OUT (default
# /tmp/sit), one file per script and round. Summarise with
# docs/bench/quiet-sitting.py. Five rounds take 7–10 minutes.
#
#   docs/bench/quiet-sitting.sh            # 3 rounds
#   ROUNDS=5 OUT=/tmp/sit5 docs/bench/quiet-sitting.sh
set -e
B=${BEAM:-$(cd "$(dirname "$0")" && pwd)/beam}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-/tmp/sit}
cd "$(dirname "$0")/../.."
mkdir -p "$OUT"
go test -c -o "$OUT/rt.test" .
go test -c -o "$OUT/pg.test" ./pg
go test -c -o "$OUT/reg.test" ./registry
go test -c -o "$OUT/sup.test" ./supervisor
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r: load $(cut -d' ' -f1-3 /proc/loadavg) at $(date +%T)" | tee -a "$OUT/load.txt"
  (cd "$B" && elixir --erl '+P 2000000' w6_spawn.exs) > "$OUT/beam_w6_$r.txt" 2>&1
  (cd "$B" && elixir w7_messaging.exs) > "$OUT/beam_w7_$r.txt" 2>&1
  "$OUT/rt.test" -test.run '^$' -test.bench 'W6SpawnExit|W6Idle|W7|BaselineGoroutineSpawnExit|BaselineChannel|BaselineIdle' > "$OUT/go_rt_$r.txt" 2>&1
  (cd "$B" && elixir w5_pg_join_broadcast.exs) > "$OUT/beam_w5_$r.txt" 2>&1
  (cd pg && "$OUT/pg.test" -test.run '^$' -test.bench '^BenchmarkW5PG(Join|Broadcast|BroadcastReceiveLoop)$' -test.benchtime 3x) > "$OUT/go_pg_$r.txt" 2>&1
  (cd "$B" && elixir w3_registry_duplicate_dispatch.exs) > "$OUT/beam_w3_$r.txt" 2>&1
  (cd "$B" && elixir w1_w2_registry_unique.exs) > "$OUT/beam_w12_$r.txt" 2>&1
  (cd registry && "$OUT/reg.test" -test.run '^$' -test.bench 'W[123]' -test.benchtime 1x) > "$OUT/go_reg_$r.txt" 2>&1
  (cd "$B" && elixir --erl '+P 2000000' w4_registry_cleanup.exs) > "$OUT/beam_w4_$r.txt" 2>&1
  (cd registry && "$OUT/reg.test" -test.run '^$' -test.bench 'W4' -test.benchtime 1x) > "$OUT/go_w4_$r.txt" 2>&1
  (cd "$B" && elixir w8_supervisor.exs) > "$OUT/beam_w8_$r.txt" 2>&1
  (cd supervisor && "$OUT/sup.test" -test.run '^$' -test.bench W8 -test.benchtime 1x) > "$OUT/go_sup_$r.txt" 2>&1
done
echo "done at $(date +%T)" | tee -a "$OUT/load.txt"
