#!/usr/bin/env python3
"""Print the median of every figure in a directory of BEAM anchor outputs.

    python3 docs/bench/beam/medians.py /tmp/gotp-beam
"""
import collections
import glob
import os
import re
import statistics
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/gotp-beam"
rates = collections.defaultdict(list)
mems = collections.defaultdict(list)
for path in sorted(glob.glob(os.path.join(out, "*.txt"))):
    with open(path) as f:
        for line in f:
            m = re.match(r"(\S+) ops_per_sec=([\d.]+) ns_per_op=[\d.]+ mem=(\S+)", line)
            if not m:
                continue
            rates[m.group(1)].append(float(m.group(2)))
            b = re.match(r"([\d.]+)B/", m.group(3))
            if b:
                mems[m.group(1)].append(float(b.group(1)))

print("| figure | runs | median ops/s | median bytes each |")
print("|---|---|---|---|")
for name in sorted(rates):
    mem = f"{statistics.median(mems[name]):,.0f}" if mems[name] else "-"
    print(f"| {name} | {len(rates[name])} | {statistics.median(rates[name]):,.0f} | {mem} |")
