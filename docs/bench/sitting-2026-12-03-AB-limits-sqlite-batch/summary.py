"""Medians and per-round ratios of sitting AB (sitting.sh): each limited drain over
its unlimited one (limit40 / nolimit; perpart2, perpart2limit40 / nolimit20;
batch limit40 / batch nolimit) for each code, and after/before of every figure."""
import collections, glob, re, statistics, sys

out = sys.argv[1]
vals = collections.defaultdict(dict)  # (code, bench) -> round -> jobs/s
for f in glob.glob(out + '/*_[0-9].txt'):
    kind, code, rnd = f.rsplit('/', 1)[1][:-4].split('_')
    for line in open(f):
        m = re.match(r'(Benchmark\S+?)(-\d+)?\s+\d+\s+\d+ ns/op.*?\s([\d.]+) jobs/s', line)
        if m:
            vals[(code, m.group(1))][int(rnd)] = float(m.group(3))

def med(code, bench):
    v = vals.get((code, bench), {})
    return (statistics.median(v.values()) if v else float('nan')), v

def ratio(a, b):
    (_, va), (_, vb) = a, b
    rs = sorted(va[r] / vb[r] for r in va if r in vb and vb[r])
    if not rs:
        return '-'
    return f"{statistics.median(rs):.2f} ({rs[0]:.2f}-{rs[-1]:.2f}, n={len(rs)})"

G, B = 'BenchmarkDrainGroups', 'BenchmarkDrainBatchLimits'
pairs = [(G, 'limit40', 'nolimit'), (G, 'perpart2', 'nolimit20'), (G, 'perpart2limit40', 'nolimit20'), (B, 'limit40', 'nolimit')]
for db in ('sqlite', 'postgres'):
    for code in ('before', 'after'):
        parts = []
        for bn, a, b in pairs:
            x, y = med(code, f'{bn}/{db}/{a}'), med(code, f'{bn}/{db}/{b}')
            tag = ('batch ' if bn == B else '') + a
            parts.append(f"{tag} {x[0]:.0f} / {y[0]:.0f} = {ratio(x, y)}")
        print(f"{db} {code}: " + ";  ".join(parts))
    for bn, n in [(G, 'nolimit'), (G, 'limit40'), (G, 'nolimit20'), (G, 'perpart2'), (G, 'perpart2limit40'), (B, 'nolimit'), (B, 'limit40')]:
        bench = f'{bn}/{db}/{n}'
        b, a = med('before', bench), med('after', bench)
        print(f"{db} {'batch ' if bn == B else ''}{n}: before {b[0]:.0f}  after {a[0]:.0f}  after/before {ratio(a, b)}")
