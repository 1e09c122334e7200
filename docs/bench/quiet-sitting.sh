#!/bin/bash
B=/work/shared/bench/beam
cd /work/main
for r in 1 2 3; do
  (cd $B && elixir --erl '+P 2000000' w6_spawn.exs) > /tmp/sit/beam_w6_$r.txt 2>&1
  (cd $B && elixir w7_messaging.exs) > /tmp/sit/beam_w7_$r.txt 2>&1
  /tmp/sit/rt.test -test.run '^$' -test.bench 'W6SpawnExit|W7|BaselineGoroutineSpawnExit|BaselineChannel' -test.benchmem > /tmp/sit/go_rt_$r.txt 2>&1
  (cd $B && elixir w5_pg_join_broadcast.exs) > /tmp/sit/beam_w5_$r.txt 2>&1
  (cd pg && /tmp/sit/pg.test -test.run XXX -test.bench '^BenchmarkW5PG(Join|Broadcast|BroadcastReceiveLoop)$' -test.benchtime 3x) > /tmp/sit/go_pg_$r.txt 2>&1
  (cd $B && elixir w3_registry_duplicate_dispatch.exs) > /tmp/sit/beam_w3_$r.txt 2>&1
  (cd $B && elixir w1_w2_registry_unique.exs) > /tmp/sit/beam_w12_$r.txt 2>&1
  (cd registry && /tmp/sit/reg.test -test.run '^$' -test.bench 'W[123]' -test.benchtime 1x) > /tmp/sit/go_reg_$r.txt 2>&1
  (cd $B && elixir w8_supervisor.exs) > /tmp/sit/beam_w8_$r.txt 2>&1
  (cd supervisor && /tmp/sit/sup.test -test.run XXX -test.bench W8 -test.benchtime 1x) > /tmp/sit/go_sup_$r.txt 2>&1
  echo "round $r done $(date +%T)"
done
echo ALLDONE
