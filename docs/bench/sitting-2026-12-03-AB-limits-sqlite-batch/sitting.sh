#!/bin/bash
# Sitting AB: PerPartition on SQLite by places, batch subscriptions' Concurrency by
# slots (BENCHMARKS.md rows Q4). Interleaved rounds of the code before (BEFORE, main
# at 872dfff: PerPartition on SQLite counted by each claim; a batch subscription's
# Concurrency counted, on Postgres under the table's advisory lock) and after
# (AFTER), alternating which goes first:
#   - BenchmarkDrainGroups (inbox/groups_bench_test.go, the after version in both
#     trees): two instances of 32 workers draining 10,000 jobs; nolimit and
#     limit40 (Concurrency: 40) on the default schema; nolimit20, perpart2
#     (PerPartition: 2) and perpart2limit40 (and Concurrency: 40) on 20 partition
#     keys; SQLite and Postgres; 3 drains each (-benchtime 3x);
#   - BenchmarkDrainBatchLimits (inbox/limits_bench_test.go, laid over both trees):
#     two instances of batch subscriptions (16 a batch, 4 workers each) draining
#     10,000 jobs, nolimit and limit40; 1 drain each (the code before takes ~55 s
#     for one on Postgres with the limit).
# Build outside the sitting, run each part inside one hold (<= 10 min):
#   docs/bench/sitting-2026-12-03-AB-limits-sqlite-batch/sitting.sh build
#   POSTGRES_TEST_URL=... /work/bin/cpu-exclusive docs/bench/sitting-2026-12-03-AB-limits-sqlite-batch/sitting.sh run 1 2 3
#   POSTGRES_TEST_URL=... /work/bin/cpu-exclusive docs/bench/sitting-2026-12-03-AB-limits-sqlite-batch/sitting.sh run 4 5 6
#   docs/bench/sitting-2026-12-03-AB-limits-sqlite-batch/sitting.sh summary
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
OUT=${OUT:-/tmp/i23p/sitting-ab}
BEFORE=${BEFORE:-872dfff}
AFTER=${AFTER:-63dc982}
export INBOX_BENCH_JOBS=${INBOX_BENCH_JOBS:-10000}
case "$1" in
build)
  for v in before after; do
    rev=$BEFORE; [ $v = after ] && rev=$AFTER
    rm -rf "$OUT/$v-src"; mkdir -p "$OUT/$v-src"
    git -C "$ROOT" archive "$rev" | tar -x -C "$OUT/$v-src"
    for f in groups_bench_test.go limits_bench_test.go; do
      git -C "$ROOT" show "$AFTER:inbox/$f" > "$OUT/$v-src/inbox/$f"
    done
    (cd "$OUT/$v-src" && go test -c -o "$OUT/$v.inbox.test" ./inbox)
  done
  ;;
run)
  : "${POSTGRES_TEST_URL:?set POSTGRES_TEST_URL}"
  shift
  for r in "$@"; do
    { date -u +"round $r start %F %T UTC"; uptime; } >> "$OUT/sitting.txt"
    if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    for v in $order; do
      (cd "$OUT/$v-src/inbox" && "$OUT/$v.inbox.test" -test.run '^$' -test.bench 'BenchmarkDrainGroups/(sqlite|postgres)/(nolimit|limit40|nolimit20|perpart2|perpart2limit40)$' -test.benchtime 3x -test.timeout 10m > "$OUT/groups_${v}_$r.txt" 2>&1)
      (cd "$OUT/$v-src/inbox" && "$OUT/$v.inbox.test" -test.run '^$' -test.bench 'BenchmarkDrainBatchLimits/(sqlite|postgres)/(nolimit|limit40)$' -test.benchtime 1x -test.timeout 10m > "$OUT/batch_${v}_$r.txt" 2>&1)
    done
    { date -u +"round $r end %F %T UTC"; uptime; } >> "$OUT/sitting.txt"
  done
  ;;
summary)
  python3 "$HERE/summary.py" "$OUT" | tee "$OUT/summary.txt"
  ;;
*) echo "usage: $0 build|run ROUND...|summary" >&2; exit 2 ;;
esac
