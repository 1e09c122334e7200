#!/bin/bash
# Sitting V: PerPartition and Rate without the table lock (BENCHMARKS.md row Q4).
# Three interleaved rounds, each running the code before (BEFORE, main at 43ae204:
# PerPartition and Rate claims serialised on the table's advisory lock) and after
# (AFTER, a86109f: places per key, a reserve of starts), alternating which goes first:
#   - BenchmarkDrainGroups (inbox/groups_bench_test.go; the after version of the
#     file is put into both trees, so both run the same cases): two instances
#     draining 10,000 jobs, plain (8 workers each), nolimit and limit40 (32
#     workers each), and on 20 partition keys nolimit20, perpart2
#     (PerPartition: 2), perpart2limit40 (and Concurrency: 40), rate (Rate:
#     10,000,000 per second, which does not bind), SQLite and Postgres;
#   - Q2 of the bench module (gotp defaults, 20,000 jobs, 2 x 8 workers).
# Build outside the sitting, run inside it:
#   docs/bench/sitting-2026-12-03-limits-keys/sitting.sh build
#   POSTGRES_TEST_URL=... /work/bin/cpu-exclusive docs/bench/sitting-2026-12-03-limits-keys/sitting.sh run
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
OUT=${OUT:-/tmp/i23p/sitting}
BEFORE=${BEFORE:-43ae204}
AFTER=${AFTER:-a86109f}
export INBOX_BENCH_JOBS=${INBOX_BENCH_JOBS:-10000}
case "$1" in
build)
  for v in before after; do
    rev=$BEFORE; [ $v = after ] && rev=$AFTER
    rm -rf "$OUT/$v-src"; mkdir -p "$OUT/$v-src"
    git -C "$ROOT" archive "$rev" | tar -x -C "$OUT/$v-src"
    git -C "$ROOT" show "$AFTER:inbox/groups_bench_test.go" > "$OUT/$v-src/inbox/groups_bench_test.go"
    (cd "$OUT/$v-src" && go test -c -o "$OUT/$v.inbox.test" ./inbox)
    (cd "$OUT/$v-src/bench" && go test -c -o "$OUT/$v.bench.test" .)
  done
  ;;
run)
  : "${POSTGRES_TEST_URL:?set POSTGRES_TEST_URL}"
  date -u +"start %F %T UTC" > "$OUT/sitting.txt"
  uptime >> "$OUT/sitting.txt"
  for r in 1 2 3; do
    if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    for v in $order; do
      (cd "$OUT/$v-src/inbox" && "$OUT/$v.inbox.test" -test.run '^$' -test.bench 'BenchmarkDrainGroups/(sqlite|postgres)/(plain|nolimit|limit40|nolimit20|perpart2|perpart2limit40|rate)$' -test.benchtime 3x -test.timeout 10m > "$OUT/groups_${v}_$r.txt" 2>&1)
      (cd "$OUT/$v-src/bench" && "$OUT/$v.bench.test" -test.run '^$' -test.bench 'Q2Drain/db=(sqlite|postgres)/sys=gotp$' -test.benchtime 1x -test.timeout 10m > "$OUT/q2_${v}_$r.txt" 2>&1)
    done
  done
  uptime >> "$OUT/sitting.txt"
  date -u +"end %F %T UTC" >> "$OUT/sitting.txt"
  python3 "$HERE/summary.py" "$OUT" | tee "$OUT/summary.txt"
  ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
