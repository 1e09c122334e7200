#!/bin/bash
# The FIFO groups and limits sitting (BENCHMARKS.md row Q4, sitting J): three
# interleaved rounds of
#   - BenchmarkDrainGroups (inbox/groups_bench_test.go): two instances draining
#     10,000 jobs, in no group vs spread over 100 FIFO groups (8 workers each),
#     and with no limit vs Limits{Concurrency: 40} (32 workers each), SQLite
#     and Postgres;
#   - BenchmarkDrain's lease drains (one subscription, 8 workers) of the code
#     before FIFO groups (BEFORE, main at f2fb55d) and after, alternating
#     which goes first: what the group predicate and schema version 4 cost a
#     table that uses neither.
# Build outside the sitting, run inside it:
#   docs/bench/sitting-2026-12-02-inbox-groups/sitting.sh build
#   /work/bin/cpu-exclusive docs/bench/sitting-2026-12-02-inbox-groups/sitting.sh run
# POSTGRES_TEST_URL names the database.
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
OUT=${OUT:-/tmp/i23a/sitting}
BEFORE=${BEFORE:-f2fb55d}
export INBOX_BENCH_JOBS=${INBOX_BENCH_JOBS:-10000}
case "$1" in
build)
  rm -rf "$OUT/before-src"; mkdir -p "$OUT/before-src"
  git -C "$ROOT" archive "$BEFORE" | tar -x -C "$OUT/before-src"
  (cd "$OUT/before-src" && go test -c -o "$OUT/before.test" ./inbox)
  (cd "$ROOT" && go test -c -o "$OUT/after.test" ./inbox)
  ;;
run)
  : "${POSTGRES_TEST_URL:?set POSTGRES_TEST_URL}"
  cd "$ROOT/inbox"
  date -u +"start %F %T UTC" > "$OUT/sitting.txt"
  uptime >> "$OUT/sitting.txt"
  for r in 1 2 3; do
    if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    for v in $order; do
      "$OUT/$v.test" -test.run '^$' -test.bench 'BenchmarkDrain$/(sqlite|postgres)/lease$' -test.benchtime 3x > "$OUT/drain_${v}_$r.txt" 2>&1
    done
    "$OUT/after.test" -test.run '^$' -test.bench 'BenchmarkDrainGroups' -test.benchtime 3x > "$OUT/groups_$r.txt" 2>&1
  done
  uptime >> "$OUT/sitting.txt"
  date -u +"end %F %T UTC" >> "$OUT/sitting.txt"
  python3 "$ROOT/docs/bench/sitting-2026-12-02-inbox-groups/summary.py" "$OUT" | tee "$OUT/summary.txt"
  ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
