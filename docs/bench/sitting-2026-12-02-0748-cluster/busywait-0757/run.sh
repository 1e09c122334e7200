#!/bin/bash
set -e
cd /work/wt/lead
go test -c -o /tmp/cs2/cluster.test ./cluster
dist="-kernel inet_dist_listen_min 31900 inet_dist_listen_max 31999"
nospin="+sbwt none +sbwtdcpu none +sbwtdio none"
for r in 1 2 3 4; do
  echo "round $r: load $(cut -d' ' -f1-3 /proc/loadavg) at $(date +%T)" >> /tmp/cs2/load.txt
  (cd /tmp && elixir --sname "cbeam$$" --erl "$dist" /work/wt/lead/docs/bench/beam/c1_c2_cluster.exs 2>&1 || true) > /tmp/cs2/beam_$r.txt
  (cd /tmp && BEAM_PEER_ARGS="$nospin" elixir --sname "cbeam$$" --erl "$dist $nospin" /work/wt/lead/docs/bench/beam/c1_c2_cluster.exs 2>&1 || true) > /tmp/cs2/beamnospin_$r.txt
  (cd cluster && /tmp/cs2/cluster.test -test.run '^$' -test.bench '^BenchmarkC1Procs(Call|CallBusyPoll)$' -test.benchtime 20000x 2>/dev/null | grep ^Benchmark) > /tmp/cs2/go_$r.txt || true
done
date > /tmp/cs2/end
