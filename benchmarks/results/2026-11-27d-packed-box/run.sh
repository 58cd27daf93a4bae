#!/bin/sh
# device, issue 31: builds base (4f5b298, main before this session) and cur
# (main with packed fast boxes), then ab.sh against vader, heap on and off.
# usage: sh _build-dev2/run.sh NAME BENCHES ROUNDS [MAX]
set -u
t=$PWD
export PATH=$t/.devtools/bin:$PATH
OUT=${OUT:-$t/device-out}; mkdir -p "$OUT"
name=$1 benches=$2 rounds=$3 max=${4:-2048}
{ nproc; lscpu | grep -E 'Model name|NUMA node\(s\)'; ompi_info | grep -E 'Open MPI:'; } >"$OUT/facts.txt" 2>&1
for v in base cur; do
  [ -f _build-dev2/$v/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so ] && continue
  (cd _build-dev2/$v && touch m4/* && sleep 1 && touch aclocal.m4 && sleep 1 && touch configure config.h.in && find . -name Makefile.in -exec touch {} + && rm -rf _b && mkdir -p _b && cd _b && ../configure CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j8 >make.out 2>&1) &
done
wait
for v in base cur; do
  [ -f _build-dev2/$v/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so ] || { echo "build $v failed"; tail -5 _build-dev2/$v/_b/make.out _build-dev2/$v/_b/configure.out; exit 1; }
done
T=$t/_build-dev2/cur B=$t/_build-dev2/base/_b
export top_builddir=$T/_b top_srcdir=$T
timeout 570 sh $T/benchmarks/ab.sh --rounds "$rounds" --max "$max" --reps 5 --benches "$benches" \
  --setup base "build=$B" --setup base-heap "build=$B heap" --setup cur "build=$T/_b" --setup cur-heap "build=$T/_b heap" \
  --setup vader vader --ref vader > "$OUT/ab-$name.txt" 2>&1
echo "rc $?"
sed -n '/===/,$p' "$OUT/ab-$name.txt"
