#!/bin/sh
# The UCT transport ivshmem (mpi-plugin/ucx, libuct_ivshmem.so) under the
# MPIs that run over UCX, across simulated VMs: two co-resident VMs on host
# a (one region) and one VM on host b (its own region).
#  1. the transport registers only into the UCX it was built for: a
#     process whose libucp says another version gets one message and no
#     ivshmem component;
#  2. `ucx_info -d` lists it with the device of the region it serves, and
#     with no device where there is no region;
#  3. Open MPI's pml ucx runs mpi_check (every payload checked, 0 B to
#     4 MiB) across the three VMs; the transport's counters show the
#     co-resident pair's traffic went through the region and the VM on
#     host b sent nothing through it (tcp carried it);
# Debian's MPICH (ch4:ucx) over the same three VMs: test_ucx_mpich.sh.
# UCX_TLS is restricted to self, ivshmem and tcp: the simulated VMs share
# /dev/shm and the boot id, so UCX's own posix/sysv/cma would reach across
# them (in real guests they cannot). UCX_RNDV_THRESH=inf: until the
# transport has put/get zcopy, rendezvous would move large messages over
# the network's RMA lanes (docs/ucx.md).
set -u
. "$(dirname "$0")/lib.sh"
simvm_require
command -v ucx_info >/dev/null || simvm_skip "no ucx_info (ucx-utils)"
UCT_LIB=$top_builddir/mpi-plugin/ucx/.libs/libuct_ivshmem.so
[ -f "$UCT_LIB" ] || simvm_skip "UCX transport not built (configure: UCX transport no)"

work=$(mktemp -d)
trap '"$SIMVM" down; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
IVSHM=$top_builddir/libivshm/tools/ivshm

# ---- 1. another UCX: refused with one message
cat >"$work/fakeucp.c" <<'C'
void ucp_get_version(unsigned *major, unsigned *minor, unsigned *patch)
{
    *major = 1; *minor = 13; *patch = 0;
}
C
cc -shared -fPIC -o "$work/libfakeucp.so" "$work/fakeucp.c"
timeout 30 env LD_PRELOAD="$work/libfakeucp.so $UCT_LIB" ucx_info -d >"$work/fake.out" 2>&1
n=$(grep -c "libuct_ivshmem: built for UCX .*, but this process runs UCX 1.13.0" "$work/fake.out")
if [ "$n" = 1 ] && ! grep -q "Memory domain: ivshmem" "$work/fake.out"; then
    ok "another UCX (1.13.0, a patch release away): one message, no ivshmem component"
else
    bad "another UCX: $n messages"; grep -i ivshmem "$work/fake.out" | head -5
fi

"$SIMVM" up a:0 a:1 b:2
simvm_format 64M
region_a=/dev/shm/ivshm-simhost-a

# ---- 2. ucx_info
uuid8=$("$IVSHM" info "file:$region_a" | sed -n 's/^uuid *\([0-9a-f]\{8\}\).*/\1/p')
timeout 30 env IVSHM_REGION=file:$region_a LD_PRELOAD=$UCT_LIB ucx_info -d >"$work/info.out" 2>&1
if sed -n '/Memory domain: ivshmem/,/Memory domain:/p' "$work/info.out" |
       grep -q "Transport: ivshmem" &&
   sed -n '/Transport: ivshmem/,/Transport:/p' "$work/info.out" | grep -q "Device: region_$uuid8"; then
    ok "ucx_info -d lists transport ivshmem on device region_$uuid8 (the region's UUID)"
else
    bad "ucx_info -d: no ivshmem transport on region_$uuid8"; grep -A8 "ivshmem" "$work/info.out" | head -20
fi
timeout 30 env IVSHM_REGION=file:$work/none LD_PRELOAD=$UCT_LIB ucx_info -d >"$work/info0.out" 2>&1
if sed -n '/Memory domain: ivshmem/,/Memory domain:/p' "$work/info0.out" | grep -q "no supported devices"; then
    ok "without a region: the ivshmem memory domain offers no device"
else
    bad "without a region"; grep -A5 "ivshmem" "$work/info0.out" | head
fi

# sent_bytes FILE HOST: the most bytes one of HOST's interfaces sent
sent_bytes() {
    sed -n "s/^uct ivshmem: $2 pid [0-9]* device [^:]*: sent [0-9]* messages (\([0-9]*\) bytes).*/\1/p" "$1" |
        sort -n | tail -1
}
# check_routes FILE WHO: the co-resident pair went through the region (each
# side sent more than the 4 MiB message twice, as rendezvous over tcp
# would not), the VM of host b sent nothing through it
check_routes() {
    s0=$(sent_bytes "$1" vm0-hosta) s1=$(sent_bytes "$1" vm1-hosta) s2=$(sent_bytes "$1" vm2-hostb)
    if [ "${s0:-0}" -gt 8388608 ] && [ "${s1:-0}" -gt 8388608 ] && [ "${s2:-x}" = 0 ]; then
        ok "$2: the region carried the co-resident pair (vm0 sent $s0 bytes, vm1 $s1), host b's VM nothing ($s2)"
    else
        bad "$2: region bytes vm0 ${s0:-none} vm1 ${s1:-none} vm2 ${s2:-none}"; grep "^uct ivshmem" "$1"
    fi
}
UCX_ENV="UCX_TLS=self,ivshmem,tcp UCX_RNDV_THRESH=inf UCX_IVSHMEM_STATS=y"

# ---- 3. Open MPI, pml ucx
mpicc -O2 "$top_srcdir/tests/simvm/mpi_check.c" -o "$work/mpi_check"
SIMVM_PML="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca osc ucx"
export SIMVM_PML
xs=""
for v in $UCX_ENV; do xs="$xs -x $v"; done
# shellcheck disable=SC2086
SIMVM_TIMEOUT=60 simvm_mpirun 10.200.0.1:1,10.200.0.2:1,10.200.0.3:1 3 \
    --mca coll ^ivshmem --mca btl self,tcp --mca mpi_yield_when_idle 1 \
    -x LD_PRELOAD="$UCT_LIB" $xs "$work/mpi_check" >"$work/ompi.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "mpi_check: 3 ranks: 10 passed, 0 failed" "$work/ompi.out"; then
    ok "Open MPI pml ucx: mpi_check passes across the three VMs"
else
    bad "Open MPI pml ucx (rc $rc)"; tail -30 "$work/ompi.out"
fi
check_routes "$work/ompi.out" "Open MPI pml ucx"

echo "test_ucx: $pass passed, $fail failed"
[ $fail -eq 0 ]
