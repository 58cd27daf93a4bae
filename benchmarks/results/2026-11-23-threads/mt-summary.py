#!/usr/bin/env python3
"""Summarises mt.sh's and mt-ab.sh's output (argv[1]): per benchmark, size
and set-up, the median over rounds of the medians, and each set-up's ratio
to vader by medians (and by means, where the file has them)."""
import collections
import statistics
import sys

med = collections.defaultdict(list)
avg = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 5 or not f[3].isdigit():
        continue
    key = (f[0], f[1], int(f[3]))
    med[key].append(float(f[4]))
    if len(f) > 5:
        avg[key].append(float(f[5]))
for bench in sorted({k[0] for k in med}):
    setups = sorted({k[1] for k in med if k[0] == bench} - {"vader"}) + ["vader"]
    print(f"# {bench}: {', '.join(setups)}; then each / vader by medians | by means")
    for size in sorted({k[2] for k in med if k[0] == bench}):
        m = {s: statistics.median(med[(bench, s, size)]) for s in setups}
        line = f"{size:6d} " + " ".join(f"{m[s]:8.3f}" for s in setups)
        line += "  " + " ".join(f"{m[s] / m['vader']:5.2f}" for s in setups[:-1])
        if avg[(bench, "vader", size)]:
            a = {s: statistics.median(avg[(bench, s, size)]) for s in setups}
            line += " | " + " ".join(f"{a[s] / a['vader']:5.2f}" for s in setups[:-1])
        print(line)
