"""Medians and per-round ratios of sitting O (sitting.sh): limit40/nolimit of each
code, and after/before of every figure."""
import collections, glob, re, statistics, sys

out = sys.argv[1]
vals = collections.defaultdict(dict)  # (code, bench) -> round -> jobs/s
for f in glob.glob(out + '/*_[0-9].txt'):
    _, code, rnd = f.rsplit('/', 1)[1][:-4].split('_')
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
    return f"{statistics.median(rs):.2f} ({rs[0]:.2f}-{rs[-1]:.2f})"

for db in ('sqlite', 'postgres'):
    for code in ('before', 'after'):
        g = lambda n: med(code, f'BenchmarkDrainGroups/{db}/{n}')
        print(f"{db} {code}: nolimit {g('nolimit')[0]:.0f}  limit40 {g('limit40')[0]:.0f}  limit40/nolimit {ratio(g('limit40'), g('nolimit'))}")
    for bench in (f'BenchmarkDrainGroups/{db}/plain', f'BenchmarkDrainGroups/{db}/nolimit', f'BenchmarkDrainGroups/{db}/limit40', f'BenchmarkQ2Drain/db={db}/sys=gotp'):
        b, a = med('before', bench), med('after', bench)
        print(f"{db} {bench.split('/', 1)[1]}: before {b[0]:.0f}  after {a[0]:.0f}  after/before {ratio(a, b)}")
