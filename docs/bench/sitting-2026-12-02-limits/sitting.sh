#!/bin/bash
# Sitting O: Limits.Concurrency with slots (BENCHMARKS.md row Q4). Three
# interleaved rounds, each running the code before the slots (BEFORE, main at
# f9fe955) and after (AFTER, 8e735c5), alternating which goes first:
#   - BenchmarkDrainGroups (inbox/groups_bench_test.go), two instances draining
#     10,000 jobs: plain (8 workers each, no limit), nolimit and limit40 (32
#     workers each; none, or Limits{Concurrency: 40}), SQLite and Postgres;
#   - Q2 of the bench module (bench/harness_test.go), gotp with its defaults,
#     SQLite and Postgres (20,000 jobs, 2 instances x 8 workers).
# Build outside the sitting, run inside it:
#   docs/bench/sitting-2026-12-02-limits/sitting.sh build
#   /work/bin/cpu-exclusive docs/bench/sitting-2026-12-02-limits/sitting.sh run
# POSTGRES_TEST_URL names the database.
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
OUT=${OUT:-/tmp/i23lim/sitting}
BEFORE=${BEFORE:-f9fe955}
AFTER=${AFTER:-8e735c5}
export INBOX_BENCH_JOBS=${INBOX_BENCH_JOBS:-10000}
case "$1" in
build)
  for v in before after; do
    rev=$BEFORE; [ $v = after ] && rev=$AFTER
    rm -rf "$OUT/$v-src"; mkdir -p "$OUT/$v-src"
    git -C "$ROOT" archive "$rev" | tar -x -C "$OUT/$v-src"
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
      (cd "$OUT/$v-src/inbox" && "$OUT/$v.inbox.test" -test.run '^$' -test.bench 'BenchmarkDrainGroups/(sqlite|postgres)/(plain|nolimit|limit40)$' -test.benchtime 3x > "$OUT/groups_${v}_$r.txt" 2>&1)
      (cd "$OUT/$v-src/bench" && "$OUT/$v.bench.test" -test.run '^$' -test.bench 'Q2Drain/db=(sqlite|postgres)/sys=gotp$' -test.benchtime 1x -test.timeout 10m > "$OUT/q2_${v}_$r.txt" 2>&1)
    done
  done
  uptime >> "$OUT/sitting.txt"
  date -u +"end %F %T UTC" >> "$OUT/sitting.txt"
  python3 "$HERE/summary.py" "$OUT" | tee "$OUT/summary.txt"
  ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
