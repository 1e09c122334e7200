cd /work/wt/i21/cluster
B=${BIN:-/tmp/issue-21/base.test}
tag=${TAG:-base}
for bench in TCPBaseline Call; do
perf sched record -a -o /tmp/issue-21/sched.$tag.$bench.data -- $B -test.run '^$' -test.bench "^BenchmarkC1Procs$bench\$" -test.benchtime 3000x 2>/dev/null | grep ns/op
done
