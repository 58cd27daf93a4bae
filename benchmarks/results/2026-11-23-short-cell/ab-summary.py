#!/usr/bin/env python3
"""Summarises ab-short.sh's output (argv[1]): per benchmark and size, the
median over rounds of each set-up's median and of its mean, and the
ratios old/vader, new/vader, new/old."""
import collections
import statistics
import sys

med = collections.defaultdict(list)
avg = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) != 6 or not f[0].isdigit():
        continue
    key = (f[2], int(f[3]), f[1])
    med[key].append(float(f[4]))
    avg[key].append(float(f[5]))
for bench in sorted({k[0] for k in med}):
    print(f"# {bench}: us, median over rounds; ratios against vader (medians | means)")
    print(f"{'bytes':>6} {'old':>7} {'new':>7} {'vader':>7} {'old/v':>6} {'new/v':>6} {'new/old':>7} | {'old/v':>6} {'new/v':>6}")
    for size in sorted({k[1] for k in med if k[0] == bench}):
        o, n, v = (statistics.median(med[(bench, size, s)]) for s in ("_old", "_new", "vader"))
        om, nm, vm = (statistics.median(avg[(bench, size, s)]) for s in ("_old", "_new", "vader"))
        print(f"{size:6d} {o:7.3f} {n:7.3f} {v:7.3f} {o/v:6.2f} {n/v:6.2f} {n/o:7.2f} | {om/vm:6.2f} {nm/vm:6.2f}")
