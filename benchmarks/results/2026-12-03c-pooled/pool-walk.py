#!/usr/bin/env python3
"""Pools the ivshm-lat runs of calls P (lat-walk-N.txt) and Q (lat-walk-Q.txt):
per run the walk, one pair and 1/8/16 B with both ratios; then per size the
median, mean and range of each ratio over all runs.
    python3 pool-walk.py [FOLDER]"""
import glob, re, statistics as st, sys
D = (sys.argv[1] if len(sys.argv) > 1 else '.') + '/'
def parse(text):
    out = []
    for blk in re.split(r'=== run \d+\n', text):
        w = re.search(r'# raw cache-line ping-pong: p50 ([\d.]+)', blk)
        o = re.search(r'# raw ping-pong, one pair: p50 ([\d.]+)', blk)
        if not w or not o:
            continue
        rows = {int(m.group(1)): float(m.group(2))
                for m in re.finditer(r'^ +(\d+) +([\d.]+)', blk, re.M)}
        out.append((float(w.group(1)), float(o.group(1)), rows))
    return out
runs = []
for f in sorted(glob.glob(D + 'lat-walk-[0-9]*.txt')):
    runs += [('P',) + r for r in parse(open(f).read())]
runs += [('Q',) + r for r in parse(open(D + 'lat-walk-Q.txt').read())]
print(len(runs), 'runs')
for c, w, o, rows in runs:
    print(c, 'walk %.1f one %.1f' % (w, o), ' '.join(
        '%d:%.1f(%.2f/%.2f)' % (b, rows[b], rows[b] / w, rows[b] / o)
        for b in (1, 8, 16)))
for b in (1, 2, 4, 8, 16, 32, 64):
    xw = [r[3][b] / r[1] for r in runs]
    xo = [r[3][b] / r[2] for r in runs]
    ns = [r[3][b] for r in runs]
    print(b, 'ns med %.1f | x walk med %.3f mean %.3f [%.2f-%.2f] | x one med '
          '%.3f mean %.3f [%.2f-%.2f]' % (st.median(ns), st.median(xw),
          st.mean(xw), min(xw), max(xw), st.median(xo), st.mean(xo),
          min(xo), max(xo)))
W = [r[1] for r in runs]
O = [r[2] for r in runs]
print('walk med %.1f [%.1f-%.1f]; one med %.1f [%.1f-%.1f]' % (
    st.median(W), min(W), max(W), st.median(O), min(O), max(O)))
