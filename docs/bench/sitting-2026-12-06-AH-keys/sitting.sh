#!/bin/bash
# Sitting AH: PerPartition over 2,000 keys and 20 keys against no limit, main vs new, interleaved.
# Binaries: /tmp/inbox-main.test (go test -c ./inbox at the commit before) and /tmp/inbox-new.test (at the change).
# Run under /work/bin/cpu-exclusive; ROUNDS=6 for part 1. Part 2 is the same with only nolimit2k:new and perpart2k:new, ROUNDS=10.
cd "$(git rev-parse --show-toplevel)/inbox"
export POSTGRES_TEST_URL='postgres://postgres@127.0.0.1:5432/gotp_test?sslmode=disable'
for r in $(seq 1 ${ROUNDS:-6}); do
  for db in sqlite postgres; do
    for c in nolimit2k:new perpart2k:main perpart2k:new nolimit20:new perpart2:main perpart2:new; do
      case=${c%%:*}; bin=${c##*:}
      out=$(INBOX_BENCH_JOBS=10000 /tmp/inbox-$bin.test -test.run '^$' -test.bench "BenchmarkDrainGroups/$db/$case\$" -test.benchtime 3x 2>&1 | grep -o '[0-9]* jobs/s' | cut -d' ' -f1)
      echo "$r $db $case $bin ${out:-FAIL}"
    done
  done
done
