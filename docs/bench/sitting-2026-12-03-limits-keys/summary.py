"""Medians and per-round ratios of sitting V (sitting.sh): each limited drain over
its unlimited one (limit40 / nolimit; perpart2, perpart2limit40, rate / nolimit20)
for each code, and after/before of every figure."""
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

pairs = [('limit40', 'nolimit'), ('perpart2', 'nolimit20'), ('perpart2limit40', 'nolimit20'), ('rate', 'nolimit20')]
for db in ('sqlite', 'postgres'):
    for code in ('before', 'after'):
        g = lambda n: med(code, f'BenchmarkDrainGroups/{db}/{n}')
        print(f"{db} {code}: " + "  ".join(f"{a} {g(a)[0]:.0f} ({a}/{b} {ratio(g(a), g(b))})" for a, b in pairs) + f"  nolimit {g('nolimit')[0]:.0f} nolimit20 {g('nolimit20')[0]:.0f}")
    for n in ('plain', 'nolimit', 'limit40', 'nolimit20', 'perpart2', 'perpart2limit40', 'rate'):
        bench = f'BenchmarkDrainGroups/{db}/{n}'
        b, a = med('before', bench), med('after', bench)
        print(f"{db} {n}: before {b[0]:.0f}  after {a[0]:.0f}  after/before {ratio(a, b)}")
    bench = f'BenchmarkQ2Drain/db={db}/sys=gotp'
    b, a = med('before', bench), med('after', bench)
    print(f"{db} Q2 gotp: before {b[0]:.0f}  after {a[0]:.0f}  after/before {ratio(a, b)}")
