#!/bin/bash
# ab.sh ROUNDS BENCH spec... ; spec = name=bin[,ENV=V...]
cd /work/wt/i21/cluster
R=$1; shift; B=$1; shift
N=${N:-20000}
for r in $(seq 1 $R); do
  for spec in "$@"; do
    name=${spec%%=*}; rest=${spec#*=}; IFS=, read -ra parts <<<"$rest"; bin=${parts[0]}; envs=("${parts[@]:1}")
    env "${envs[@]}" perf stat -a -e 'context-switches,sched:sched_wakeup,syscalls:sys_enter_futex' -x, -o /tmp/i21/perf.tmp $bin -test.run '^$' -test.bench "^Benchmark$B\$" -test.benchtime ${N}x 2>/tmp/i21/err.$name | grep ns/op | sed "s|^|$name |" | tr -s ' \t' ' '
    awk -F, -v n=$N '!/^#/ && NF>2 {printf "   %s=%.2f", $3, $1/n} END{print ""}' /tmp/i21/perf.tmp
  done
done
