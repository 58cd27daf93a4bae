#!/usr/bin/env python3
"""Summary of one ab.sh output from its per-job lines ("bench set-up rN
bytes median mean"), for a run that ab.sh's own summary did not reach (its
time limit): per benchmark and size, each set-up's median over jobs of the
jobs' medians and of their means, and the ratios to vader.
    python3 summ.py FILE [BENCH...]"""
import collections
import statistics as S
import sys

d=collections.defaultdict(list); names=[]
for f in [sys.argv[1]]:
    for l in open(f):
        p=l.split()
        if len(p)>=6 and p[2].startswith('r'):
            if p[1] not in names: names.append(p[1])
            try: d[(p[0],p[1],int(p[3]))].append((float(p[4]),float(p[5])))
            except ValueError: pass
benches=sys.argv[2:] or sorted({k[0] for k in d})
for b in benches:
    setups=[s for s in names if any(k[0]==b and k[1]==s for k in d)]
    sizes=sorted({k[2] for k in d if k[0]==b})
    print(f"=== {b}  (jobs: "+", ".join(f"{s} {len(d[(b,s,sizes[0])])}" for s in setups)+")")
    print("bytes  "+"  ".join(f"{s:>15}" for s in setups)+"  "+"  ".join(f"{s+'/vader':>13}" for s in setups if s!='vader'))
    for z in sizes:
        m={s:(S.median(x[0] for x in d[(b,s,z)]),S.median(x[1] for x in d[(b,s,z)])) for s in setups if d[(b,s,z)]}
        row=f"{z:<6} "+"  ".join(f"{m[s][0]:7.3f}/{m[s][1]:7.3f}" if s in m else f"{'-':>15}" for s in setups)
        if 'vader' in m:
            row+="  "+"  ".join(f"{m[s][0]/m['vader'][0]:6.2f}/{m[s][1]/m['vader'][1]:6.2f}" for s in setups if s!='vader' and s in m)
        print(row)
