#!/bin/sh
# device, issue 31: A/B of trees under _build-dev2 against vader in one call
# usage: sh _build-dev2/run3.sh NAME BENCHES ROUNDS MAX TREE...
set -u
t=$PWD
export PATH=$t/.devtools/bin:$PATH
OUT=${OUT:-$t/device-out}; mkdir -p "$OUT"
name=$1 benches=$2 rounds=$3 max=$4; shift 4
trees="$*"
for v in $trees; do
  [ -f _build-dev2/$v/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so ] && continue
  (cd _build-dev2/$v && touch m4/* && sleep 1 && touch aclocal.m4 && sleep 1 && touch configure config.h.in && find . -name Makefile.in -exec touch {} + && rm -rf _b && mkdir -p _b && cd _b && ../configure CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j8 >make.out 2>&1) &
done
wait
set --
for v in $trees; do
  [ -f _build-dev2/$v/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so ] || { echo "build $v failed"; exit 1; }
  set -- "$@" --setup "$v" "build=$t/_build-dev2/$v/_b"
done
T=$t/_build-dev2/$v
export top_builddir=$T/_b top_srcdir=$T
timeout 570 sh $T/benchmarks/ab.sh --rounds "$rounds" --max "$max" --reps 5 --benches "$benches" "$@" --setup vader vader --ref vader > "$OUT/ab-$name.txt" 2>&1
echo "rc $?"
sed -n '/===/,$p' "$OUT/ab-$name.txt"
