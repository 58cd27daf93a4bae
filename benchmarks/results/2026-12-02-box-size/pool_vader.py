import statistics, sys
setup=sys.argv[1]; files=sys.argv[2:]
for bench in ['bw','bibw','mbwmr','latency','mlat']:
    for size in ['1','2','4','8','16','2048']:
        xa=[];xv=[];wins=0;n=0
        for f in files:
            a=[];v=[]
            for line in open(f):
                p=line.split()
                if len(p)>=6 and p[0]==bench and p[2].startswith('r') and p[3]==size:
                    if p[1]==setup: a.append(float(p[4]))
                    if p[1]=='vader': v.append(float(p[4]))
            xa+=a; xv+=v
            wins+=sum(1 for x in a for y in v if x>y); n+=len(a)*len(v)
        if not xa or not xv: continue
        print(f"{bench:8s} {size:>5s}: {len(xa):2d} jobs, {setup}/vader {statistics.median(xa)/statistics.median(xv):.2f} (means {statistics.mean(xa)/statistics.mean(xv):.2f}), P({setup}>vader within a call) {wins/n:.2f}")
