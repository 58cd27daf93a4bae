#!/bin/sh
# The one switch for Open MPI over UCX: the parameter sets ivshmem-ucx and
# ivshmem-ucx-heap (mpi-plugin/amca-param-sets), as a user gives them, with
# nothing else of pml ucx on the command line, across two co-resident
# simulated VMs:
#  1. mpirun --tune ivshmem-ucx: mpi_check passes (every payload checked)
#     and the transport's counters show the region carried both ranks'
#     messages (the switch chose pml ucx, opened it without a Mellanox
#     device and preloaded the transport): each rank sent more than the
#     4 MiB message twice through the region, rendezvous included;
#  2. two parameter sets that both set LD_PRELOAD (ivshmem-ucx,ivshmem-heap)
#     preload only the first one's library, which is why the heap comes
#     with its own combined set;
#  3. mpirun --tune ivshmem-ucx-heap: the transport and the region heap in
#     one preload; mpi_heap (ordinary malloc'd buffers, fork, threads, every
#     byte checked) passes under pml ucx, through the region, and the
#     heap attached: each rank's large blocks came from the region, and
#     the transport served them by get/put zcopy (the BTL's lookup,
#     ivshm/locate.h, names their owner), no access refused;
#  4. collectives under --tune ivshmem-ucx: coll ivshmem still takes
#     MPI_COMM_WORLD (it runs in the region beside pml ucx), mpi_coll's
#     checks all pass.
# The simulated VMs share /dev/shm and the boot id, so UCX_TLS is
# restricted to self, ivshmem and tcp (in real guests nothing needs it).
# The bare library names of the sets are found on LD_LIBRARY_PATH (the
# build tree here; `make install` puts them on the loader's path).
set -u
. "$(dirname "$0")/lib.sh"
simvm_require
simvm_require_ucx
UCT_DIR=${UCT_LIB%/*}
HEAP_DIR=$top_builddir/libivshm/.libs
[ -f "$HEAP_DIR/libivshm-heap.so" ] || simvm_skip "libivshm-heap.so not built (static build)"
SETS=$top_srcdir/mpi-plugin/amca-param-sets

simvm_checks
mpicc -O2 "$top_srcdir/tests/simvm/mpi_check.c" -o "$work/mpi_check"
mpicc -O2 -pthread "$top_srcdir/tests/simvm/mpi_heap.c" -o "$work/mpi_heap"
mpicc -O2 "$top_srcdir/tests/simvm/mpi_coll.c" -o "$work/mpi_coll"

"$SIMVM" up a:0 a:1
simvm_format 256M
# the pml comes from the parameter set alone (lib.sh's default: ob1)
SIMVM_PML=" "
SIMVM_TIMEOUT=120
export SIMVM_PML SIMVM_TIMEOUT
LIBPATH=$UCT_DIR:$HEAP_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# run NAME SETS PROGRAM [mpirun options...]: output in $work/NAME.out, rc
# in $rc
run() {
    name=$1 sets=$2 prog=$3
    shift 3
    simvm_mpirun 10.200.0.1:1,10.200.0.2:1 2 --tune "$sets" \
        --mca mpi_yield_when_idle 1 -x LD_LIBRARY_PATH="$LIBPATH" \
        -x UCX_TLS=self,ivshmem,tcp -x UCX_IVSHMEM_STATS=y "$@" \
        "$work/$prog" >"$work/$name.out" 2>&1
    rc=$?
}
# region_ok FILE MIN: an interface of each VM (pml ucx's; osc ucx has its
# own) sent more than MIN bytes through the region
region_ok() {
    [ "$(sed -n 's/^uct ivshmem: \(vm[01]\)-hosta pid [0-9]* device [^:]*: sent [0-9]* messages (\([0-9]*\) bytes).*/\1 \2/p' "$1" |
        awk -v min="$2" '$2 > min {print $1}' | sort -u | wc -l)" = 2 ]
}
# expect NAME SET PROGRAM CHECKS [mpirun options...]: PROGRAM passes its
# CHECKS under --tune SET, each VM sending over $MSG_MIN bytes (8 MiB)
# through the region's messages
MSG_MIN=8388608
expect() {
    name=$1 pset=$2 prog=$3 checks=$4
    shift 4
    run "$name" "$SETS/$pset" "$prog" "$@"
    set -- "$name" "$pset" "$prog" "$checks"
    if [ $rc -eq 0 ] && grep -q "$3: 2 ranks: $4 passed, 0 failed" "$work/$1.out" &&
       region_ok "$work/$1.out" "$MSG_MIN"; then
        ok "--tune $2: $3 $4 of $4 through the region ($(region_bytes "$work/$1.out")bytes)"
    else
        bad "--tune $2 (rc $rc): $(region_bytes "$work/$1.out")"; tail -20 "$work/$1.out"
    fi
}
region_bytes() {
    sed -n 's/^uct ivshmem: \(vm[0-9]*\)-host.* sent [0-9]* messages (\([0-9]*\) bytes).*/\1 \2/p' "$1" | tr '\n' ' '
}

# ---- 1. --tune ivshmem-ucx
expect ucx ivshmem-ucx mpi_check 10

# ---- 2. two sets that both set LD_PRELOAD: the first one's stays
preload=$(timeout 30 mpirun --allow-run-as-root -np 1 --mca plm_rsh_agent /bin/false \
    --tune "$SETS/ivshmem-ucx,$SETS/ivshmem-heap" -x LD_LIBRARY_PATH="$LIBPATH" \
    printenv LD_PRELOAD 2>&1)
if [ "$preload" = libuct_ivshmem.so ]; then
    ok "--tune ivshmem-ucx,ivshmem-heap preloads $preload alone (the first set's LD_PRELOAD)"
else
    bad "--tune ivshmem-ucx,ivshmem-heap: LD_PRELOAD is '$preload'"
fi

# ---- 3. --tune ivshmem-ucx-heap
# the large messages' payload goes by get zcopy (checked below), so the
# messages carry only the small ones and the rendezvous: over 1 MiB
MSG_MIN=1048576
expect heap ivshmem-ucx-heap mpi_heap 8 --mca btl_ivshmem_stats 1
MSG_MIN=8388608
blocks=$(sed -n 's/.*btl ivshmem heap: rank [0-9]*: \([0-9]*\) blocks .* from the region.*/\1/p' "$work/heap.out" |
    awk '$1 >= 20' | wc -l)
if [ "$blocks" = 2 ]; then
    ok "--tune ivshmem-ucx-heap: the heap attached beside pml ucx, each rank's large blocks from the region"
else
    bad "--tune ivshmem-ucx-heap: the heap gave region blocks to $blocks ranks"; grep "heap" "$work/heap.out"
fi
# The heap's blocks are the BTL's memory (another mapping, another lease),
# found through the BTL's lookup (ivshm/locate.h): large messages between
# malloc'd buffers go by get/put zcopy (rendezvous, over 32 MiB per VM: the
# window of 48 1 MiB sends alone), with no access refused by the checks.
zc=$(sed -n 's/^uct ivshmem rma: \(vm[01]\)-hosta pid [0-9]* device [^:]*: put [0-9]* bytes (short [0-9]*, bcopy [0-9]*, zcopy \([0-9]*\)), get [0-9]* bytes (short [0-9]*, bcopy [0-9]*, zcopy \([0-9]*\)), atomics [0-9]*, refused \([0-9]*\)$/\1 \2 \3 \4/p' "$work/heap.out" |
    awk '{z[$1] += $2 + $3; r[$1] += $4} END {for (v in z) print v, z[v], r[v]}' | sort)
if [ "$(echo "$zc" | awk '$2 > 33554432 && $3 == 0' | wc -l)" = 2 ]; then
    ok "--tune ivshmem-ucx-heap: malloc'd (region heap) buffers went by get/put zcopy ($(echo $zc) : VM, zcopy bytes, refused)"
else
    bad "--tune ivshmem-ucx-heap: get/put zcopy per VM (VM, bytes, refused): ${zc:-none}"; grep "^uct ivshmem rma" "$work/heap.out"
fi

# ---- 4. collectives beside pml ucx
expect coll ivshmem-ucx mpi_coll 234 --mca coll_ivshmem_stats 1
n=$(grep -c "coll ivshmem stats: MPI_COMM_WORLD rank [01] of 2 (one region): region/fallback barrier [1-9]" "$work/coll.out")
if [ "$n" = 2 ]; then
    ok "--tune ivshmem-ucx: coll ivshmem ran MPI_COMM_WORLD's collectives in the region"
else
    bad "--tune ivshmem-ucx: coll ivshmem took MPI_COMM_WORLD on $n ranks"; grep "coll ivshmem" "$work/coll.out"
fi

simvm_checks_end test_ucx_tune
