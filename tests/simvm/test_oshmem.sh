#!/bin/sh
# OpenSHMEM over the UCT transport ivshmem (mpi-plugin/ucx) across
# simulated VMs: oshrun runs shmem_check (put and get from and into
# private memory at sizes around the transport's protocol boundaries, 32-
# and 64-bit atomics on PE 0's words, every payload and result checked)
# with two PEs in co-resident VMs on host a (one region) and one in a VM
# of host b (its own region). spml ucx and sshmem ucx: the symmetric heap
# is allocated through UCX, and UCX_ALLOC_PRIO=md:ivshmem,... places it in
# the region (a second view of the region's chunks at the heap's fixed
# address). The counters prove the pair's puts, gets and atomics went
# through the region by zcopy and CPU atomics, and host b's PE reached
# nobody through it (UCX tcp carried it). UCX_TLS as in test_ucx.sh: the
# simulated VMs share /dev/shm and the boot id.
set -u
. "$(dirname "$0")/lib.sh"
simvm_require
command -v oshrun >/dev/null && command -v oshcc >/dev/null || simvm_skip "no OpenSHMEM (oshrun, oshcc)"
simvm_require_ucx

simvm_checks

oshcc -O2 "$top_srcdir/tests/simvm/shmem_check.c" -o "$work/shmem_check"
"$SIMVM" up a:0 a:1 b:2
simvm_format 128M

# the spml and sshmem ucx open without a Mellanox device only with the two
# _any (the same variables as pml_ucx_tls/devices)
# opal_common_ucx_opal_mem_hooks 0: Open MPI 4.1.4's OpenSHMEM otherwise
# dies in shmem_finalize (SIGSEGV in a memory-release hook of an unloaded
# component; UCX_TLS=self,tcp alike, docs/ucx.md)
SIMVM_PML="--mca spml ucx --mca sshmem ucx --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any --mca opal_common_ucx_opal_mem_hooks 0 --mca pml ob1 --mca osc pt2pt"
SIMVM_LAUNCHER=oshrun
export SIMVM_PML SIMVM_LAUNCHER
UCX_ENV="UCX_TLS=self,ivshmem,tcp UCX_ALLOC_PRIO=md:ivshmem,md:sysv,md:posix,huge,thp,md:*,mmap,heap UCX_IVSHMEM_STATS=y SHMEM_SYMMETRIC_HEAP_SIZE=32M"
xs=""
for v in $UCX_ENV; do xs="$xs -x $v"; done
# shellcheck disable=SC2086
SIMVM_TIMEOUT=60 simvm_mpirun 10.200.0.1:1,10.200.0.2:1,10.200.0.3:1 3 \
    --mca coll ^ivshmem --mca btl self,tcp --mca mpi_yield_when_idle 1 \
    -x LD_PRELOAD="$UCT_LIB" $xs "$work/shmem_check" >"$work/osh.out" 2>&1
rc=$?
n=$(grep -c "^shmem_check: PE [0-2] of 3: 3[0-9] passed, 0 failed" "$work/osh.out")
if [ $rc -eq 0 ] && [ "$n" = 3 ]; then
    ok "oshrun: shmem_check passes on the three PEs ($(grep -m1 '^shmem_check: PE 0' "$work/osh.out"))"
else
    bad "oshrun (rc $rc, $n PEs passed)"; tail -30 "$work/osh.out"
fi

# field FILE HOST WHAT: the most of WHAT (put|get zcopy bytes, atomics)
# one of HOST's interfaces did
field() {
    case $3 in
    put|get) re="$3 [0-9]* bytes (short [0-9]*, bcopy [0-9]*, zcopy \\([0-9]*\\))" ;;
    atomics) re="atomics \\([0-9]*\\)" ;;
    esac
    sed -n "s/^uct ivshmem rma: $2 pid [0-9]* device [^:]*: .*$re.*/\\1/p" "$1" | sort -n | tail -1
}
out=$work/osh.out
p0=$(field "$out" vm0-hosta put) g0=$(field "$out" vm0-hosta get) a0=$(field "$out" vm0-hosta atomics)
p1=$(field "$out" vm1-hosta put) g1=$(field "$out" vm1-hosta get) a1=$(field "$out" vm1-hosta atomics)
p2=$(field "$out" vm2-hostb put) g2=$(field "$out" vm2-hostb get) a2=$(field "$out" vm2-hostb atomics)
# PE 0 puts to and gets from PE 1 (its co-resident peer): the 4 MiB and
# 1 MiB messages at least by zcopy; PE 1 works on PE 0's words: its
# atomics (800 and more) went through the region. PE 1's own puts go to
# PE 2, on host b.
if [ "${p0:-0}" -ge 5242880 ] && [ "${g0:-0}" -ge 5242880 ] && [ "${a1:-0}" -ge 800 ]; then
    ok "the region carried the pair: zcopy put/get vm0 $p0/$g0 bytes, vm1's atomics $a1 (vm1 put/get $p1/$g1, vm0's atomics $a0: its own words)"
else
    bad "the pair: zcopy put/get vm0 ${p0:-none}/${g0:-none}, atomics vm1 ${a1:-none}"
    grep "^uct ivshmem" "$out"
fi
if [ "${p2:-x}" = 0 ] && [ "${g2:-x}" = 0 ] && [ "${a2:-x}" = 0 ]; then
    ok "host b's PE did nothing through its region (UCX tcp carried it)"
else
    bad "host b's PE: put ${p2:-none} get ${g2:-none} atomics ${a2:-none} through the region"
fi
grep -q "refused [1-9]" "$out" && bad "refused accesses: $(grep 'refused [1-9]' "$out" | head -3)"

simvm_checks_end test_oshmem
