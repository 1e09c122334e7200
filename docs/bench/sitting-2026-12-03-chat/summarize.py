#!/usr/bin/env python3
"""Summarise a sitting of sitting.sh: per arm, the rounds and their median;
per round, the ratios gotp-like arms / bare-sqlite (rate, flat) and
hostile / the same arm's rate p99; and the median of those ratios."""
import re, sys, os, glob, statistics as st

d = sys.argv[1]
def dur(s):
    m = re.match(r'([0-9.]+)(µs|ms|s|ns)', s)
    v, u = float(m.group(1)), m.group(2)
    return v * {'ns': 1e-3, 'µs': 1, 'ms': 1e3, 's': 1e6}[u]

runs = {}  # (phase, arm) -> {round: dict}
for f in glob.glob(os.path.join(d, '*-*-*.txt')):
    base = os.path.basename(f)[:-4]
    phase, rest = base.split('-', 1)
    arm, r = rest.rsplit('-', 1)
    t = open(f).read()
    x = {}
    m = re.search(r'latency: p50 (\S+), p99 (\S+), max (\S+)', t)
    if m:
        x['p50'], x['p99'], x['max'] = (dur(v.rstrip(',')) for v in m.groups())
    m = re.search(r'= ([0-9]+) messages/s', t)
    if m:
        x['rate'] = int(m.group(1))
    m = re.search(r'RSS peak: ([0-9.]+) MB', t)
    if m:
        x['rss'] = float(m.group(1))
    m = re.search(r'CPU per message: server ([0-9.]+)', t)
    if m:
        x['cpu'] = float(m.group(1))
    m = re.search(r'GCs \(([0-9.]+) ms of CPU\)', t)  # chat-load from 2026-12-07
    if m:
        x['gc'] = float(m.group(1))
    m = re.search(r'(\d+) of 10 disconnected', t)
    if m:
        x['cut'] = int(m.group(1))
    if x:
        runs.setdefault((phase, arm), {})[int(r)] = x

def row(phase, arm, key, fmt='{:.0f}'):
    rs = runs.get((phase, arm), {})
    vals = [rs[r][key] for r in sorted(rs) if key in rs[r]]
    if not vals:
        return
    print(f'{phase:8} {arm:12} {key:5}', ' · '.join(fmt.format(v) for v in vals), '→ median', fmt.format(st.median(vals)))

def ratios(pa, aa, pb, ab, key, label):
    a, b = runs.get((pa, aa), {}), runs.get((pb, ab), {})
    rs = [r for r in sorted(a) if r in b and key in a[r] and key in b[r]]
    if not rs:
        return
    q = [a[r][key] / b[r][key] for r in rs]
    below = sum(1 for v in q if v < 1)
    print(f'{label:40}', ' · '.join(f'{v:.2f}' for v in q), f'→ median {st.median(q):.2f}×; < 1 in {below} of {len(q)}')

arms = sorted({a for (_, a) in runs})
for phase, keys in (('flat', ['rate', 'cpu']), ('rate', ['p50', 'p99', 'max', 'cpu', 'gc']), ('hostile', ['p50', 'p99', 'rss', 'cut'])):
    for a in arms:
        for k in keys:
            row(phase, a, k, '{:.0f}' if k in ('rate', 'p50', 'cpu', 'cut') else '{:.1f}' if k == 'gc' else '{:.2f}' if k != 'p99' and k != 'max' else '{:.0f}')
print()
for a in arms:
    if a.startswith('bare'):
        continue
    ratios('flat', a, 'flat', 'bare-sqlite', 'rate', f'flat {a}/bare-sqlite msg/s')
    ratios('rate', a, 'rate', 'bare-sqlite', 'p99', f'rate p99 {a}/bare-sqlite')
    ratios('rate', a, 'rate', 'bare-sqlite', 'p50', f'rate p50 {a}/bare-sqlite')
    base = a if ('rate', a) in runs else 'gotp'
    ratios('hostile', a, 'rate', base, 'p99', f'hostile p99 {a}/rate p99 of {base}')
ref = os.environ.get('REF', 'gotp')  # the arm the others are compared with
for a in arms:
    if a.startswith('bare') or a == ref:
        continue
    for phase in ('rate', 'hostile'):
        if (phase, a) not in runs or (phase, ref) not in runs:
            continue
        ratios(phase, a, phase, ref, 'p99', f'{phase} p99 {a}/{ref}')
        ratios(phase, a, phase, ref, 'p50', f'{phase} p50 {a}/{ref}')
