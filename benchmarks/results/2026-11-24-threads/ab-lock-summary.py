#!/usr/bin/env python3
"""Summarises ab-lock.sh output (argv[1]): per size and set-up the median
over rounds of the medians, and the ratios to vader under the same thread
level."""
import collections,statistics,sys
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    f=l.split()
    if len(f)<6 or f[0]!='lat': continue
    d[(f[1],int(f[3]))].append(float(f[4]))
labels=[x for x in ['ivs-T','ivs-T-nolock','ivs-single','vader-T','vader-single'] if any(k[0]==x for k in d)]
print('bytes '+' '.join(f'{x:>13}' for x in labels)+'  ivs-T/vader-T ivs/vader')
for s in sorted({k[1] for k in d}):
    m={x:statistics.median(d[(x,s)]) for x in labels}
    print(f'{s:5d} '+' '.join(f'{m[x]:13.3f}' for x in labels)+f'  {m["ivs-T"]/m["vader-T"]:8.2f} {m["ivs-single"]/m["vader-single"]:8.2f}')
