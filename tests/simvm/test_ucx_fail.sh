#!/bin/sh
# Peer death through the UCT transport ivshmem: two UCP processes
# (ucp_peer_fail.c) exchange tagged messages through the region with error
# handling mode peer (UCX_TLS=ivshmem, both in one VM: UCX_IVSHMEM_SAME_VM),
# one is killed (SIGKILL) mid-transfer, and the survivor must see the
# endpoint's error callback (UCS_ERR_CONNECTION_RESET: the peer's lease is
# proven gone by its VM's pid table) within 10 s, not hang. Before, a dead
# peer was only logged and UCP refused the transport for mode peer (no
# UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE). Again with the killed peer in
# another VM (its own pid namespace): its lease is only in doubt, and the
# survivor's error callback (UCS_ERR_ENDPOINT_TIMEOUT) comes from UCP's
# keepalive once the peer is silent past UCX_IVSHMEM_PEER_TIMEOUT (2 s
# here), with one line that says so. Before, it waited its whole 30 s.
# Then an MPI job: Open MPI's pml ucx across three simulated VMs (two
# co-resident on host a, one on host b, as test_ucx.sh), mpi_kill.c: rank 1
# kills itself (SIGKILL) in the middle of 4 MiB transfers through the
# region, $UCX_KILL_RUNS times (default 2). Each job must end within 30 s,
# non-zero, with mpirun's message naming the killed rank, and no surviving
# rank may report a wrong payload. The killed rank's lease is only in doubt
# for the other VM (docs/lifetimes.md), so the transport reports nothing:
# mpirun's own abort (its daemon saw the rank die) ends the job.
set -u
. "$(dirname "$0")/lib.sh"
simvm_require_ucx
command -v pkg-config >/dev/null && pkg-config --exists ucx || simvm_skip "no UCX headers"

work=$(mktemp -d)
trap 'kill $a $b 2>/dev/null; [ -z "$vms" ] || "$SIMVM" down; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
a="" b="" vms=""
pass=0 fail=0

cc -O2 "$top_srcdir/tests/simvm/ucp_peer_fail.c" -o "$work/ucp_peer_fail" \
    $(pkg-config --cflags --libs ucx) -lucp || exit 1
# the lease expires 1 s after a process' last heartbeat
"$top_builddir/libivshm/tools/ivshm" format "file:$work/region" --size 32M --lease-ms 1000 --force >/dev/null
run() { # NAME WRAP...: one peer (started through WRAP), its address in
        # NAME.addr, the other's in the other
    name=$1 other=a; shift
    [ "$name" = a ] && other=b
    "$@" env IVSHM_REGION="file:$work/region" LD_PRELOAD="$UCT_LIB" UCX_TLS=ivshmem \
        UCX_IVSHMEM_SAME_VM=y UCX_IVSHMEM_STATS=y UCX_IVSHMEM_PEER_TIMEOUT=2s \
        UCX_KEEPALIVE_INTERVAL=0.5s \
        "$work/ucp_peer_fail" "$work/$name.addr" "$work/$other.addr" 30 >"$work/$name.out" 2>&1
}
# peer_killed WHAT WANT WRAP...: a and b exchange messages, b (started
# through WRAP) is killed; a's error callback must say WANT within 10 s
peer_killed() {
    what=$1 want=$2; shift 2
    rm -f "$work"/a.* "$work"/b.*
    run a & a=$!
    run b "$@" & b=$!
    for _ in $(seq 200); do
        grep -q running "$work/a.out" && grep -q running "$work/b.out" && break
        sleep 0.1
    done
    if ! grep -q running "$work/a.out" || ! grep -q running "$work/b.out"; then
        bad "$what: the two UCP processes did not exchange messages through the region"
        cat "$work/a.out" "$work/b.out"
        kill $a $b 2>/dev/null; wait $a $b 2>/dev/null
        return
    fi
    # b's own pid, not the shell's: the UCP process
    bpid=$(pgrep -f "^$work/ucp_peer_fail $work/b.addr")
    t0=$(date +%s)
    kill -KILL $bpid
    wait $b 2>/dev/null
    # the survivor ends by itself (callback) or after its 30 s
    for _ in $(seq 300); do kill -0 $a 2>/dev/null || break; sleep 0.1; done
    t=$(($(date +%s) - t0))
    wait $a; rc=$?
    if [ $rc = 0 ] && [ $t -le 10 ] && grep -q "ucp_peer_fail: error callback: $want" "$work/a.out"; then
        ok "$what: the survivor's error callback came after $t s ($(grep -o 'error callback: .*' "$work/a.out"))"
    else
        bad "$what: survivor rc $rc after $t s (want the callback '$want' within 10 s)"; cat "$work/a.out"
    fi
}
# 1. one VM: the killed peer's lease is proven gone by the pid table
peer_killed "peer killed mid-transfer (one VM)" "Connection reset by remote peer"
# 2. another VM (its own pid namespace): its death cannot be proven, its
#    lease is in doubt; UCP's keepalive asks, and past
#    UCX_IVSHMEM_PEER_TIMEOUT of silence the endpoint fails
peer_killed "peer in another VM killed" "Endpoint timeout" unshare --pid --fork
grep -q "silent for [0-9]* s, past UCX_IVSHMEM_PEER_TIMEOUT" "$work/a.out" &&
    ok "another VM: one line says why ($(grep -o 'peer [0-9]* of region.*' "$work/a.out" | head -1 | cut -c1-80)...)" ||
    bad "another VM: no line names the peer's silence"

# ---- an Open MPI pml ucx job whose rank 1 is killed mid-transfer
if [ "$(id -u)" != 0 ] || ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null ||
   ! { ip netns add ivsprobe 2>/dev/null && ip netns del ivsprobe; }; then
    [ "${IVSHM_REQUIRE_ALL:-0}" = 1 ] && bad "the MPI job needs root, Open MPI and namespaces"
    echo "skip: the MPI job (needs root, Open MPI and network namespaces)"
else
    vms=1
    "$SIMVM" up a:0 a:1 b:2
    simvm_format 64M
    mpicc -O2 "$top_srcdir/tests/simvm/mpi_kill.c" -o "$work/mpi_kill" || exit 1
    SIMVM_PML="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any"
    export SIMVM_PML
    runs=${UCX_KILL_RUNS:-2} i=0
    while [ $i -lt "$runs" ]; do
        i=$((i + 1))
        out=$work/kill.$i.out
        t0=$(date +%s)
        SIMVM_TIMEOUT=60 simvm_mpirun 10.200.0.1:1,10.200.0.2:1,10.200.0.3:1 3 \
            --mca coll ^ivshmem --mca btl self,tcp --mca mpi_yield_when_idle 1 \
            -x LD_PRELOAD="$UCT_LIB" -x UCX_TLS=self,ivshmem,tcp -x UCX_RNDV_THRESH=inf \
            "$work/mpi_kill" >"$out" 2>&1
        rc=$?
        t=$(($(date +%s) - t0))
        if [ $rc != 0 ] && [ $rc != 124 ] && [ $t -le 30 ] &&
           grep -q "mpi_kill: rank 0: rounds 0-2 checked" "$out" &&
           grep -q "mpi_kill: rank 1 killed in the middle" "$out" &&
           grep -q "exited on signal 9" "$out" && ! grep -q "wrong payload\|all .* rounds done" "$out"; then
            ok "MPI job, rank 1 killed mid-transfer (run $i): ended in $t s, exit $rc: $(grep -o "process rank 1 .*exited on signal 9[^.]*" "$out" | head -1)"
        else
            bad "MPI job, rank 1 killed mid-transfer (run $i): exit $rc after $t s (124: it hung)"
            tail -30 "$out"
        fi
    done
fi

simvm_checks_end test_ucx_fail
