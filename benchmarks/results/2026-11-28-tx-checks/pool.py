#!/usr/bin/env python3
"""Pools the per-job lines ("bench set-up rN bytes median mean") of several
ab.sh outputs: per benchmark and size, each set-up's median over every
job, and the share of (A, B) job pairs where A's job was faster.
    python3 pool.py A B BENCH SIZES FILE...
e.g. python3 pool.py base new bibw 1,2,4,8 ab-A-rate.txt ab-C-rate-h100.txt"""
import statistics
import sys

a, b, bench, sizes = sys.argv[1:5]
jobs = {}
for f in sys.argv[5:]:
    for line in open(f):
        p = line.split()
        if len(p) >= 6 and p[0] == bench and p[2].startswith('r'):
            jobs.setdefault((p[1], p[3]), []).append(float(p[4]))
for size in sizes.split(','):
    xa, xb = jobs.get((a, size), []), jobs.get((b, size), [])
    xv = jobs.get(('vader', size), [])
    if not xa or not xb:
        continue
    faster = sum(1 for x in xa for y in xb if x > y) / (len(xa) * len(xb))
    line = (f"{bench} {size} B: {len(xa)} jobs; {a} {statistics.median(xa):.1f}"
            f", {b} {statistics.median(xb):.1f}")
    if xv:
        line += f", vader {statistics.median(xv):.1f}"
    print(line + f"; P({a} job faster than {b} job) = {faster:.2f}")
