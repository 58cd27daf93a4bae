#!/bin/sh
# MPI_THREAD_MULTIPLE across simulated VMs of one host (real mpirun, no tcp
# in the BTL list, so every message between VMs goes through the region;
# the component's counters prove it). tests/simvm/mpi_threads.c checks
# every byte:
#  1. 8 threads per rank, 2 VMs, each thread ping-pongs with its own tag;
#  2. many to one: 2 VMs send from 4 threads each to a third, whose 4
#     threads receive MPI_ANY_SOURCE / MPI_ANY_TAG;
#  3. 4 MiB messages from 4 threads at once, malloc'd (fragment pipeline)
#     and MPI_Alloc_mem (single copy); again with the region heap preloaded
#     (the threads' malloc'd buffers in the region, docs/heap.md);
#  4. a rank killed while the other's threads send to it: the job ends with
#     an error, no hang.
# Needs root, iproute2 and Open MPI; skipped (77) otherwise (a FAIL under
# IVSHM_REQUIRE_ALL=1).
set -u
. "$(dirname "$0")/lib.sh"
simvm_require

work=$(mktemp -d)
trap '"$SIMVM" down; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
mpicc -O2 -pthread "$top_srcdir/tests/simvm/mpi_threads.c" -o "$work/mpi_threads"
pass=0 fail=0

"$SIMVM" up a:0 a:1 a:2
simvm_format 256M
TWO=10.200.0.1:1,10.200.0.2:1
THREE=10.200.0.1:1,10.200.0.2:1,10.200.0.3:1
SIMVM_TIMEOUT=300
export SIMVM_TIMEOUT

# threaded NAME HOSTS NP MODE THREADS: the run passes and the region
# carried the senders' messages (each sender's counters: a rank that only
# receives adds no peers in Open MPI 4.1, so it counts nothing)
threaded() {
    name=$1 hosts=$2 np=$3 mode=$4 nt=$5
    shift 5
    simvm_mpirun "$hosts" "$np" --mca btl self,vader,ivshmem --mca mpi_yield_when_idle 1 \
        --mca btl_ivshmem_stats 1 "$@" "$work/mpi_threads" "$mode" "$nt" >"$work/$name.out" 2>&1
    rc=$?
    n=$(grep -c "btl ivshmem stats: .*: route region: [1-9][0-9]* sends" "$work/$name.out")
    if [ $rc -eq 0 ] && grep -q "THREADS ok $mode" "$work/$name.out" && [ "$n" -ge 2 ]; then
        ok "$(grep "THREADS ok" "$work/$name.out" | sed 's/THREADS ok //'), over the region"
    else
        bad "$name (rc $rc, $n region counters)"; tail -30 "$work/$name.out"
    fi
}
threaded pingpong "$TWO" 2 pingpong 8
threaded many "$THREE" 3 many 4
threaded large "$TWO" 2 large 4
# the same large messages with the region heap (docs/heap.md): the threads'
# malloc'd buffers come from the region, allocated from several threads
heap="$top_builddir/libivshm/.libs/libivshm-heap.so"
if [ -f "$heap" ]; then
    threaded large-heap "$TWO" 2 large 4 -x LD_PRELOAD="$heap"
    nb=$(sed -n 's/.*btl ivshmem heap: rank [0-9]*: \([0-9]*\) blocks.*/\1/p' "$work/large-heap.out" | awk '$1 > 0' | wc -l)
    if [ "$nb" = 2 ]; then
        ok "large with the region heap: both ranks' buffers came from the region"
    else
        bad "large with the region heap: $nb ranks took region blocks"; grep "btl ivshmem heap" "$work/large-heap.out"
    fi
    # gets that ob1 started inside a progress pass copy after it, outside
    # the component's lock (every byte was checked above)
    ng=$(sed -n 's/.*btl ivshmem stats: rank [0-9]*: \([0-9]*\) gets copied after.*/\1/p' "$work/large-heap.out" | awk '{s += $1} END {print s + 0}')
    if [ "$ng" -gt 0 ]; then
        ok "large with the region heap: $ng gets copied after the progress pass that started them"
    else
        bad "large with the region heap: no get was copied after its progress pass"; grep "gets copied" "$work/large-heap.out"
    fi
fi

# ---- 4. a rank dies while the other's threads send to it
t0=$(date +%s)
SIMVM_TIMEOUT=120 simvm_mpirun "$TWO" 2 --mca btl self,vader,ivshmem --mca mpi_yield_when_idle 1 \
    "$work/mpi_threads" victim 4 >"$work/victim.out" 2>&1
rc=$?
t=$(($(date +%s) - t0))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "THREADS victim: rank 1 killed" "$work/victim.out"; then
    ok "a rank killed while 4 threads send to it: the job ended (exit $rc) in $t s"
else
    bad "victim (rc $rc after $t s; 124: it hung)"; tail -20 "$work/victim.out"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
