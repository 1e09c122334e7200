#!/bin/bash
# Sitting AC: FIFO groups' drain steady (BENCHMARKS.md row Q4, 100 FIFO groups).
# Part 2 ran the same script with OUT=/tmp/i23fifo2/sitting2 BEFORE=b509031 AFTER=6f3b8fb.
# Interleaved rounds of the code before (BEFORE, main at d82d21e: a short claim
# idles the lane until PollInterval though a settled head freed its group) and
# after (AFTER: the settlement claims the group's next job), alternating which
# goes first. Each round runs BenchmarkDrainGroups (inbox/groups_bench_test.go,
# the same file in both trees) plain and fifo100, SQLite and Postgres: two
# instances x 8 workers drain 10,000 jobs, each drain its own line
# (-test.count 3 -test.benchtime 1x), so a collapsed drain shows as itself.
# Build outside the sitting, run each round in a hold of its own:
#   docs/bench/sitting-2026-12-03-AC-fifo/sitting.sh build
#   for r in 1 2 3 4 5; do POSTGRES_TEST_URL=... /work/bin/cpu-exclusive docs/bench/sitting-2026-12-03-AC-fifo/sitting.sh run $r; done
#   docs/bench/sitting-2026-12-03-AC-fifo/sitting.sh summary
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
OUT=${OUT:-/tmp/i23fifo2/sitting}  # sitting AC's raw output is in out/ beside this script
BEFORE=${BEFORE:-d82d21e}
# Sitting AC ran AFTER=11df8f9, d82d21e plus the fix (no branch keeps it); on
# main the fix is f96e819, whose other changes since d82d21e (migrate, limits)
# touch nothing these drains time.
AFTER=${AFTER:-f96e819}
export INBOX_BENCH_JOBS=${INBOX_BENCH_JOBS:-10000}
case "$1" in
build)
  for v in before after; do
    rev=$BEFORE; [ $v = after ] && rev=$AFTER
    rm -rf "$OUT/$v-src"; mkdir -p "$OUT/$v-src"
    git -C "$ROOT" archive "$rev" | tar -x -C "$OUT/$v-src"
    git -C "$ROOT" show "$AFTER:inbox/groups_bench_test.go" > "$OUT/$v-src/inbox/groups_bench_test.go"
    (cd "$OUT/$v-src" && go test -c -o "$OUT/$v.inbox.test" ./inbox)
  done
  ;;
run)
  : "${POSTGRES_TEST_URL:?set POSTGRES_TEST_URL}"
  r=${2:?round}
  { date -u +"round $r start %F %T UTC"; uptime; } >> "$OUT/sitting.txt"
  if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for v in $order; do
    (cd "$OUT/$v-src/inbox" && "$OUT/$v.inbox.test" -test.run '^$' -test.bench 'BenchmarkDrainGroups/(sqlite|postgres)/(plain|fifo100)$' -test.count 3 -test.benchtime 1x -test.timeout 9m > "$OUT/groups_${v}_$r.txt" 2>&1)
  done
  { uptime; date -u +"round $r end %F %T UTC"; } >> "$OUT/sitting.txt"
  ;;
summary)
  python3 "$HERE/summary.py" "$OUT" | tee "$OUT/summary.txt"
  ;;
*) echo "usage: $0 build|run ROUND|summary" >&2; exit 2 ;;
esac
