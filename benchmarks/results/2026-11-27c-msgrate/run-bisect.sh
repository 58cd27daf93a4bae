#!/bin/sh
# bisect the small-message bw between e050ed6 and 34c3847 (device)
set -u
t=$PWD
export PATH=$t/.devtools/bin:$PATH
OUT=${OUT:-$t/device-out}; mkdir -p "$OUT"
cs="e050ed6 155fcaa 7bf7a22 20fa295 a0260c2 34c3847"
for v in $cs; do
  (cd _build-bisect/$v && touch m4/* && sleep 1 && touch aclocal.m4 && sleep 1 && touch configure config.h.in Makefile.in && rm -rf _b && mkdir -p _b && cd _b && ../configure CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j3 >make.out 2>&1) &
done
wait
set --
for v in $cs; do
  [ -f _build-bisect/$v/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so ] || { echo "build $v failed"; tail -5 _build-bisect/$v/_b/make.out; exit 1; }
  set -- "$@" --setup "c$v" "build=$t/_build-bisect/$v/_b"
done
T=$t/_build-bisect/34c3847
export top_builddir=$T/_b top_srcdir=$T
timeout 400 sh $T/benchmarks/ab.sh --rounds 5 --max 1024 --reps 5 --benches "bw" "$@" --setup vader vader --ref ce050ed6 > "$OUT/ab-bisect.txt" 2>&1
tail -16 "$OUT/ab-bisect.txt"
