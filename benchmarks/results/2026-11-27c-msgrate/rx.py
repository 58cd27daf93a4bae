#!/usr/bin/env python3
"""rx.py FILE: the receiver's per-message split from cg_incl's sums (the rank that received 96,258)."""
import sys, subprocess, re
f = sys.argv[1]
out = subprocess.run(['python3', '/tmp/cg3/cg_incl.py', f], capture_output=True, text=True).stdout
d = {}
for l in out.splitlines():
    m = re.match(r'(.*?)\s+calls\s+(\d+) incl\s+(\d+)', l)
    if m: d[m.group(1)] = (int(m.group(2)), int(m.group(3)))
M = d['mca_pml_ob1_recv_frag_callback_match'][0]
if M < 90000: sys.exit(0)
g = lambda k: d.get(k, (0, 0))
prog, deliv, recv, match = g('ivshmem_progress'), g('ivshm__deliver'), g('mca_btl_ivshmem_recv'), g('mca_pml_ob1_recv_frag_callback_match')
print(f"{f}: msgs {M} passes {prog[0]} deliver calls {deliv[0]}")
print(f"  pass per msg, ob1 match excluded: {(prog[1]-match[1])/M:.1f}")
print(f"  channel deliver without the BTL's recv: {(deliv[1]-recv[1])/M:.1f}")
print(f"  BTL recv without ob1's match: {(recv[1]-match[1])/M:.1f}")
print(f"  polling around deliver (progress - deliver) per msg {(prog[1]-deliv[1])/M:.1f}, per pass {(prog[1]-deliv[1])/prog[0]:.1f}")
