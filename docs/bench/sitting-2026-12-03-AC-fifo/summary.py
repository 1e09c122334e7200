#!/usr/bin/env python3
"""Sitting AC summary: medians of each round's drains, per-round ratios, spread."""
import glob, os, re, statistics as st, sys

out = sys.argv[1]
line = re.compile(r"BenchmarkDrainGroups/(\w+)/(\w+)-\d+\s+\d+\s+\d+ ns/op\s+([\d.]+) jobs/s")
runs = {}  # (round, version, db, case) -> [jobs/s]
for f in glob.glob(os.path.join(out, "groups_*_*.txt")):
    v, r = re.match(r"groups_(\w+?)_(\d+)\.txt", os.path.basename(f)).groups()
    for m in line.finditer(open(f).read()):
        runs.setdefault((int(r), v, m[1], m[2]), []).append(float(m[3]))
rounds = sorted({k[0] for k in runs})
med = {k: st.median(x) for k, x in runs.items()}

def rng(xs):
    return f"{min(xs):.2f}-{max(xs):.2f}"

print("rounds:", rounds)
for db in ("sqlite", "postgres"):
    print(f"\n{db}")
    for v in ("before", "after"):
        for c in ("plain", "fifo100"):
            all_ = [x for r in rounds for x in runs.get((r, v, db, c), [])]
            per = [med[(r, v, db, c)] for r in rounds if (r, v, db, c) in med]
            if per:
                print(f"  {v:6} {c:8} median of round medians {st.median(per):9,.0f}  drains min {min(all_):9,.0f} max {max(all_):9,.0f}  (n={len(all_)})")
    for v in ("before", "after"):
        rs = [med[(r, v, db, "fifo100")] / med[(r, v, db, "plain")] for r in rounds if (r, v, db, "fifo100") in med and (r, v, db, "plain") in med]
        if rs:
            print(f"  fifo100/plain {v:6}: median {st.median(rs):.2f} (per round {', '.join(f'{x:.2f}' for x in rs)})")
    for c in ("fifo100", "plain"):
        rs = [med[(r, "after", db, c)] / med[(r, "before", db, c)] for r in rounds if (r, "after", db, c) in med and (r, "before", db, c) in med]
        if rs:
            print(f"  {c} after/before: median {st.median(rs):.2f} (per round {', '.join(f'{x:.2f}' for x in rs)})")
    for v in ("before", "after"):
        all_ = [x for r in rounds for x in runs.get((r, v, db, "fifo100"), [])]
        if all_:
            m = st.median(all_)
            low = [x for x in all_ if x < 0.5 * m]
            print(f"  fifo100 {v}: {len(low)} of {len(all_)} drains below half the median ({', '.join(f'{x:,.0f}' for x in low)})")
