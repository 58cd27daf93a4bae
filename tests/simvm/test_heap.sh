#!/bin/sh
# Single copy for ordinary (malloc'd) buffers across simulated VMs: real
# mpirun, two VMs of one host, the region heap switched on by preloading
# libivshm-heap.so (docs/heap.md) and off. tests/simvm/mpi_heap.c checks
# every byte (protocol boundaries, realloc across the threshold, fork while
# MPI runs, allocating threads, buffers from before MPI_Init, a window of
# large nonblocking sends):
#  1. switch off: passes, large messages take two copies (no gets);
#  2. switch on (mpirun --tune ivshmem-heap): passes, each rank's large
#     blocks came from the region and every large message was read with
#     single-copy gets, none refused;
#  3. switch on with a 4 KiB threshold: every rendezvous size single copy;
#  4. switch on, region too small for the blocks: they fall back to private
#     memory (counted), the job passes;
#  5. the general MPI checks (tests/simvm/mpi_check.c) with the switch on
#     and an eager limit set (kept over the heap's 4 KiB).
# The eager limit is 32 KiB without the heap and 4 KiB with it (1, 2).
# Needs root, iproute2 and Open MPI; skipped (77) otherwise (a FAIL under
# IVSHM_REQUIRE_ALL=1).
set -u
. "$(dirname "$0")/lib.sh"
simvm_require
heap="$top_builddir/libivshm/.libs/libivshm-heap.so"
[ -f "$heap" ] || simvm_skip "libivshm-heap.so not built (static build)"

work=$(mktemp -d)
trap '"$SIMVM" down; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
mpicc -O2 -pthread "$top_srcdir/tests/simvm/mpi_heap.c" -o "$work/mpi_heap"
mpicc -O2 "$top_srcdir/tests/simvm/mpi_check.c" -o "$work/mpi_check"
pass=0 fail=0

"$SIMVM" up a:0 a:1
simvm_format 256M
TWO=10.200.0.1:1,10.200.0.2:1
SIMVM_TIMEOUT=300
export SIMVM_TIMEOUT

# run NAME PROGRAM [mpirun options...]: output in $work/NAME.out, rc in $rc
run() {
    name=$1 prog=$2
    shift 2
    simvm_mpirun "$TWO" 2 --mca btl self,vader,ivshmem --mca mpi_yield_when_idle 1 \
        --mca btl_ivshmem_stats 1 "$@" "$work/$prog" >"$work/$name.out" 2>&1
    rc=$?
}
# "gets refused" of each rank's region route, one line per rank
gets() {
    sed -n 's/.*btl ivshmem stats: .*route region: .* \([0-9]*\) gets [0-9]* bytes.* \([0-9]*\) refused/\1 \2/p' "$1"
}
# "region-blocks did-not-fit" of each rank's heap
heapstat() {
    sed -n 's/.*btl ivshmem heap: rank [0-9]*: \([0-9]*\) blocks [0-9]* bytes from the region ([0-9]* live), \([0-9]*\) did not fit.*/\1 \2/p' "$1"
}
passed() { [ $rc -eq 0 ] && grep -q "2 ranks: $2 passed, 0 failed" "$1"; }
# eager LIMIT FILE: both ranks ran with that eager limit (32 KiB without
# the heap; with it, 4 KiB, so that RGET reads its blocks from there on)
eager() { [ "$(grep -c "btl ivshmem stats: rank [0-9]*: eager limit $1\$" "$2")" = 2 ]; }

# ---- 1. switch off
run off mpi_heap
if passed "$work/off.out" 8 && [ "$(gets "$work/off.out" | awk '$1 == 0' | wc -l)" = 2 ] &&
   ! grep -q "btl ivshmem heap:" "$work/off.out" && eager 32768 "$work/off.out"; then
    ok "switch off: every check passes, large messages copied twice (no gets, no heap), eager limit 32 KiB"
else
    bad "switch off (rc $rc)"; tail -20 "$work/off.out"
fi

# ---- 2. switch on, as a user turns it on: the parameter set --tune
# ivshmem-heap (its LD_PRELOAD names the library; the loader finds it on
# LD_LIBRARY_PATH here, where `make install` puts it otherwise). The main
# thread alone takes some 30 large blocks; the churning threads' share
# depends on timing.
run on mpi_heap --tune "$top_srcdir/mpi-plugin/amca-param-sets/ivshmem-heap" \
    -x LD_LIBRARY_PATH="$(dirname "$heap")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if passed "$work/on.out" 8 &&
   [ "$(heapstat "$work/on.out" | awk '$1 >= 20' | wc -l)" = 2 ] &&
   [ "$(gets "$work/on.out" | awk '$1 >= 20 && $2 == 0' | wc -l)" = 2 ] &&
   eager 4096 "$work/on.out"; then
    ok "switch on: every check passes; large blocks from the region, read with single-copy gets ($(gets "$work/on.out" | awk '{printf "%s ", $1}')gets), eager limit 4 KiB"
else
    bad "switch on (rc $rc)"; gets "$work/on.out"; heapstat "$work/on.out"; tail -20 "$work/on.out"
fi

# ---- 3. every rendezvous size from the region
run min4k mpi_heap -x LD_PRELOAD="$heap" -x IVSHM_HEAP_MIN=4096
g2=$(gets "$work/on.out" | awk '{s += $1} END {print s + 0}')
g3=$(gets "$work/min4k.out" | awk '{s += $1} END {print s + 0}')
if passed "$work/min4k.out" 8 && grep -q "threshold 4096 bytes" "$work/min4k.out" && [ "$g3" -gt "$g2" ]; then
    ok "switch on, 4 KiB threshold: every check passes, more messages single copy ($g3 gets vs $g2)"
else
    bad "4 KiB threshold (rc $rc, gets $g3 vs $g2)"; tail -20 "$work/min4k.out"
fi

# ---- 4. a region with room for the channels but few blocks
simvm_format 16M
run full mpi_heap -x LD_PRELOAD="$heap"
if passed "$work/full.out" 8 && [ "$(heapstat "$work/full.out" | awk '$2 > 0' | wc -l)" -ge 1 ]; then
    ok "region full: blocks that do not fit come from private memory ($(heapstat "$work/full.out" | awk '{printf "%s ", $2}')did not fit), every check passes"
else
    bad "full region (rc $rc)"; heapstat "$work/full.out"; tail -20 "$work/full.out"
fi
simvm_format 256M

# ---- 5. the general MPI checks with the switch on (an eager limit that
# is set wins over the heap's)
run check mpi_check -x LD_PRELOAD="$heap" --mca btl_ivshmem_eager_limit 8192
if [ $rc -eq 0 ] && grep -q "2 ranks: 10 passed, 0 failed" "$work/check.out" &&
   eager 8192 "$work/check.out"; then
    ok "mpi_check with the switch on and eager limit 8192 set: 10 of 10, the set limit kept"
else
    bad "mpi_check with the switch on (rc $rc)"; tail -20 "$work/check.out"
fi

echo "test_heap: $pass passed, $fail failed"
[ $fail -eq 0 ]
