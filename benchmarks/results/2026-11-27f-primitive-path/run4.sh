#!/bin/sh
# device, issue 31: A/B of trees under _build-dev2 against vader in one call
# usage: sh _build-dev2/run4.sh NAME BENCHES ROUNDS MAX SETUP...
#   SETUP: name=tree[,word...] (words as ab.sh --setup takes them, commas
#   for blanks), e.g. final-heap=final,heap
set -u
t=$PWD
export PATH=$t/.devtools/bin:$PATH
OUT=${OUT:-$t/device-out}; mkdir -p "$OUT"
name=$1 benches=$2 rounds=$3 max=$4; shift 4
{ nproc; lscpu | grep -E 'Model name|NUMA node\(s\)'; ompi_info | grep -E 'Open MPI:'; } >"$OUT/facts-$name.txt" 2>&1
trees=$(for s in "$@"; do v=${s#*=}; echo "${v%%,*}"; done | sort -u)
for v in $trees; do
  [ -f _build-dev2/$v/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so ] && continue
  (cd _build-dev2/$v && touch m4/* && sleep 1 && touch aclocal.m4 && sleep 1 && touch configure config.h.in && find . -name Makefile.in -exec touch {} + && rm -rf _b && mkdir -p _b && cd _b && ../configure CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j8 >make.out 2>&1) &
done
wait
for v in $trees; do
  [ -f _build-dev2/$v/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so ] || { echo "build $v failed"; tail -5 _build-dev2/$v/_b/make.out _build-dev2/$v/_b/configure.out; exit 1; }
done
args=""
for s in "$@"; do
  n=${s%%=*} v=${s#*=}; tree=${v%%,*}; words=""
  case $v in *,*) words=$(echo "${v#*,}" | tr , ' ') ;; esac
  args="$args --setup $n 'build=$t/_build-dev2/$tree/_b $words'"
done
T=$t/_build-dev2/${ABTREE:-prim2}
export top_builddir=$T/_b top_srcdir=$T
eval "timeout 560 sh $T/benchmarks/ab.sh --rounds $rounds --max $max --reps 5 --benches '$benches' $args --setup vader vader --ref vader" > "$OUT/ab-$name.txt" 2>&1
echo "rc $?"
sed -n '/===/,$p' "$OUT/ab-$name.txt"
