#!/usr/bin/env python3
"""Summarise a sitting of docs/bench/quiet-sitting.sh.

    python3 docs/bench/quiet-sitting.py /tmp/sit

Prints, for each pair of a gotp figure and its BEAM anchor, the figure of
every round, the medians, and the median of the per-round ratios (the
figure BENCHMARKS.md quotes). Only the standard library is used.
"""
import glob
import os
import re
import statistics
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/sit"


def rounds():
    rs = set()
    for f in glob.glob(os.path.join(out, "*_[0-9]*.txt")):
        m = re.search(r"_(\d+)\.txt$", f)
        if m:
            rs.add(int(m.group(1)))
    return sorted(rs)


def beam(script, r):
    """name -> ops_per_sec of one BEAM output file."""
    res = {}
    try:
        with open(os.path.join(out, f"beam_{script}_{r}.txt")) as f:
            for line in f:
                m = re.match(r"(\S+) ops_per_sec=([\d.]+)(?: .*mem=(\S+))?", line)
                if m:
                    res[m.group(1)] = float(m.group(2))
                    if m.group(3) and m.group(3) != "-":
                        res[m.group(1) + ":mem"] = m.group(3)
    except FileNotFoundError:
        pass
    return res


def gobench(file, r):
    """(benchmark name without -N, unit) -> value of one go test output file."""
    res = {}
    try:
        with open(os.path.join(out, f"go_{file}_{r}.txt")) as f:
            for line in f:
                if not line.startswith("Benchmark"):
                    continue
                parts = line.split()
                name = re.sub(r"-\d+$", "", parts[0])
                vals = parts[2:]
                for i in range(0, len(vals) - 1, 2):
                    try:
                        res[(name, vals[i + 1])] = float(vals[i])
                    except ValueError:
                        pass
    except FileNotFoundError:
        pass
    return res


# (label, go file, go benchmark, go unit, beam script, beam name)
PAIRS = [
    ("W6 spawn+exit/s", "rt", "BenchmarkW6SpawnExit", "spawns/s", "w6", "W6_spawn_exit"),
    ("W7 ping-pong round trips/s", "rt", "BenchmarkW7PingPong", "roundtrips/s", "w7", "W7_ping_pong"),
    ("W7 fan-in 8->1 msgs/s", "rt", "BenchmarkW7FanIn", "msgs/s", "w7", "W7_fan_in"),
    ("W5 joins/s", "pg", "BenchmarkW5PGJoin", "joins/s", "w5", "W5_pg_join"),
    ("W5 broadcast, handler members", "pg", "BenchmarkW5PGBroadcast", "deliveries/s", "w5", "W5_pg_broadcast"),
    ("W5 broadcast, receive-loop members", "pg", "BenchmarkW5PGBroadcastReceiveLoop", "deliveries/s", "w5", "W5_pg_broadcast"),
    ("W1 registrations/s, 2 partitions", "reg", "BenchmarkW1RegistryRegister/partitions=2", "registrations/s", "w12", "W1_registry_unique_register_p2"),
    ("W1 registrations/s, 1 partition", "reg", "BenchmarkW1RegistryRegister/partitions=1", "registrations/s", "w12", "W1_registry_unique_register_p1"),
    ("W1 baseline map, 2 partitions", "reg", "BenchmarkW1Baseline/partitions=2", "registrations/s", "w12", "W1_registry_unique_register_p2"),
    ("W2 Find, 2 partitions", "reg", "BenchmarkW2RegistryLookup/partitions=2/find", "lookups/s", "w12", "W2_registry_unique_lookup_p2"),
    ("W2 Lookup, 2 partitions", "reg", "BenchmarkW2RegistryLookup/partitions=2/lookup", "lookups/s", "w12", "W2_registry_unique_lookup_p2"),
    ("W2 Find, 1 partition", "reg", "BenchmarkW2RegistryLookup/partitions=1/find", "lookups/s", "w12", "W2_registry_unique_lookup_p1"),
    ("W2 baseline map, 2 partitions", "reg", "BenchmarkW2Baseline/partitions=2", "lookups/s", "w12", "W2_registry_unique_lookup_p2"),
    ("W2 baseline: one plain map, no lock", "reg", "BenchmarkW2BaselinePlainMap", "lookups/s", "w12", "W2_registry_unique_lookup_p2"),
    ("W3 handler, 2 partitions, parallel", "reg", "BenchmarkW3RegistryDispatch/handler/partitions=2", "deliveries/s", "w3", "W3_registry_duplicate_dispatch_p2_parallel"),
    ("W3 handler, 2 partitions, serial", "reg", "BenchmarkW3RegistryDispatch/handler/partitions=2/serial", "deliveries/s", "w3", "W3_registry_duplicate_dispatch_p2"),
    ("W3 handler, 1 partition", "reg", "BenchmarkW3RegistryDispatch/handler/partitions=1", "deliveries/s", "w3", "W3_registry_duplicate_dispatch_p1"),
    ("W3 receive-loop, 2 partitions, parallel", "reg", "BenchmarkW3RegistryDispatch/receive-loop/partitions=2", "deliveries/s", "w3", "W3_registry_duplicate_dispatch_p2_parallel"),
    ("W3 receive-loop, 2 partitions, serial", "reg", "BenchmarkW3RegistryDispatch/receive-loop/partitions=2/serial", "deliveries/s", "w3", "W3_registry_duplicate_dispatch_p2"),
    ("W3 receive-loop, 1 partition", "reg", "BenchmarkW3RegistryDispatch/receive-loop/partitions=1", "deliveries/s", "w3", "W3_registry_duplicate_dispatch_p1"),
    ("W3 baseline: bare channels, 2 senders (parallel)", "reg", "BenchmarkW3BaselineChannels/parallel", "deliveries/s", "w3", "W3_registry_duplicate_dispatch_p2_parallel"),
    ("W3 baseline: bare channels, 1 sender (serial)", "reg", "BenchmarkW3BaselineChannels/serial", "deliveries/s", "w3", "W3_registry_duplicate_dispatch_p2"),
    ("W4 cleanups/s, 100,000", "w4", "BenchmarkW4RegistryCleanup/cleanup", "cleanups/s", "w4", "W4_registry_cleanup_p2"),
    ("W4 spawn-register-exit cycles/s", "w4", "BenchmarkW4RegistryCleanup/cycle", "cycles/s", "w4", "W4_registry_spawn_register_exit_cycle_p2"),
    ("W8 restarts/s, 10,000 kills", "sup", "BenchmarkW8Restart/genserver/kills=10000", "restarts/s", "w8", "W8_supervisor_restart_genserver"),
    ("W8 restarts/s, 1,000 kills", "sup", "BenchmarkW8Restart/genserver/kills=1000", "restarts/s", "w8", "W8_supervisor_restart_genserver_1k"),
    ("W8 dynamic starts/s vs DynamicSupervisor", "sup", "BenchmarkW8DynamicStart", "starts/s", "w8", "W8_dynamic_supervisor_start_child"),
    ("W8 dynamic starts/s vs simple_one_for_one", "sup", "BenchmarkW8DynamicStart", "starts/s", "w8", "W8_simple_one_for_one_start_child"),
    ("W8 starts without a supervisor call", "sup", "BenchmarkW8DynamicStartBaseline", "starts/s", "w8", "W8_simple_one_for_one_start_child"),
]


def fmt(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.2f}"


def main():
    rs = rounds()
    print(f"rounds: {rs}")
    print("| figure | gotp per round | gotp median | BEAM per round | BEAM median | ratio per round | median ratio |")
    print("|---|---|---|---|---|---|---|")
    for label, gf, gname, unit, bs, bname in PAIRS:
        g, b, ratio = [], [], []
        for r in rs:
            gv = gobench(gf, r).get((gname, unit))
            bv = None
            bv = beam(bs, r).get(bname)
            if gv is not None:
                g.append(gv)
            if bv is not None:
                b.append(bv)
            if gv is not None and bv is not None and bv > 0:
                ratio.append(gv / bv)
        if not g:
            continue
        med = lambda xs: fmt(statistics.median(xs)) if xs else "-"
        print(f"| {label} | {', '.join(fmt(x) for x in g)} | {med(g)} | {', '.join(fmt(x) for x in b)} | {med(b)} | "
              f"{', '.join(f'{x:.2f}' for x in ratio)} | {('%.2f×' % statistics.median(ratio)) if ratio else '-'} |")


if __name__ == "__main__":
    main()
