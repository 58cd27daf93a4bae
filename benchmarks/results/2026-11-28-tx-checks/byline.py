#!/usr/bin/env python3
"""Sums instr.py output (one function's disassembly with Ir per instruction)
per inlined function and source line. Usage: byline.py INSTR_OUTPUT"""
import sys,re,collections
cnt=collections.OrderedDict(); cur=None; fn=None
for l in open(sys.argv[1]):
    s=l.strip()
    m=re.match(r'(\S+)\(\):$',s)
    if m: fn=m.group(1); continue
    m=re.match(r'/\S+/(\S+:\d+)',s)
    if m: cur=fn+' '+m.group(1); continue
    m=re.match(r'([\d.]+)\s+[0-9a-f]+:',s)
    if m and cur: cnt[cur]=cnt.get(cur,0)+float(m.group(1))
tot=sum(cnt.values())
for k,v in cnt.items():
    if v>=0.5: print(f"{v:6.1f} {k}")
print("total",tot)
