"""Medians and per-round ratios of the FIFO groups and limits sitting (sitting.sh)."""
import collections, glob, re, statistics, sys

out = sys.argv[1]
vals = collections.defaultdict(dict)  # (file kind, bench) -> round -> jobs/s
for f in glob.glob(out + '/*_[0-9].txt'):
    base = f.rsplit('/', 1)[1][:-4]
    kind, rnd = base.rsplit('_', 1)
    for line in open(f):
        m = re.match(r'(Benchmark\S+?)(-\d+)?\s+\d+\s+\d+ ns/op\s+([\d.]+) jobs/s', line)
        if m:
            vals[(kind, m.group(1))][int(rnd)] = float(m.group(3))

def med(kind, bench):
    v = vals.get((kind, bench), {})
    return statistics.median(v.values()) if v else float('nan'), v

def ratio(a, b):
    (ma, va), (mb, vb) = a, b
    rs = sorted(va[r] / vb[r] for r in va if r in vb and vb[r])
    if not rs:
        return '-'
    return f"{statistics.median(rs):.2f} ({rs[0]:.2f}-{rs[-1]:.2f})"

for db in ('sqlite', 'postgres'):
    g = lambda name: med('groups', f'BenchmarkDrainGroups/{db}/{name}')
    print(f"{db}: plain {g('plain')[0]:.0f}  fifo100 {g('fifo100')[0]:.0f}  fifo100/plain {ratio(g('fifo100'), g('plain'))}")
    print(f"{db}: nolimit {g('nolimit')[0]:.0f}  limit40 {g('limit40')[0]:.0f}  limit40/nolimit {ratio(g('limit40'), g('nolimit'))}")
    b = med('drain_before', f'BenchmarkDrain/{db}/lease')
    a = med('drain_after', f'BenchmarkDrain/{db}/lease')
    print(f"{db}: Drain lease before {b[0]:.0f}  after {a[0]:.0f}  after/before {ratio(a, b)}")
