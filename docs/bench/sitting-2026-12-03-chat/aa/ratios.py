#!/usr/bin/env python3
"""Sitting AA: every arm's per-round figures and the per-round ratios of the
rate phase (rounds 1-16) and flat out (rounds 1-8), server runtime included.
Usage: ratios.py DIR (the OUT of sitting.sh)."""
import re, statistics as st, sys

DIR = sys.argv[1] if len(sys.argv) > 1 else '.'
ARMS = ('aa', 'control', 'bare-sqlite')


def dur(m):
    return float(m.group(1)) * {'ns': 1e-3, 'µs': 1, 'ms': 1000}[m.group(2)]


def fig(ph, a, r, key):
    t = open(f'{DIR}/{ph}-{a}-{r}.txt').read()
    if key in ('p50', 'p99'):
        return dur(re.search(key + r' ([\d.]+)(ns|µs|ms)', t))
    if key == 'rate':
        return float(re.search(r'= ([\d.]+) messages/s', t).group(1))
    if key == 'alloc':
        return float(re.search(r'([\d.]+) allocations per message', t).group(1))
    if key == 'gc':
        return int(re.search(r'(\d+) GCs', t).group(1))
    if key == 'cpu':
        return float(re.search(r'CPU per message: server ([\d.]+)', t).group(1))
    if key == 'sched':
        return dur(re.search(r'scheduler latency p50 \S+, p99 ([\d.]+)(ns|µs|ms)', t))


print('per-round figures and ratios, rate phase rounds 1-16, flat out rounds 1-8')
for ph, R, keys in (('rate', range(1, 17), ['p50', 'p99', 'cpu', 'alloc', 'gc', 'sched']),
                    ('flat', range(1, 9), ['rate', 'cpu', 'alloc', 'gc'])):
    for k in keys:
        for a in ARMS:
            v = [fig(ph, a, r, k) for r in R]
            print(f'{ph} {k:5} {a:11}', ' · '.join(f'{x:g}' for x in v), '→ median %g' % st.median(v))
        for num, den in (('aa', 'control'), ('aa', 'bare-sqlite'), ('control', 'bare-sqlite')):
            rs = [fig(ph, num, r, k) / fig(ph, den, r, k) for r in R]
            print(f'{ph} {k:5} {num}/{den}', ' · '.join(f'{x:.2f}' for x in rs),
                  '→ median %.2f×, < 1 in %d of %d' % (st.median(rs), sum(x < 1 for x in rs), len(rs)))
