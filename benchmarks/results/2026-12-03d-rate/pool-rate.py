#!/usr/bin/env python3
"""pool-rate.py FILE...: osu_mbw_mr rows of ab.sh outputs (one ab-*.txt
per device call), in M messages/s. Per set-up and size: the median over
rounds of the jobs' medians, the mean of the jobs' means (where ab.sh
prints the median of the means), and
/ vader; then every size of one job pooled (the four small sizes do the
same work: a job is fast or slow as a whole, from where its lines lie),
and per round the job's median over its sizes / vader's in that round
(quartiles by statistics.quantiles' default, the exclusive method). A
job is one run of ivshm-osu: it measures every size, so "all" pools four
values of each job."""
import sys, statistics as st
rows = {}  # (setup, round, size) -> a job's median over its repetitions
means = {}  # the same -> the job's mean over its repetitions
for fn in sys.argv[1:]:
    for l in open(fn):
        f = l.split()
        if len(f) == 6 and f[0] == 'mbwmr' and f[2][0] == 'r':
            rows[(f[1], fn + ':' + f[2], int(f[3]))] = float(f[4])
            means[(f[1], fn + ':' + f[2], int(f[3]))] = float(f[5])
setups = sorted({k[0] for k in rows}, key=lambda s: (s == 'vader', s))
sizes = sorted({k[2] for k in rows})
def vals(s, size=None, d=rows):
    return [v for k, v in d.items() if k[0] == s and (size is None or k[2] == size)]
print(('size  ' + ''.join('%-26s' % s for s in setups)).rstrip())
for z in sizes + [None]:
    line = '%-6s' % (z if z else 'all')
    ref, refm = vals('vader', z), vals('vader', z, means)
    for s in setups:
        v, m = vals(s, z), vals(s, z, means)
        line += '%6.2f/%6.2f ' % (st.median(v), st.mean(m))
        line += ('x%.3f/%.3f ' % (st.median(v) / st.median(ref), st.mean(m) / st.mean(refm))
                 if s != 'vader' else '             ')
    print(line.rstrip() + '  (n=%d)' % len(ref))
rounds = sorted({k[1] for k in rows})
for s in setups[:-1]:
    r = []
    for rd in rounds:
        a = [v for k, v in rows.items() if k[0] == s and k[1] == rd]
        b = [v for k, v in rows.items() if k[0] == 'vader' and k[1] == rd]
        if a and b:
            r.append(st.median(a) / st.median(b))
    q = st.quantiles(r, n=4)
    print('%s: per round, job median / vader job median: median %.3f mean %.3f quartiles %.2f-%.2f, above 1 in %d of %d'
          % (s, st.median(r), st.mean(r), q[0], q[2], sum(x > 1 for x in r), len(r)))
