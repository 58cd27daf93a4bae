#!/bin/sh
# one-off (results/2026-11-23-threads): MPI_THREAD_MULTIPLE before (oldsrc =
# c56bec0: every received piece is handed to ob1 under the component's
# lock, so one thread copies at a time) and after (lent pieces are handed
# to ob1 after the progress call lets the lock go), vader in the same
# rounds: the 4-thread message rate (mtrate -t 4, each rank on 4 cores,
# ivshm-osu pins thread k to the k-th) and single-thread latency under
# MPI_THREAD_MULTIPLE (-T, ranks on cores 0 and 1); 5 rounds interleaved.
# Columns: set-up, round, bytes, median, mean. Run from the repository root
# with oldsrc/ and the generated build systems present.
set -u
. benchmarks/results/2026-11-23-short-cell/ab-build.sh
mpicc -O2 -pthread "$top/benchmarks/ivshm_osu.c" -o /tmp/osu
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
R=/dev/shm/ivshm-mtab
run() { # LABEL BUILD BTL BIND... -- OSU ARGS
    label=$1 v=$2 btl=$3; shift 3
    "$top/_new/libivshm/tools/ivshm" format file:$R --size 512M --force >/dev/null
    [ "$v" = _old ] && "$top/_old/libivshm/tools/ivshm" format file:$R --size 512M --force >/dev/null
    IVSHM_REGION=file:$R mpirun --allow-run-as-root -np 2 \
      --mca mca_base_component_path "$top/$v/mpi-plugin/.libs:$SYS" --mca pml ob1 --mca btl $btl \
      --mca btl_ivshmem_same_vm 1 -x IVSHM_REGION "$@" >/tmp/run.out 2>&1
    awk -v l="$label" -v r=$round '/^[0-9]/ {print l, "r" r, $1, $2, $3}' /tmp/run.out
    grep -q "^[0-9]" /tmp/run.out || { echo "FAILED: $label"; tail -5 /tmp/run.out; }
}
for round in 1 2 3 4 5; do
    for s in "old _old self,ivshmem" "new _new self,ivshmem" "vader _new self,vader"; do
        set -- $s
        run "mtrate4 $1" $2 $3 --bind-to core --map-by slot:PE=4 /tmp/osu mtrate -t 4 -m 65536 -r 5
        run "lat-multiple $1" $2 $3 --bind-to core --map-by core /tmp/osu latency -T -m 4096 -r 7
    done
done
rm -f $R
