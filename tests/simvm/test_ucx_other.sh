#!/bin/sh
# The UCT transport built for another UCX release (1.13's build under UCX
# 1.18, or 1.18's under 1.13) refuses to register, with one line per
# process, and a job that preloads it runs on UCX's other transports.
# UCX checks no ABI when a component registers: registering a component
# compiled against another release's structures would corrupt it.
#   IVSHM_OTHER_UCT=PATH  a libuct_ivshmem.so built for another UCX (the
#                         Debian 13 tier passes the other release's build)
#  1. ucx_info -d: one message naming both versions, no ivshmem domain;
#  2. Open MPI's pml ucx between two simulated VMs with
#     UCX_TLS=self,ivshmem,tcp: mpi_check passes (every payload checked),
#     each rank printed the message once, no ivshmem interface opened
#     (no counters), tcp carried the job.
set -u
. "$(dirname "$0")/lib.sh"
simvm_require
command -v ucx_info >/dev/null || simvm_skip "no ucx_info (ucx-utils)"
[ -f "${IVSHM_OTHER_UCT:-}" ] ||
    simvm_skip "IVSHM_OTHER_UCT names no transport built for another UCX"
ucx_ver=$(pkg-config --modversion ucx)

simvm_checks
refusal="libuct_ivshmem: built for UCX [0-9.]*, but this process runs UCX $ucx_ver"

# ---- 1. ucx_info
timeout 30 env LD_PRELOAD="$IVSHM_OTHER_UCT" ucx_info -d >"$work/info.out" 2>&1
n=$(grep -c "$refusal" "$work/info.out")
built=$(sed -n 's/^libuct_ivshmem: built for UCX \([0-9.]*\),.*/\1/p' "$work/info.out" | head -1)
if [ "$n" = 1 ] && [ -n "$built" ] && [ "$built" != "$ucx_ver" ] &&
   ! grep -q "Memory domain: ivshmem" "$work/info.out" &&
   grep -q "Memory domain: self" "$work/info.out"; then
    ok "a build for UCX $built under UCX $ucx_ver: one message, no ivshmem component, UCX's others listed"
else
    bad "a build for another UCX under $ucx_ver: $n messages (built for ${built:-?})"
    grep -i "ivshmem\|error\|symbol" "$work/info.out" | head -5
fi

# ---- 2. a job with it preloaded
"$SIMVM" up a:0 a:1
simvm_format 64M
mpicc -O2 "$top_srcdir/tests/simvm/mpi_check.c" -o "$work/mpi_check"
SIMVM_PML="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca osc ucx"
export SIMVM_PML
SIMVM_TIMEOUT=60 simvm_mpirun 10.200.0.1:1,10.200.0.2:1 2 \
    --mca coll ^ivshmem --mca btl self,tcp --mca mpi_yield_when_idle 1 \
    -x LD_PRELOAD="$IVSHM_OTHER_UCT" -x UCX_TLS=self,ivshmem,tcp \
    -x UCX_IVSHMEM_STATS=y -x UCX_WARN_UNUSED_ENV_VARS=n \
    "$work/mpi_check" >"$work/job.out" 2>&1
rc=$?
# ranks only: the launcher's processes do not get -x LD_PRELOAD
n=$(grep -c "$refusal" "$work/job.out")
if [ $rc -eq 0 ] && grep -q "mpi_check: 2 ranks: 10 passed, 0 failed" "$work/job.out" &&
   [ "$n" = 2 ] && ! grep -q "^uct ivshmem" "$work/job.out"; then
    ok "Open MPI pml ucx with it preloaded: mpi_check passes over tcp, one message per rank, no ivshmem interface"
else
    bad "the job with a build for another UCX (rc $rc, $n messages)"
    grep -av "bad prefix\|pmix_mca_\|^ *$" "$work/job.out" | tail -15
fi

simvm_checks_end test_ucx_other
