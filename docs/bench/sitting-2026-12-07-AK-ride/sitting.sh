#!/bin/bash
# Sitting AK: BenchmarkDrainGroups on SQLite and Postgres, interleaved arms (default
# main drop ride), the arms' order rotating from round to round.
# Binaries: /tmp/inbox-ARM.test: main = go test -c ./inbox at 6314074, drop = at
# f8ae340 (the deletion of idle keys' places by index probes), ride = at a0cf6a0 or
# later (a take of places rides with the claim).
# jobs/s below 1,000 print with a decimal point (Go's benchmark format): the whole
# part is kept. Run under /work/bin/cpu-exclusive with POSTGRES_TEST_URL set; ROUNDS rounds (default
# 5), DBS the databases (default sqlite postgres), CASES the BenchmarkDrainGroups cases,
# JOBS the jobs a drain (default 10000), BENCHTIME the drains a figure (default 3x).
cd "$(git rev-parse --show-toplevel)/inbox"
read -ra arms <<< "${ARMS:-main drop ride}"
for r in $(seq 1 ${ROUNDS:-5}); do
  k=$(( (r - 1) % ${#arms[@]} ))
  order=("${arms[@]:k}" "${arms[@]:0:k}")
  for db in ${DBS:-sqlite postgres}; do
    for c in ${CASES:-nolimit20 perpart2 perpart2limit40 nolimit2k perpart2k}; do
      for bin in "${order[@]}"; do
        out=$(INBOX_BENCH_JOBS=${JOBS:-10000} /tmp/inbox-$bin.test -test.run '^$' -test.bench "^BenchmarkDrainGroups\$/^$db\$/^$c\$" -test.benchtime ${BENCHTIME:-3x} -test.timeout 30m 2>&1 | grep -o '[0-9.]* jobs/s' | cut -d' ' -f1 | cut -d. -f1)
        echo "$r $db $c $bin ${out:-FAIL}"
      done
    done
  done
done
