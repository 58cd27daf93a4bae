#!/bin/sh
# run5.sh NAME "BENCHES" ROUNDS MAX SETUP... ; SETUP = name=tree[,word...]
# (tree: a folder of _build-dev2 with the generated build system; words go
# to ab.sh's set-up, e.g. heap, notcp). Builds each tree once (in
# parallel), then one ab.sh call from tree $ABTREE (default new) with the
# set-ups and vader, vader the reference. Output: $OUT/ab-NAME.txt
# PAIRS=N (optional) sets ab.sh's --pairs for mlat and mbwmr.
# DEVCC=compiler (optional) configures every tree with CC=compiler (the
# device's default gcc wrapper cannot run lto-wrapper: DEVCC=/usr/bin/gcc).
set -u
t=$PWD
export PATH=$t/.devtools/bin:$PATH
OUT=${OUT:-$t/device-out}; mkdir -p "$OUT"
name=$1 benches=$2 rounds=$3 max=$4; shift 4
built=" "
for s in "$@"; do
  tree=${s#*=}; tree=${tree%%,*}
  case "$built" in *" $tree "*) continue ;; esac # one build per tree
  built="$built$tree "
  d=$t/_build-dev2/$tree
  [ -f $d/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so ] ||
  (cd $d && mkdir -p _b && cd _b && ../configure ${DEVCC:+"CC=$DEVCC"} CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j8 >make.out 2>&1 || tail -20 make.out) &
done
wait
set --  "$@"
args=""
i=0
for s in "$@"; do
  i=$((i+1))
  sn=${s%%=*}; rest=${s#*=}; tree=${rest%%,*}; words=""
  case $rest in *,*) words=$(echo "${rest#*,}" | tr ',' ' ') ;; esac
  eval "sn_$i=\$sn; sw_$i=\"build=$t/_build-dev2/$tree/_b \$words\""
done
n=$i
T=$t/_build-dev2/${ABTREE:-new}
export top_builddir=$T/_b top_srcdir=$T
set -- --rounds "$rounds" --max "$max" --reps 7 --benches "$benches" ${PAIRS:+--pairs $PAIRS}
i=1
while [ $i -le $n ]; do eval "set -- \"\$@\" --setup \"\$sn_$i\" \"\$sw_$i\""; i=$((i+1)); done
set -- "$@" --setup vader vader --ref vader
{ nproc; lscpu | grep -E 'Model name'; } > "$OUT/machine-$name.txt" 2>&1
timeout ${LIMIT:-560} sh $T/benchmarks/ab.sh "$@" > "$OUT/ab-$name.txt" 2>&1
echo "rc=$?"
sed -n '/median over/,$p' "$OUT/ab-$name.txt" | head -80
