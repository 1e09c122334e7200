#!/bin/bash
# A/B of one package's benchmarks: the working tree against a revision
# (the parent commit by default), interleaved round by round with the
# order alternated, so that a machine whose speed drifts hurts both sides
# alike. Run it on an otherwise idle machine (on the shared machine,
# through /work/bin/cpu-exclusive). It prints, for each benchmark and
# figure, the medians of both sides and the median and range of the
# per-round ratios (after ÷ before).
#
#   docs/bench/ab.sh ./server 'CallRoundTrip'              # against HEAD
#   REV=HEAD~3 ROUNDS=9 BENCHTIME=1x docs/bench/ab.sh ./supervisor W8
#
# With REUSE=1 the binaries already in OUT (before.test, after.test) are run
# as they are: build them first, outside a quiet sitting, with BUILD_ONLY=1.
#
# OVERLAY names files of the working tree (paths from the repository's root,
# separated by spaces) copied over the revision's tree before it is built: a
# benchmark file that the revision lacks, say.
#
#   REV=be72601^ OVERLAY=inbox/bench_test.go docs/bench/ab.sh ./inbox Drain
set -e
PKG=${1:?package, e.g. ./server}
BENCH=${2:?benchmark regexp}
REV=${REV:-HEAD}
ROUNDS=${ROUNDS:-7}
BENCHTIME=${BENCHTIME:-1s}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$(mktemp -d /tmp/ab.XXXXXX)}
SRC=$OUT/before-src
if [ "${REUSE:-}" != 1 ]; then
  mkdir -p "$SRC"
  git -C "$ROOT" archive "$REV" | tar -x -C "$SRC"
  for f in ${OVERLAY:-}; do cp "$ROOT/$f" "$SRC/$f"; done
  (cd "$SRC" && go test -c -o "$OUT/before.test" "$PKG")
  (cd "$ROOT" && go test -c -o "$OUT/after.test" "$PKG")
fi
[ "${BUILD_ONLY:-}" = 1 ] && exit 0
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="before after"; else order="after before"; fi
  for v in $order; do
    (cd "$ROOT/$PKG" && "$OUT/$v.test" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME" -test.benchmem) > "$OUT/${v}_$r.txt" 2>&1
  done
done
python3 - "$OUT" <<'PY'
import collections, glob, re, statistics, sys
out = sys.argv[1]
vals = collections.defaultdict(lambda: collections.defaultdict(dict))
for f in glob.glob(out + '/*_*.txt'):
    side, rnd = f.rsplit('/', 1)[1][:-4].rsplit('_', 1)
    for line in open(f):
        if not line.startswith('Benchmark'):
            continue
        parts = line.split()
        name = re.sub(r'-\d+$', '', parts[0])
        for v, unit in zip(parts[2::2], parts[3::2]):
            try:
                vals[(name, unit)][side][int(rnd)] = float(v)
            except ValueError:
                pass
for (name, unit), sides in sorted(vals.items()):
    b, a = sides.get('before', {}), sides.get('after', {})
    rounds = sorted(set(a) & set(b))
    if not rounds:
        continue
    mb, ma = statistics.median(b[r] for r in rounds), statistics.median(a[r] for r in rounds)
    ratios = sorted(a[r] / b[r] for r in rounds if b[r])
    rr = f"{statistics.median(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})" if ratios else "-"
    print(f"{name:50} {unit:14} before {mb:14.1f} after {ma:14.1f} after/before {rr}")
PY
echo "outputs in $OUT"
