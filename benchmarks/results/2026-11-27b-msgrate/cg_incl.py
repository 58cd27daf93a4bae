#!/usr/bin/env python3
"""Per function: calls (summed over callers) and inclusive Ir of those calls
(from callgrind's calls= lines), from one callgrind.out file. Recursion is
not special-cased (none on these paths). A file written with
--dump-instr=yes (positions: instr line) is read as well.
Usage: incl.py FILE [name...]"""
import sys, re, collections
names = {}
def nm(kind, s):
    m = re.match(r'\((\d+)\)(?:\s+(.*))?', s)
    if not m: return s
    k = (kind, m.group(1))
    if m.group(2): names[k] = m.group(2)
    return names.get(k, s)
calls = collections.Counter(); incl = collections.Counter(); self_ = collections.Counter()
fn = None; pending = None; cfn = None; npos = 1
for line in open(sys.argv[1], errors='replace'):
    line = line.rstrip('\n')
    if line.startswith('positions:'): npos = len(line.split())-1; continue
    if line.startswith('fn='): fn = nm('fn', line[3:]); continue
    if line.startswith(('cfn=', 'cfi=', 'cfl=')):
        if line.startswith('cfn='): cfn = nm('fn', line[4:])
        elif True:
            nm('fl', line[4:])
        continue
    if line.startswith(('fl=', 'fi=', 'fe=')): nm('fl', line[3:]); continue
    if line.startswith('ob=') or line.startswith('cob='): nm('ob', line.split('=',1)[1]); continue
    if line.startswith('calls='):
        pending = int(line[6:].split()[0]); continue
    if line and (line[0].isdigit() or line[0] in '+-*'):
        parts = line.split()
        if len(parts) < npos+1: continue
        try: ir = int(parts[npos])
        except ValueError: continue
        if pending is not None:
            calls[cfn] += pending; incl[cfn] += ir; pending = None
        else:
            self_[fn] += ir
want = sys.argv[2:]
for f in sorted(incl, key=lambda f: -incl[f]):
    if want and not any(w == f for w in want): continue
    c = calls[f]
    print(f"{f:50s} calls {c:10d} incl {incl[f]:12d} per call {incl[f]/c if c else 0:8.1f}  self {self_[f]}")
