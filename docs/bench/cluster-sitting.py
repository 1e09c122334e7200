#!/usr/bin/env python3
"""Summarise a sitting of docs/bench/cluster-sitting.sh: the medians of
every figure over the rounds, gotp's and Erlang's side by side, and the
median (and range) of the per-round ratios.

    python3 docs/bench/cluster-sitting.py /tmp/cluster-sit
"""
import glob
import os
import re
import statistics
import sys


def beam(path):
    out = {}
    for line in open(path):
        parts = line.split()
        # Only figure lines (NAME k=v ...): the BEAM's warning reports
        # (=WARNING REPORT==== ...) and their text are skipped.
        if not parts or not re.match(r"^[A-Za-z]\w*$", parts[0]) or len(parts) < 2 or not all(re.match(r"^\w+=[-\d.eE+]+$", q) for q in parts[1:]):
            continue
        out[parts[0]] = {k: float(v) for k, v in (p.split("=", 1) for p in parts[1:])}
    return out


def gotp(path):
    out = {}
    for line in open(path):
        m = re.match(r"^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$", line)
        if not m:
            continue
        fields = m.group(3).split()
        vals = {}
        for i in range(0, len(fields) - 1, 2):
            try:
                vals[fields[i + 1]] = float(fields[i])
            except ValueError:
                pass
        out[m.group(1)] = vals
    return out


# (label, gotp benchmark, gotp unit, beam line, beam key, higher is better)
ROWS = [
    ("C1 one-way sends, msgs/s", "BenchmarkC1ProcsSend", "msgs/s", "C1_send", "msgs_per_s", True),
    ("C1 call round trips/s (by PID)", "BenchmarkC1ProcsCall", "calls/s", "C1_call", "calls_per_s", True),
    ("C1 call p50, µs", "BenchmarkC1ProcsCall", "p50-µs", "C1_call", "p50_us", False),
    ("C1 call p99, µs", "BenchmarkC1ProcsCall", "p99-µs", "C1_call", "p99_us", False),
    ("C1 call round trips/s (by name on the node)", "BenchmarkC1ProcsCallByName", "calls/s", "C1_call_named", "calls_per_s", True),
    ("C1 call by name p99, µs", "BenchmarkC1ProcsCallByName", "p99-µs", "C1_call_named", "p99_us", False),
    ("C1 call round trips/s, links that busy-poll 50 µs (Options.BusyPoll)", "BenchmarkC1ProcsCallBusyPoll", "calls/s", "C1_call", "calls_per_s", True),
    ("C1 call busy-poll p99, µs", "BenchmarkC1ProcsCallBusyPoll", "p99-µs", "C1_call", "p99_us", False),
    ("C1 call round trips/s, gotp over NATS (NoDirect)", "BenchmarkC1ProcsCallOverNATS", "calls/s", "C1_call", "calls_per_s", True),
    ("C1 plain NATS request/reply, same topology, rt/s", "BenchmarkC1ProcsNATSBaseline", "rt/s", "C1_call", "calls_per_s", True),
    ("C2 join on a seen on c (and told to a), p50 ms", "BenchmarkC2ProcsJoinVisible", "p50-ms", "C2_join", "p50_ms", False),
    ("C2 killed node (kill -9) seen down, ms", "BenchmarkC2ProcsKilledNode", "ms-to-nodedown", "C2_killed", "median_ms", False),
    ("C2 killed node's members gone, ms", "BenchmarkC2ProcsKilledNode", "ms-to-members-gone", "C2_killed", "median_ms", False),
]

EXTRA = [
    ("C1 call allocations per call, caller's process", "BenchmarkC1ProcsCall", "allocs/op"),
    ("C1 call bytes per call, caller's process", "BenchmarkC1ProcsCall", "B/op"),
    ("C1 bare TCP round trip between two processes (the floor), rt/s", "BenchmarkC1ProcsTCPBaseline", "rt/s"),
    ("C1 bare TCP round trip p50, µs", "BenchmarkC1ProcsTCPBaseline", "p50-µs"),
    ("C1 bare TCP round trip p99, µs", "BenchmarkC1ProcsTCPBaseline", "p99-µs"),
    ("in-process C1 sends, msgs/s (both nodes in one process)", "BenchmarkC1RemoteSend", "msgs/s"),
    ("in-process C1 call round trips/s", "BenchmarkC1CallRoundTrip", "calls/s"),
    ("in-process C1 call p99, µs", "BenchmarkC1CallRoundTrip", "p99-µs"),
    ("in-process allocations per call (both ends)", "BenchmarkC1CallRoundTrip", "allocs/op"),
]


def fmt(x):
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def main(d):
    rounds = sorted(int(m.group(1)) for f in glob.glob(os.path.join(d, "go_*.txt")) if (m := re.search(r"go_(\d+)", f)))
    G = {r: gotp(os.path.join(d, f"go_{r}.txt")) for r in rounds}
    B = {r: beam(os.path.join(d, f"beam_{r}.txt")) for r in rounds if os.path.exists(os.path.join(d, f"beam_{r}.txt"))}
    print(f"{len(rounds)} rounds")
    print()
    print("| figure | gotp (median) | Erlang/OTP (median) | gotp ÷ Erlang, median of rounds (range) |")
    print("|---|---|---|---|")
    for label, gb, gu, bl, bk, higher in ROWS:
        gv = [G[r][gb][gu] for r in rounds if gb in G[r] and gu in G[r][gb]]
        bv = [B[r][bl][bk] for r in rounds if r in B and bl in B[r] and bk in B[r][bl]]
        ratios = []
        for r in rounds:
            try:
                g, b = G[r][gb][gu], B[r][bl][bk]
            except KeyError:
                continue
            ratios.append(g / b if higher else b / g)
        if not gv:
            continue
        cell_b = fmt(statistics.median(bv)) if bv else "–"
        if ratios:
            word = "×" if higher else "× (Erlang's ÷ gotp's: higher is better for gotp)"
            cell_r = f"{statistics.median(ratios):.2f}{word} ({min(ratios):.2f}–{max(ratios):.2f})"
        else:
            cell_r = "–"
        print(f"| {label} | {fmt(statistics.median(gv))} | {cell_b} | {cell_r} |")
    print()
    for label, gb, gu in EXTRA:
        gv = [G[r][gb][gu] for r in rounds if gb in G[r] and gu in G[r][gb]]
        if gv:
            print(f"- {label}: {fmt(statistics.median(gv))} (rounds {fmt(min(gv))}–{fmt(max(gv))})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/cluster-sit")
