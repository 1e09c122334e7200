#!/bin/bash
# count.sh BENCH N : system-wide syscall/sched counts during one benchmark
cd /work/wt/i21/cluster
B=${BIN:-/tmp/issue-21/base.test}
perf stat -a -e 'context-switches,cpu-migrations,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_write,syscalls:sys_enter_read,syscalls:sys_enter_nanosleep,sched:sched_wakeup' -x, -o /tmp/issue-21/perf.$1.txt $B -test.run '^$' -test.bench "^$1\$" -test.benchtime ${2}x 2>/dev/null | grep ns/op
cat /tmp/issue-21/perf.$1.txt | grep -v '^#' | awk -F, -v n=$2 '{printf "%-40s %10d  %.2f/op\n", $3, $1, $1/n}'
