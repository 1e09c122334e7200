"""Medians and ratios of a sitting.sh output: python3 summarize.py part1.txt"""
import sys, statistics as st, collections
rows=[l.split() for l in open(sys.argv[1]) if l.strip()]
d=collections.defaultdict(list)
byround=collections.defaultdict(dict)
for r,db,case,b,v in rows:
    if v=='FAIL': continue
    d[(db,case,b)].append(int(v)); byround[(r,db)][(case,b)]=int(v)
for k in sorted(d): print(k, 'median', int(st.median(d[k])), d[k])
for db in ['sqlite','postgres']:
    for lim,base in [('perpart2k','nolimit2k'),('perpart2','nolimit20')]:
        for b in ['main','new']:
            if (db,lim,b) not in d or (db,base,'new') not in d:
                continue
            rs=[v[(lim,b)]/v[(base,'new')] for (r,dd),v in byround.items() if dd==db and (lim,b) in v and (base,'new') in v]
            print(db, lim, b, 'ratio median of medians %.2f'%(st.median(d[(db,lim,b)])/st.median(d[(db,base,'new')])), 'per-round median %.2f'%st.median(rs), ['%.2f'%x for x in rs])
