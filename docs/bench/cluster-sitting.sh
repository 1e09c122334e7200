#!/bin/bash
# One sitting of the cluster benchmarks C1/C2 across OS processes beside
# Erlang distribution: each round runs docs/bench/beam/c1_c2_cluster.exs (three
# BEAM nodes) and then gotp's benchmarks of cluster/procs_bench_test.go
# (three gotp nodes, two of them node processes), so that drift in the
# machine's speed falls on both. Run it on an otherwise idle machine (for
# example under a lock that keeps other jobs off); results go to $OUT
# (default /tmp/cluster-sit), one file per side and round. Summarise with
# docs/bench/cluster-sitting.py.
#
#   docs/bench/cluster-sitting.sh                # 5 rounds, 5-8 minutes
#   ROUNDS=3 OUT=/tmp/cs docs/bench/cluster-sitting.sh
#
# Needs elixir (Erlang/OTP 25 or later: :peer) and epmd; the BEAM nodes'
# distribution ports are 31900-31999.
set -e
ROUNDS=${ROUNDS:-5}
OUT=${OUT:-/tmp/cluster-sit}
cd "$(dirname "$0")/../.."
repo=$PWD
mkdir -p "$OUT"
go test -c -o "$OUT/cluster.test" ./cluster
dist="-kernel inet_dist_listen_min 31900 inet_dist_listen_max 31999"
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r: load $(cut -d' ' -f1-3 /proc/loadavg) at $(date +%T)" | tee -a "$OUT/load.txt"
  (cd /tmp && elixir --sname "cbeam$$" --erl "$dist" "$repo/docs/bench/beam/c1_c2_cluster.exs") > "$OUT/beam_$r.txt" 2>&1
  # Each benchmark on its own (one that fails leaves the others); their
  # whole output goes to go_$r.raw, the nodes' logs to go_$r.err.
  bench() { # pattern benchtime
    (cd cluster && "$OUT/cluster.test" -test.run '^$' -test.bench "$1" -test.benchtime "$2") 2>>"$OUT/go_$r.err" |
      tee -a "$OUT/go_$r.raw" | grep -E '^(Benchmark|goos|goarch|cpu|pkg|--- FAIL)' >>"$OUT/go_$r.txt" || true
  }
  : >"$OUT/go_$r.txt"
  bench '^BenchmarkC1ProcsSend$' 1000000x
  bench '^BenchmarkC1Procs(Call|CallByName|CallBusyPoll|CallOverNATS|NATSBaseline|TCPBaseline)$' 20000x
  bench '^BenchmarkC2ProcsJoinVisible$' 200x
  bench '^BenchmarkC2ProcsKilledNode$' 5x
  bench '^BenchmarkC1RemoteSend$' 1000000x
  bench '^BenchmarkC1CallRoundTrip$' 20000x
done
echo "done at $(date +%T)" | tee -a "$OUT/load.txt"
