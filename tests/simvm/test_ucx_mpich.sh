#!/bin/sh
# The UCT transport ivshmem under Debian's MPICH (ch4:ucx, hydra's
# mpiexec.mpich) across simulated VMs: two co-resident VMs on host a (one
# region) and one VM on host b (its own region). mpi_check (every payload
# checked, 0 B to 4 MiB) runs $UCX_MPICH_RUNS times (default 3) with three
# ranks; each run must pass and end (MPI_Finalize included) within its
# bound, and the counters must show the co-resident pair's traffic went
# through the region and host b's rank sent nothing through it.
# Before MPICH 4.2 (Debian 12's 4.0.2), mpi_check is linked with
# mpich_finalize.c (a message each way between every pair, then a PMI
# barrier ahead of MPI_Finalize) and runs with UCX_MAX_RNDV_LANES=0 (no
# tcp lane beside the region's between the pair). Without them MPICH
# 4.0.2's finalize hangs in most runs, with or without the region
# (UCX_TLS=self,tcp hung 6 of 8 runs): a rank waits in its PMI barrier
# while a peer's tcp close flush waits for its ack (docs/ucx.md, "MPICH
# 4.0.2's finalize"). MPICH 4.2 (Debian 13's 4.2.1) orders its finalize
# itself and runs plain mpi_check with UCX's defaults (UCX 1.18 also
# asserts max_lanes >= 1 in its rendezvous under UCX_MAX_RNDV_LANES=0).
# The test says which MPICH it ran and how.
# UCX_TLS and UCX_RNDV_THRESH as in test_ucx.sh (the simulated VMs share
# /dev/shm; no put/get zcopy yet).
set -u
. "$(dirname "$0")/lib.sh"
simvm_require
command -v mpiexec.mpich >/dev/null && command -v mpicc.mpich >/dev/null ||
    simvm_skip "no MPICH (mpich)"
simvm_require_ucx

simvm_checks

"$SIMVM" up a:0 a:1 b:2
simvm_format 64M

# sent_bytes FILE HOST: the most bytes one of HOST's interfaces sent (the
# line may follow another rank's unfinished one: hydra forwards the ranks'
# stderr in pieces)
sent_bytes() {
    sed -n "s/.*uct ivshmem: $2 pid [0-9]* device [^:]*: sent [0-9]* messages (\([0-9]*\) bytes).*/\1/p" "$1" |
        sort -n | tail -1
}

# MPICH's version: 4.2 and later finalize in an order that needs no help
mpich_ver=$(mpichversion 2>/dev/null | sed -n 's/^MPICH Version:[[:space:]]*//p')
case $mpich_ver in
    [0-3].* | 4.[01] | 4.[01].*)
        wrap="$top_srcdir/tests/simvm/mpich_finalize.c" rndv_lanes="-genv UCX_MAX_RNDV_LANES 0"
        how="with the finalize wrapper and UCX_MAX_RNDV_LANES=0" ;;
    *)
        wrap='' rndv_lanes=''
        how="plain MPI_Finalize, UCX's rendezvous lanes" ;;
esac
echo "MPICH ${mpich_ver:-of unknown version}: $how"
# shellcheck disable=SC2086
mpicc.mpich -O2 "$top_srcdir/tests/simvm/mpi_check.c" $wrap -o "$work/mpi_check" 2>"$work/cc.out" ||
    { cat "$work/cc.out"; exit 1; }
runs=${UCX_MPICH_RUNS:-3}
hung=0 passed=0 routed=0
i=0
while [ $i -lt "$runs" ]; do
    i=$((i + 1))
    out=$work/mpich.$i.out
    t0=$(date +%s)
    # shellcheck disable=SC2086
    timeout -k 5 40 mpiexec.mpich -launcher ssh -launcher-exec "$top_srcdir/tests/simvm/agent" \
        -iface ivsbr0 -hosts 10.200.0.1,10.200.0.2,10.200.0.3 -n 3 \
        -genv UCX_TLS self,ivshmem,tcp -genv UCX_RNDV_THRESH inf $rndv_lanes \
        -genv UCX_IVSHMEM_STATS y -genv LD_PRELOAD "$UCT_LIB" \
        "$work/mpi_check" >"$out" 2>&1
    rc=$?
    t=$(($(date +%s) - t0))
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        hung=$((hung + 1))
        echo "run $i: did not end within 40 s ($(grep -c "^uct ivshmem" "$out") of 3 interfaces closed)"
        grep "mpi_check: 3 ranks" "$out"
        continue
    fi
    if [ $rc = 0 ] && grep -q "mpi_check: 3 ranks: 10 passed, 0 failed" "$out"; then
        passed=$((passed + 1))
    else
        echo "run $i: rc $rc"; tail -20 "$out"
    fi
    s0=$(sent_bytes "$out" vm0-hosta) s1=$(sent_bytes "$out" vm1-hosta) s2=$(sent_bytes "$out" vm2-hostb)
    if [ "${s0:-0}" -gt 8388608 ] && [ "${s1:-0}" -gt 8388608 ] && [ "${s2:-x}" = 0 ]; then
        routed=$((routed + 1))
        echo "run $i: passed in $t s; region bytes vm0 $s0, vm1 $s1, host b's VM $s2"
    else
        echo "run $i: region bytes vm0 ${s0:-none} vm1 ${s1:-none} vm2 ${s2:-none}"; grep "^uct ivshmem" "$out"
    fi
done
if [ $hung = 0 ] && [ $passed = "$runs" ]; then
    ok "MPICH $mpich_ver ch4:ucx ($how): mpi_check passed and ended in all $runs runs across the three VMs"
else
    bad "MPICH ch4:ucx: $passed of $runs runs passed, $hung did not end"
fi
if [ $routed = "$runs" ]; then
    ok "MPICH $mpich_ver ch4:ucx: the region carried the co-resident pair, host b's VM nothing (all $runs runs)"
else
    bad "MPICH ch4:ucx: the routes were as expected in $routed of $runs runs"
fi

simvm_checks_end test_ucx_mpich
