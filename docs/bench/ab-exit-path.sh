#!/bin/bash
# A/B of the exit path (W6 spawn+exit, W4 registry cleanup) between two
# trees of the runtime, in ABBA order so that drift in the machine's speed
# falls on both. Each tree is a directory holding the module (a checkout,
# or `git archive REV | tar x -C DIR`); the registry benchmark runs from
# tree A's registry directory with each tree's test binary.
#
#   docs/bench/ab-exit-path.sh /tmp/base /tmp/new            # 10 rounds
#   ROUNDS=6 OUT=/tmp/ab docs/bench/ab-exit-path.sh A B
#
# Run it on an otherwise idle machine (on a shared one, under the
# machine's exclusive lock). It prints the medians and their ratio.
set -e
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd)
ROUNDS=${ROUNDS:-10}
OUT=${OUT:-/tmp/ab-exit-path}
mkdir -p "$OUT"; rm -f "$OUT"/*.txt
for t in A B; do
  dir=$A; [ $t = B ] && dir=$B
  (cd "$dir" && go test -c -o "$OUT/rt_$t.test" . && go test -c -o "$OUT/reg_$t.test" ./registry)
done
for r in $(seq 1 "$ROUNDS"); do
  order="A B"; [ $((r % 2)) = 0 ] && order="B A"
  for t in $order; do
    "$OUT/rt_$t.test" -test.run '^$' -test.bench 'BenchmarkW6SpawnExit$' -test.benchtime 1s >> "$OUT/w6_$t.txt" 2>&1
    (cd "$A/registry" && "$OUT/reg_$t.test" -test.run '^$' -test.bench W4 -test.benchtime 3x) >> "$OUT/w4_$t.txt" 2>&1
  done
done
python3 - "$OUT" <<'PY'
import re, statistics, sys
out = sys.argv[1]
def figures(f, pat, unit):
    vals = []
    for line in open(f):
        if re.search(pat, line):
            m = re.search(r"([\d.]+) " + unit, line)
            if m:
                vals.append(float(m.group(1)))
    return vals
for name, f, pat, unit in [
    ("W6 spawn+exit", "w6", r"W6SpawnExit", "spawns/s"),
    ("W4 cleanup", "w4", r"W4RegistryCleanup/cleanup", "cleanups/s"),
    ("W4 cycle", "w4", r"W4RegistryCleanup/cycle", "cycles/s"),
]:
    a = figures(f"{out}/{f}_A.txt", pat, unit)
    b = figures(f"{out}/{f}_B.txt", pat, unit)
    if a and b:
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{name}: A {ma:,.0f} {unit}, B {mb:,.0f} {unit} (median of {len(a)}), B/A {mb / ma:.3f}")
PY
