#!/bin/sh
# device runner for issue 31 (branch msgrate): sh _build-msgrate/run.sh
set -u
t=$PWD
export PATH=$t/.devtools/bin:$PATH
OUT=${OUT:-$t/device-out}; mkdir -p "$OUT"
{ echo "== machine"; nproc; lscpu | grep -E 'Model name|NUMA node\(s\)'; ompi_info | grep -E 'Open MPI:'; command -v perf; } >"$OUT/facts.txt" 2>&1
for v in before after; do
  (cd _build-msgrate/$v && mkdir -p _b && cd _b && ../configure CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j8 >make.out 2>&1) &
done
wait
for v in before after; do [ -f _build-msgrate/$v/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so ] || { echo "build $v failed"; tail -20 _build-msgrate/$v/_b/make.out _build-msgrate/$v/_b/configure.out; exit 1; }; done
T=$t/_build-msgrate/after B=$t/_build-msgrate/before/_b A=$T/_b
export top_builddir=$A top_srcdir=$T
timeout 290 sh $T/benchmarks/ab.sh --rounds 3 --max 2048 --reps 7 --benches "prim latency bw bibw mbwmr" \
  --setup before "build=$B" --setup after "build=$A" --setup before-heap "build=$B heap" --setup after-heap "build=$A heap" \
  --setup vader vader --ref vader > "$OUT/ab-small.txt" 2>&1
timeout 100 sh $T/benchmarks/ab.sh --rounds 2 --max 4194304 --reps 5 --benches "bw" \
  --setup before "build=$B" --setup after "build=$A" --setup vader vader --ref before > "$OUT/ab-large.txt" 2>&1
# instructions per message (perf stat over two iteration counts of bw at
# 1-8 B, both ranks in one OS; the difference over 4 sizes x 1000 windows
# of 64 sends is per message)
if command -v perf >/dev/null; then
  mpicc -O2 $T/benchmarks/ivshm_osu.c -o /tmp/osu
  $A/libivshm/tools/ivshm format file:/dev/shm/pR --size 256M --force >/dev/null
  for s in before after vader; do
    for it in 200 1000; do
      case $s in before) b=$B ;; after) b=$A ;; esac
      if [ $s = vader ]; then set -- --mca btl self,vader; else
        set -- --mca btl self,ivshmem --mca btl_ivshmem_same_vm 1 --mca mca_base_component_path "$b/mpi-plugin/btl/.libs:$b/mpi-plugin/mpool/.libs:$b/mpi-plugin/coll/.libs:/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3"; fi
      echo "== $s iters $it"
      IVSHM_REGION=file:/dev/shm/pR timeout 60 perf stat -x, -e instructions:u,cycles:u,instructions:k -- mpirun --allow-run-as-root -np 2 \
        --mca plm_rsh_agent /bin/false --mca pml ob1 --bind-to core --cpu-list 2,4 "$@" -x IVSHM_REGION /tmp/osu bw -m 8 -i $it -r 1 2>&1 | grep -v '^#'
    done
  done > "$OUT/perf.txt" 2>&1
fi
tail -60 "$OUT/ab-small.txt"; tail -30 "$OUT/ab-large.txt"; cat "$OUT/perf.txt" 2>/dev/null | tail -40
