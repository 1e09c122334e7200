"""Medians and ratios of a sitting.sh output, by database: python3 summarize.py part1.txt"""
import sys, statistics as st, collections
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
d = collections.defaultdict(list)
byround = collections.defaultdict(dict)
cases, arms = [], []
for r, db, case, arm, v in rows:
    case = db + '/' + case
    if case not in cases:
        cases.append(case)
    if arm not in arms:
        arms.append(arm)
    if v != 'FAIL':
        d[(case, arm)].append(int(v))
        byround[r][(case, arm)] = int(v)
med = lambda c, a: st.median(d[(c, a)])
others = [a for a in arms if a != 'main']
print('jobs/s, median of rounds; arm / main: median of medians (per-round median, rounds ahead of main)')
print('%-26s' % 'case' + ''.join('%10s' % a for a in arms) + ''.join('%26s' % (a + ' / main') for a in others))
for c in cases:
    line = '%-26s' % c + ''.join('%10d' % med(c, a) if (c, a) in d else '%10s' % '-' for a in arms)
    for a in others:
        rs = [v[(c, a)] / v[(c, 'main')] for v in byround.values() if (c, a) in v and (c, 'main') in v]
        if rs:
            line += '%26s' % ('%.2fx (%.2fx, %d of %d)' % (med(c, a) / med(c, 'main'), st.median(rs), sum(x > 1 for x in rs), len(rs)))
    print(line)
print('limit / no limit, same arm: median of medians (per-round median; range)')
pairs = [('fifo100', 'plain'), ('fifo2k', 'plain'), ('limit40', 'nolimit'), ('perpart2limit40', 'nolimit20'), ('perpart2', 'nolimit20'), ('rate', 'nolimit20'), ('perpart2k', 'nolimit2k')]
for lim, base in [(db + '/' + l, db + '/' + b) for db in ('sqlite', 'postgres') for l, b in pairs]:
    for a in arms:
        rs = [v[(lim, a)] / v[(base, a)] for v in byround.values() if (lim, a) in v and (base, a) in v]
        if rs:
            print('%-26s %-5s %.2fx (%.2fx; %.2f-%.2f)' % (lim, a, med(lim, a) / med(base, a), st.median(rs), min(rs), max(rs)))
