#!/bin/sh
# one-off (results/2026-11-23-threads): MPI_THREAD_MULTIPLE on the 16-core
# machine, ivshmem (btl self,ivshmem, same_vm) and vader interleaved, 5
# rounds. Single-thread latency under MPI_THREAD_MULTIPLE (-T) with ranks
# bound to cores 0 and 1; the 4-thread message rate (mtrate -t 4) with each
# rank bound to 4 cores (--map-by slot:PE=4; ivshm-osu pins thread k to the
# k-th of them). Also the single-threaded
# latency (MPI_Init), to show the path without threads. Columns: set-up,
# round, bytes, median of the repeats, their mean (OSU's average; mt.txt,
# the first run, has the median only).
set -u
top=$(pwd)
if [ ! -f "$top/_new/.mt-build" ]; then
    rm -rf _new && mkdir -p _new && cd _new && "$top/configure" CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 &&
        make -j16 >make.out 2>&1 && touch .mt-build || { tail -20 make.out; exit 1; }
    cd "$top"
fi
mpicc -O2 -pthread benchmarks/ivshm_osu.c -o /tmp/osu
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
export OMPI_MCA_plm_rsh_agent=/bin/false
R=/dev/shm/ivshm-mt
"$top/_new/libivshm/tools/ivshm" format file:$R --size 512M --force || exit 1
run() { # LABEL BTL BIND... -- OSU ARGS
    label=$1 btl=$2; shift 2
    IVSHM_REGION=file:$R mpirun --allow-run-as-root -np 2 \
      --mca mca_base_component_path "$top/_new/mpi-plugin/.libs:$SYS" --mca pml ob1 --mca btl $btl \
      --mca btl_ivshmem_same_vm 1 -x IVSHM_REGION "$@" >/tmp/run.out 2>&1
    awk -v l="$label" -v r=$round '/^[0-9]/ {print l, "r" r, $1, $2, $3}' /tmp/run.out
    grep -q "^[0-9]" /tmp/run.out || { echo "FAILED: $label"; tail -5 /tmp/run.out; }
}
# ROUNDS (5), SETUPS ("ivshmem vader"; ivshmem-heap: ivshmem with the
# region heap preloaded, docs/heap.md), BENCHES ("lat-single lat-multiple
# mtrate4")
HEAP=$top/_new/libivshm/.libs/libivshm-heap.so
for round in $(seq 1 "${ROUNDS:-5}"); do
  for t in ${SETUPS:-ivshmem vader}; do
    btl=self,${t%-heap} pre=""
    [ "$t" = ivshmem-heap ] && pre="-x LD_PRELOAD=$HEAP"
    for b in ${BENCHES:-lat-single lat-multiple mtrate4}; do
      case $b in
      lat-single) run "$b $t" $btl $pre --bind-to core --map-by core /tmp/osu latency -m 4096 -r 7 ;;
      lat-multiple) run "$b $t" $btl $pre --bind-to core --map-by core /tmp/osu latency -T -m 4096 -r 7 ;;
      mtrate4) run "$b $t" $btl $pre --bind-to core --map-by slot:PE=4 /tmp/osu mtrate -t 4 -m 65536 -r 5 ;;
      esac
    done
  done
done
