#!/bin/sh
# builds _build-dev2/walk, runs ivshm-lat N times on CPUs 2,4
set -u
t=$PWD; N=${1:-12}
export PATH=$t/.devtools/bin:$PATH
d=$t/_build-dev2/walk
(cd $d && mkdir -p _b && cd _b && ../configure CC=/usr/bin/gcc CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j16 >make.out 2>&1) || { tail -20 $d/_b/make.out; exit 1; }
B=$d/_b
for i in $(seq 1 $N); do
  r=/dev/shm/latwalk$i
  $B/libivshm/tools/ivshm format file:$r --size 64M --force >/dev/null
  $B/benchmarks/ivshm-lat --region file:$r --max 64 --cpus 2,4 > $OUT/lat-walk-$i.txt 2>&1
  rm -f $r
  grep -E '^# raw|^ +(1|8|16) ' $OUT/lat-walk-$i.txt
done
gcc -O2 -o /tmp/linepp $t/benchmarks/results/2026-12-03c-pooled/linepp.c 2>/dev/null ||
  gcc -O2 -o /tmp/linepp $d/benchmarks/results/2026-12-03c-pooled/linepp.c
for i in 6 7 8; do /tmp/linepp 2 4 64 20000 > $OUT/linepp-$i.txt; tail -2 $OUT/linepp-$i.txt; done
lscpu | grep -E 'Model name' > $OUT/machine-walk.txt; nproc >> $OUT/machine-walk.txt
