#!/bin/sh
# MPI jobs in real guests, over both routes of the component: four QEMU
# guests (Debian 12 root file system with Open MPI, dropbear and soft-RoCE,
# Debian's 6.1 kernel, TCG) on one Ethernet segment, as two "hosts":
#   vm1, vm2 map region A;  vm3, vm4 map region B.
# One mpirun over the four (no tcp BTL) must use the region between the
# guests of a host and verbs between hosts; then a rank is killed in the
# middle of a verbs transfer; then one host loses its RDMA device (see
# mpi-guest-init.sh for every check). The mixed job also runs through
# Open MPI's pml ucx: the UCT transport ivshmem (mpi-plugin/ucx) inside
# each host, UCX's rc/ud over soft-RoCE between hosts (docs/ucx.md, Real
# guests). IVSHM_GUEST_ROLE=ucx runs only that job (and ssh).
#
# Needs root (a network namespace of its own with a bridge and tap
# devices: nothing leaves the machine), qemu-system-x86_64, debootstrap and
# Debian's archive (the root file system is built once into
# $IVSHM_MPI_ROOTFS). Skips (77) without them unless IVSHM_REQUIRE_GUESTS=1.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
b=$(cd "$b" && pwd); s=$(cd "$s" && pwd)
kit=${IVSHM_GUEST_KIT:-/var/cache/libivshm/guest-kit}
rootfs=${IVSHM_MPI_ROOTFS:-/var/cache/libivshm/mpi-rootfs}
work=$(mktemp -d /tmp/ivshm-qemu-mpi.XXXXXX)
R=/dev/shm/ivshm-qemu-mpi-$$
ns=ivq$$
pids=
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
    rm -f "$R".*
    [ "${IVSHM_KEEP_GUEST_LOGS:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap "exit 1" INT TERM

. "$s/tests/qemu/guest-lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (network namespace, tap devices)"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
[ -c /dev/net/tun ] || skip "no /dev/net/tun"
so=$b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so
[ -f "$so" ] || skip "the MPI component was not built"
nm -D "$so" | grep -q rdma_create_id || skip "the component was built without its verbs route"
command -v mpicc >/dev/null || skip "no mpicc"
sh "$s/tests/qemu/guest-kit.sh" "$kit" || skip "no guest kernel kit (apt-get update first?)"
sh "$s/tests/qemu/mpi-rootfs.sh" "$rootfs" || skip "no MPI guest root file system (debootstrap)"
kver=$(cat "$kit/kver")

echo "== building ivshmem.ko and the test program"
sh "$s/tests/qemu/build-module.sh" "$kit" "$s" "$work/mod" || exit 1
mpicc -O2 -Wall -Wextra -Werror -o "$work/mpi_routes" "$s/tests/qemu/mpi_routes.c" ||
    { echo "FAIL: mpi_routes build"; exit 1; }
mpicc -O2 -o "$work/ivshm-osu" "$s/benchmarks/ivshm_osu.c" || { echo "FAIL: ivshm-osu build"; exit 1; }

echo "== the initramfs ($kver)"
# the UCX transport for the job through pml ucx (docs/ucx.md, Real guests)
uct=$b/mpi-plugin/ucx/.libs/libuct_ivshmem.so
ucx_checks=4
if [ ! -f "$uct" ]; then
    uct= ucx_checks=0
    [ "${IVSHM_REQUIRE_GUESTS:-0}${IVSHM_REQUIRE_ALL:-0}" = 00 ] ||
        { echo "FAIL: the UCX transport was not built (configure: UCX transport no)"; exit 1; }
    echo "   the UCX transport was not built: its job is left out"
fi
mpi_initrd "$work" "$kit" "$rootfs" "$b" "$s" "$work/initrd" \
    "$work/mod/ivshmem.ko" "$work/mpi_routes" "$work/ivshm-osu" $uct || exit 1

# ---- one Ethernet segment in a namespace of our own ----
ip netns add "$ns" || skip "cannot create a network namespace"
ip -n "$ns" link add br0 type bridge
ip -n "$ns" link set br0 up
for i in 1 2 3 4; do
    ip -n "$ns" tuntap add "tap$i" mode tap
    ip -n "$ns" link set "tap$i" master br0
    ip -n "$ns" link set "tap$i" up
done

IVSHM="$b/libivshm/tools/ivshm"
for r in A B; do
    "$IVSHM" format "file:$R.$r" --size 64M >/dev/null || { echo "FAIL: format"; exit 1; }
done

# guest N REGION ROLE: boots vmN in the namespace, its console in $work/vmN.log
guest() {
    n=$1 reg=$2 role=$3
    ip netns exec "$ns" timeout 1500 qemu-system-x86_64 -machine pc,accel=tcg -cpu max \
        -m 1024 -smp 1 -nodefaults -display none -no-reboot -monitor none \
        -serial "file:$work/vm$n.log" \
        -kernel "$kit/vmlinux" -initrd "$work/initrd" \
        -append "console=ttyS0 panic=-1 loglevel=4 rdinit=/init ivt_name=vm$n ivt_ip=10.77.0.$n ivt_role=$role" \
        -netdev "tap,id=n0,ifname=tap$n,script=no,downscript=no" \
        -device "e1000,netdev=n0,mac=52:54:00:77:00:0$n" \
        -object "memory-backend-file,id=m0,share=on,mem-path=$R.$reg,size=64M" \
        -device ivshmem-plain,memdev=m0,addr=4 \
        >"$work/vm$n.qemu" 2>&1 &
    pids="$pids $!"
}

echo "== four guests: vm1+vm2 on region A, vm3+vm4 on region B"
t0=$(date +%s)
guest 2 A member
guest 3 B member
guest 4 B member
# IVSHM_GUEST_ROLE=bench: the route benchmarks instead of the checks
# (benchmarks/guest-routes.sh), the lead's console kept in $IVSHM_BENCH_LOG
guest 1 A "${IVSHM_GUEST_ROLE:-lead}"
lead=${pids##* }
wait "$lead"
echo "   ($(($(date +%s) - t0)) s)"

pass=0 fail=0
log=$work/vm1.log
[ -n "${IVSHM_BENCH_LOG:-}" ] && cp "$log" "$IVSHM_BENCH_LOG"
grep -E '^(IVT-|==|    |   \(|   allocmem)' "$log" | grep -v '^IVT-READY' | sed 's/^/   [vm1] /'
pass=$(grep -c '^IVT-PASS' "$log")
fail=$(grep -c '^IVT-FAIL' "$log")
for n in 2 3 4; do
    f=$(grep -c '^IVT-FAIL' "$work/vm$n.log")
    [ "$f" = 0 ] || { grep '^IVT-FAIL' "$work/vm$n.log" | sed "s/^/   [vm$n] /"; fail=$((fail + f)); }
done
if ! grep -q '^IVT-END' "$log"; then
    fail=$((fail + 1))
    echo "FAIL: the lead guest did not finish; its console:"
    tail -60 "$log"; cat "$work/vm1.qemu"
fi
echo "test_qemu_mpi: $pass passed, $fail failed"
# every check must have run: the lead 14 (ssh, 5 for the mixed job, 2
# for MPI_Alloc_mem across hosts, 2 for the fault, 4 without RDMA) and 4
# for the job through pml ucx, bench 11 (ssh and 10 figures), ucx 1 and 4
case ${IVSHM_GUEST_ROLE:-lead} in
lead) want=$((14 + ucx_checks)) ;; bench) want=11 ;; ucx) want=$((1 + ucx_checks)) ;;
esac
[ "$pass" -eq "$want" ] || echo "FAIL: $pass checks passed, $want expected"
[ "$fail" -eq 0 ] && [ "$pass" -eq "$want" ]
