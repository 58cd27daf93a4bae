#!/bin/sh
# second call: is the 32-128 B latency loss the 64-cell fast box? after with btl_ivshmem_fbox_size 32
set -u
t=$PWD
export PATH=$t/.devtools/bin:$PATH
OUT=${OUT:-$t/device-out}; mkdir -p "$OUT"
for v in before after; do
  (cd _build-msgrate3/$v && mkdir -p _b && cd _b && ../configure CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j8 >make.out 2>&1) &
done
wait
T=$t/_build-msgrate3/after B=$t/_build-msgrate3/before/_b A=$T/_b
export top_builddir=$A top_srcdir=$T
timeout 230 sh $T/benchmarks/ab.sh --rounds 5 --max 256 --reps 7 --benches "latency bw" \
  --setup before "build=$B" --setup after "build=$A" --setup after-fb32 "build=$A --mca btl_ivshmem_fbox_size 32" \
  --setup vader vader --ref vader > "$OUT/ab-fb32.txt" 2>&1
tail -24 "$OUT/ab-fb32.txt"
