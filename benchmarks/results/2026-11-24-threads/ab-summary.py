#!/usr/bin/env python3
"""Summarises mt-btls.sh and ab-eager.sh output (argv[1]): per benchmark,
size and set-up the median over rounds of the medians, and each set-up's
ratio to vader."""
import collections,statistics,sys
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    f=l.split()
    if len(f)<6 or not f[3].startswith('r') or not f[3][1:].isdigit(): 
        if len(f)>=6 and f[2].startswith('r'): pass
    # lines: bench setup rN bytes med mean
    if len(f)==6 and f[2].startswith('r') and f[3].isdigit():
        d[(f[0],f[1],int(f[3]))].append(float(f[4]))
for b in sorted({k[0] for k in d}):
    setups=[s for s in dict.fromkeys(k[1] for k in d if k[0]==b)]
    setups=[s for s in setups if s!='vader']+['vader']
    print('#',b,' '.join(setups),' then / vader')
    for n in sorted({k[2] for k in d if k[0]==b}):
        m={s:statistics.median(d[(b,s,n)]) for s in setups}
        print(f'{n:8d} '+' '.join(f'{m[s]:8.3f}' for s in setups)+'  '+' '.join(f'{m[s]/m["vader"]:5.2f}' for s in setups[:-1]))
