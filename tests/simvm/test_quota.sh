#!/bin/sh
# The region heap's quota per job (docs/heap.md, "Quota") with real mpirun
# between two simulated VMs of one host, one 48 MiB region for two jobs:
#  1. job 1 runs under libivshm-heap.so and allocates ordinary arrays
#     until they stop coming from the region, and stays alive
#     (tests/simvm/mpi_quota.c hog); job 2 then starts on the same region:
#     it gets its region route and its region collectives (counters show
#     traffic over the region), because job 1 was held to the default
#     quota (half the region's heap): its arrays past it came from private
#     memory, counted as over quota;
#  2. the same with job 1's quota raised to the whole region: job 2 runs
#     over tcp, and its message names the cause, the region-heap blocks of
#     job 1 (its program name), and what to do.
# Needs root, iproute2 and Open MPI; skipped (77) otherwise (a FAIL under
# IVSHM_REQUIRE_ALL=1).
set -u
. "$(dirname "$0")/lib.sh"
simvm_require
heap="$top_builddir/libivshm/.libs/libivshm-heap.so"
[ -f "$heap" ] || simvm_skip "libivshm-heap.so not built (static build)"
[ -f "$top_builddir/mpi-plugin/coll/.libs/mca_coll_ivshmem.so" ] ||
    simvm_skip "coll ivshmem not built (no libmpi to link)"

work=$(mktemp -d)
hog_pid=
trap '[ -z "$hog_pid" ] || kill "$hog_pid" 2>/dev/null; "$SIMVM" down; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
mpicc -O2 -I"$top_srcdir/libivshm/include" "$top_srcdir/tests/simvm/mpi_quota.c" \
    -o "$work/mpi_quota"
pass=0 fail=0

"$SIMVM" up a:0 a:1
TWO=10.200.0.1:1,10.200.0.2:1
SIMVM_TIMEOUT=90
export SIMVM_TIMEOUT

# job1 NAME [options]: starts the hog in the background, waits until its
# arrays are allocated (60 s at most); false if it never gets there
job1() {
    name=$1
    shift
    rm -f "$work/ready" "$work/done"
    simvm_mpirun "$TWO" 2 --mca btl self,vader,ivshmem,tcp --mca mpi_yield_when_idle 1 \
        --mca btl_ivshmem_stats 1 -x LD_PRELOAD="$heap" "$@" \
        "$work/mpi_quota" hog "$work/ready" "$work/done" >"$work/$name-1.out" 2>&1 &
    hog_pid=$!
    i=0
    while [ ! -f "$work/ready" ] && [ $i -lt 600 ] && kill -0 "$hog_pid" 2>/dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    [ -f "$work/ready" ]
}
# job2 NAME: the second job, while the first holds its arrays; then lets
# the first finish. rc: job 2's, rc1: job 1's
job2() {
    simvm_mpirun "$TWO" 2 --mca btl self,vader,ivshmem,tcp --mca mpi_yield_when_idle 1 \
        --mca btl_ivshmem_stats 1 --mca coll_ivshmem_stats 1 \
        "$work/mpi_quota" work >"$work/$1-2.out" 2>&1
    rc=$?
    touch "$work/done"
    wait "$hog_pid"
    rc1=$?
    hog_pid=
}
# ranks whose region route carried messages ("sends" of the route region)
region_ranks() {
    sed -n 's/.*btl ivshmem stats: host .* rank [0-9]* -> rank [0-9]*: route region: \([0-9]*\) sends.*/\1/p' "$1" |
        awk '$1 > 0' | wc -l
}
# ranks whose MPI_COMM_WORLD collectives ran in the region (none fell back)
coll_ranks() {
    sed -n 's/.*coll ivshmem stats: MPI_COMM_WORLD rank [0-9]* of 2 (one region): region\/fallback barrier [0-9]*\/[0-9]* bcast \([0-9]*\)\/\([0-9]*\) reduce [0-9]*\/[0-9]* allreduce \([0-9]*\)\/\([0-9]*\).*/\1 \2 \3 \4/p' "$1" |
        awk '$1 >= 100 && $2 == 0 && $3 >= 100 && $4 == 0' | wc -l
}
# job 1's heap per rank: "REGION-BYTES OVER-QUOTA QUOTA"
heapstat() {
    sed -n 's/.*btl ivshmem heap: rank [0-9]*: [0-9]* blocks \([0-9]*\) bytes from the region .* did not fit (\([0-9]*\) over quota).* quota \([0-9]*\) bytes/\1 \2 \3/p' "$1"
}
hog_ok() { [ "$rc1" = 0 ] && [ "$(grep -c 'mpi_quota hog: rank [0-9]*: [0-9]* bytes of arrays from the region' "$1")" = 2 ]; }

# ---- 1. the default quota: job 2 keeps its region route and collectives
simvm_format 48M
if job1 quota; then
    job2 quota
    held=$(heapstat "$work/quota-1.out" | awk '{b += $1; o += $2; q = $3} END {print (o > 0 && b <= q && q > 0) ? "yes" : "no"}')
    if [ $rc = 0 ] && grep -q "mpi_quota work: 2 ranks: passed" "$work/quota-2.out" &&
       [ "$(region_ranks "$work/quota-2.out")" = 2 ] && [ "$(coll_ranks "$work/quota-2.out")" = 2 ] &&
       ! grep -q "no room" "$work/quota-2.out" && hog_ok "$work/quota-1.out" && [ "$held" = yes ]; then
        ok "default quota: job 1 held to $(heapstat "$work/quota-1.out" | awk '{b += $1; o += $2; q = $3} END {printf "%d of %d bytes (%d blocks over quota)", b, q, o}'); job 2 sends over the region on both ranks and runs its collectives there"
    else
        bad "default quota (job 2 rc $rc, job 1 rc $rc1, held to quota: $held)"
        heapstat "$work/quota-1.out"; grep "mpi_quota\|route\|coll ivshmem stats" "$work/quota-1.out" "$work/quota-2.out"
        grep -A4 "Reason" "$work/quota-2.out" | head -12; tail -5 "$work/quota-2.out"
    fi
else
    bad "default quota: job 1 never allocated its arrays"; tail -20 "$work/quota-1.out"
    touch "$work/done"; wait "$hog_pid"; hog_pid=
fi

# ---- 2. job 1's quota the whole region: job 2 is told why
simvm_format 48M
if job1 whole --mca btl_ivshmem_heap_quota 100%; then
    job2 whole
    if [ $rc = 0 ] && grep -q "mpi_quota work: 2 ranks: passed" "$work/whole-2.out" &&
       [ "$(region_ranks "$work/whole-2.out")" = 0 ] && hog_ok "$work/whole-1.out" &&
       grep -q "region-heap blocks (malloc'd arrays) hold [0-9.]* of its [0-9.]* MiB: job ompi-[0-9a-f]* [0-9.]* MiB in 2 processes (mpi_quota pid" "$work/whole-2.out" &&
       grep -q "btl_ivshmem_heap_quota" "$work/whole-2.out"; then
        ok "quota 100%: job 2 runs over tcp and says why: $(grep -o "region-heap blocks[^;]*" "$work/whole-2.out" | head -1)"
    else
        bad "quota 100% (job 2 rc $rc, job 1 rc $rc1)"; grep -A6 "Reason" "$work/whole-2.out" | head -12; tail -5 "$work/whole-2.out"
    fi
else
    bad "quota 100%: job 1 never allocated its arrays"; tail -20 "$work/whole-1.out"
    touch "$work/done"; wait "$hog_pid"; hog_pid=
fi

echo "test_quota: $pass passed, $fail failed"
[ $fail -eq 0 ]
