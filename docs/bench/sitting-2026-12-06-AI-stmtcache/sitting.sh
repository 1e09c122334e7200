#!/bin/bash
# Sitting AI: SQLite drains, interleaved arms (default main and new), the arms' order rotating from round to round.
# Binaries: /tmp/inbox-ARM.test, e.g. main = go test -c ./inbox at e280a92 with the harness of 77892d0,
# new = at 77892d0 (the statement cache, a114c86, and the harness).
# Run under /work/bin/cpu-exclusive; ROUNDS rounds (default 6), CASES the BenchmarkDrainGroups cases.
cd "$(git rev-parse --show-toplevel)/inbox"
read -ra arms <<< "${ARMS:-main new}"
for r in $(seq 1 ${ROUNDS:-6}); do
  k=$(( (r - 1) % ${#arms[@]} ))
  order=("${arms[@]:k}" "${arms[@]:0:k}")
  for c in ${CASES:-plain nolimit limit40 nolimit20 perpart2 perpart2limit40 rate nolimit2k perpart2k}; do
    for bin in "${order[@]}"; do
      out=$(INBOX_BENCH_JOBS=10000 /tmp/inbox-$bin.test -test.run '^$' -test.bench "^BenchmarkDrainGroups\$/^sqlite\$/^$c\$" -test.benchtime 3x 2>&1 | grep -o '[0-9]* jobs/s' | cut -d' ' -f1)
      echo "$r sqlite $c $bin ${out:-FAIL}"
    done
  done
done
