#!/bin/sh
# The components under the installed Open MPI, whichever it is (4.1 with
# ORTE on Debian 12, 5.x with PRRTE on Debian 13: scripts/debian13-root.sh
# runs this test in a Debian 13 root):
#  1. ompi_info lists btl, mpool and coll ivshmem from the build tree;
#  2. one OS, two ranks, btl self,ivshmem only: mpi_check's payloads pass
#     and the counters show the region carried both directions;
#  3. two simulated VMs (network + UTS namespaces) of one host, launched
#     through the rsh agent: payloads pass, the region carried the pair,
#     the single-copy gets read MPI_Alloc_mem buffers in place;
#  4. the one switch, mpirun --tune FILE (the installed ivshmem set): its
#     NAME=VALUE lines are read by both launchers (4.1's -mca lines are a
#     parse error under PRRTE) and the job runs through the region.
# Needs root, iproute2 and Open MPI; skipped (77) otherwise.
set -u
. "$(dirname "$0")/lib.sh"
simvm_require

work=$(mktemp -d)
trap '"$SIMVM" down; rm -rf "$work" /dev/shm/ivshm-launch-$$' EXIT
trap 'exit 1' INT TERM
mpicc -O2 "$top_srcdir/tests/simvm/mpi_check.c" -o "$work/mpi_check"
pass=0 fail=0
ver=$(mpirun --version 2>/dev/null | head -1)
echo "Open MPI: $ver"
# region sends of each "rank A -> rank B" line with sends > 0, and gets
region_pairs() {
    sed -n 's/.*btl ivshmem stats: .* rank \([0-9]*\) -> rank \([0-9]*\): route region: \([0-9]*\) sends.* \([0-9]*\) gets .*/\1-\2 \3 \4/p' "$1" |
        awk '$2 > 0 {print $1}' | sort | tr '\n' ' ' | sed 's/ $//'
}

# ---- 1. the components load
list=$(OMPI_MCA_mca_base_component_path=$(ivshm_component_path) ompi_info 2>/dev/null |
       sed -n 's/^ *MCA \(btl\|mpool\|coll\): ivshmem (.*API v\([0-9.]*\),.*/\1 \2/p' | tr '\n' ' ')
case $list in
*"btl "*"mpool "*"coll "*) ok "ompi_info lists: $list" ;;
*) bad "ompi_info lists '$list', want btl, mpool and coll ivshmem" ;;
esac

# judge WHAT FILE RC [NOTE]: mpi_check passed in FILE and the region
# carried both directions; NOTE, if given, says what else was wrong
judge() {
    got=$(region_pairs "$2")
    if [ "$3" -eq 0 ] && grep -q "2 ranks: 10 passed, 0 failed" "$2" && [ "$got" = "0-1 1-0" ] &&
       [ -z "${4:-}" ]; then
        ok "$1: payloads pass, region carried $got"
    else
        bad "$1 (rc $3, region pairs '$got'${4:+, $4})"; tail -20 "$2"
    fi
}

# ---- 2. one OS, self and ivshmem only
single_node_region "/dev/shm/ivshm-launch-$$" 64M
single_node_mpirun 2 --oversubscribe --bind-to none --mca btl self,ivshmem --mca mpi_yield_when_idle 1 \
    --mca btl_ivshmem_stats 1 "$work/mpi_check" >"$work/one.out" 2>&1
judge "one OS, btl self,ivshmem" "$work/one.out" $?
unset IVSHM_REGION

# ---- 3. two simulated VMs of one host
"$SIMVM" up a:0 a:1
simvm_format 64M
TWO=10.200.0.1:1,10.200.0.2:1
simvm_mpirun "$TWO" 2 --mca btl self,vader,ivshmem,tcp --mca mpi_yield_when_idle 1 \
    --mca btl_ivshmem_stats 1 "$work/mpi_check" >"$work/two.out" 2>&1
rc=$?
gets=$(sed -n 's/.*route region: .* \([0-9]*\) gets .*/\1/p' "$work/two.out" | awk '$1 > 0' | wc -l)
judge "two simulated VMs (single-copy gets on both)" "$work/two.out" $rc \
    "$([ "$gets" = 2 ] || echo "$gets ranks with single-copy gets, want 2")"

# ---- 4. the one switch (the installed set, by path: by name it is in
# Open MPI's or PRRTE's amca-param-sets folder once installed)
simvm_mpirun "$TWO" 2 --tune "$top_srcdir/mpi-plugin/amca-param-sets/ivshmem" --mca btl_ivshmem_verbs 0 \
    --mca mpi_yield_when_idle 1 --mca btl_ivshmem_stats 1 "$work/mpi_check" >"$work/tune.out" 2>&1
judge "mpirun --tune ivshmem" "$work/tune.out" $?

echo "test_ompi_launch ($ver): $pass passed, $fail failed"
[ $fail -eq 0 ]
