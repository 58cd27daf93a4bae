#!/bin/sh
# second call: bw and bibw again, 5 rounds, before/after/vader (is after's bibw at 8-512 B worse?)
set -u
t=$PWD
export PATH=$t/.devtools/bin:$PATH
OUT=${OUT:-$t/device-out}; mkdir -p "$OUT"
for v in before after after2; do
  [ -f _build-msgrate2/$v/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so ] ||
  (cd _build-msgrate2/$v && mkdir -p _b && cd _b && ../configure CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j8 >make.out 2>&1) &
done
wait
T=$t/_build-msgrate2/after B=$t/_build-msgrate2/before/_b A=$T/_b
export top_builddir=$A top_srcdir=$T
timeout 300 sh $T/benchmarks/ab.sh --rounds 5 --max 2048 --reps 7 --benches "bw" \
  --setup before "build=$B" --setup after "build=$A" --setup after2 "build=$t/_build-msgrate2/after2/_b" --setup vader vader --ref vader > "$OUT/ab-bw-after2.txt" 2>&1
tail -16 "$OUT/ab-bw-after2.txt"
