#!/bin/sh
# device runner for issue 31, third slice (branch msgrate3): sh _build-msgrate3/run.sh
set -u
t=$PWD
export PATH=$t/.devtools/bin:$PATH
OUT=${OUT:-$t/device-out}; mkdir -p "$OUT"
{ echo "== machine"; nproc; lscpu | grep -E 'Model name|NUMA node\(s\)'; ompi_info | grep -E 'Open MPI:'; } >"$OUT/facts.txt" 2>&1
for v in before after; do
  (cd _build-msgrate3/$v && mkdir -p _b && cd _b && ../configure CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j8 >make.out 2>&1) &
done
wait
for v in before after; do [ -f _build-msgrate3/$v/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so ] || { echo "build $v failed"; tail -20 _build-msgrate3/$v/_b/make.out _build-msgrate3/$v/_b/configure.out; exit 1; }; done
T=$t/_build-msgrate3/after B=$t/_build-msgrate3/before/_b A=$T/_b
export top_builddir=$A top_srcdir=$T
timeout 360 sh $T/benchmarks/ab.sh --rounds 3 --max 2048 --reps 7 --benches "bw bibw mbwmr latency" \
  --setup before "build=$B" --setup after "build=$A" --setup before-heap "build=$B heap" --setup after-heap "build=$A heap" \
  --setup vader vader --ref vader > "$OUT/ab-small.txt" 2>&1
timeout 75 sh $T/benchmarks/ab.sh --rounds 2 --max 4194304 --reps 5 --benches "bw" \
  --setup before "build=$B" --setup after "build=$A" --setup vader vader --ref before > "$OUT/ab-large.txt" 2>&1
tail -90 "$OUT/ab-small.txt"; tail -30 "$OUT/ab-large.txt"
