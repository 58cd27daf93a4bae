#!/usr/bin/env python3
"""per-message.py CALLGRIND_FILE...: for each receiver's file of
callgrind.sh (the rank whose ob1 match callback ran for every message),
instructions a message: the whole process (main), the component (the
BTL's progress less ob1's match, with opal_progress's own), the usual
steps' own (progress_usual*, the box's reader inlined), the handler's own
(mca_btl_ivshmem_recv_whole), and how many progress calls there were.
Uses ../2026-11-27b-msgrate/cg_incl.py."""
import os, re, subprocess, sys
CG = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                  '..', '2026-11-27b-msgrate', 'cg_incl.py')
def funcs(f):
    out = subprocess.run(['python3', CG, f], capture_output=True, text=True).stdout
    d = {}
    for l in out.splitlines():
        m = re.match(r'(\S+)\s+calls\s+(\d+) incl\s+(\d+) per call\s+\S+\s+self (\d+)', l)
        if m:
            d[m.group(1)] = tuple(int(m.group(i)) for i in (2, 3, 4))
    return d
for f in sys.argv[1:]:
    d = funcs(f)
    mt = d['mca_pml_ob1_recv_frag_callback_match']
    msgs = mt[0]
    if msgs < 50000:
        continue  # the sender: it matched only the replies
    ip, op = d['ivshmem_progress'], d['opal_progress']
    pu = [v for k, v in d.items() if k.startswith('progress_usual')]
    print('%s messages %d main %.1f component %.1f usual-steps %.1f recv_whole %.1f'
          ' progress-calls %d' % (os.path.basename(f), msgs, d['main'][1] / msgs,
          (ip[1] - mt[1] + op[2]) / msgs, sum(v[2] for v in pu) / msgs,
          d['mca_btl_ivshmem_recv_whole'][2] / msgs, ip[0]))
