import sys, collections, statistics as st
f, bench, a, b = sys.argv[1:5]
d=collections.defaultdict(dict)
for l in open(f):
    x=l.split()
    if len(x)==6 and x[0]==bench: d[(x[1],int(x[3]))][x[2]]=float(x[4])
sizes=sorted({s for (_,s) in d})
for s in sizes:
    A=d[(a,s)]; B=d[(b,s)]
    r=[A[k]/B[k] for k in A if k in B]
    if r: print(s, len(r), 'median %.3f mean %.3f q1 %.3f q3 %.3f'%(st.median(r), st.mean(r), *st.quantiles(r,n=4)[0:3:2]))
