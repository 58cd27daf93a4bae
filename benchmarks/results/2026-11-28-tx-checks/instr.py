import sys, re, subprocess, collections
# instr.py CGFILE SO FUNC : per-instruction Ir of FUNC (self), joined with objdump -dl
cg, so, func = sys.argv[1:4]
names = {}
cur = None; counts = collections.Counter(); last = 0
infn = False; incall = False
for line in open(cg, errors='replace'):
    line = line.rstrip('\n')
    if line.startswith('fn='):
        m = re.match(r'fn=\((\d+)\)(?:\s+(.*))?', line)
        if m.group(2): names[m.group(1)] = m.group(2)
        infn = names.get(m.group(1)) == func; continue
    if line.startswith('cfn='):
        m = re.match(r'cfn=\((\d+)\)(?:\s+(.*))?', line)
        if m and m.group(2): names[m.group(1)] = m.group(2)
        continue
    if line.startswith('calls='): incall = True; continue
    if not infn: 
        continue
    if line and (line[0] in '0123456789+-*'):
        parts = line.split()
        a = parts[0]
        if a.startswith('0x'): addr = int(a, 16)
        elif a.startswith('+'): addr = last + int(a[1:], 16 if a[1:].startswith('0x') else 10) if False else last + int(a[1:],0)
        elif a.startswith('-'): addr = last - int(a[1:],0)
        elif a == '*': addr = last
        else: addr = int(a,0)
        last = addr
        if incall: incall = False; continue
        if len(parts) >= 3: counts[addr] += int(parts[2])
        elif len(parts) == 2: counts[addr] += int(parts[1])
nmout = subprocess.run(['nm', so], capture_output=True, text=True).stdout
sym = [l.split() for l in nmout.splitlines() if l.endswith(' ' + func)]
symaddr = int(sym[0][0], 16)
base = 0
# find base as min runtime addr minus symbol addr (function entry executed)
dis = subprocess.run(['objdump', '-dl', '--no-show-raw-insn', '--disassemble=' + func, so], capture_output=True, text=True).stdout
ncalls = int(sys.argv[4]) if len(sys.argv) > 4 else 1
for l in dis.splitlines():
    m = re.match(r'\s+([0-9a-f]+):\s+(.*)', l)
    if m:
        a = int(m.group(1), 16) + base
        c = counts.get(a, 0)
        print(f"{c/ncalls:7.2f} {l}" if c else f"        {l}")
    else:
        print("        " + l)
