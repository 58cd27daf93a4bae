#!/bin/sh
# An MPI job between two libvirt guests over the region, and the region
# unplugged under a running job: a private libvirtd (guest-lib.sh's
# libvirt_daemon, as test_libvirt.sh) defines and starts two TCG domains
# (the MPI guests of test_qemu_mpi.sh: Debian 12 with Open MPI, dropbear)
# whose <shmem> is what `ivshm-host libvirt-xml` prints. The lead (vm1,
# mpi-guest-init.sh's libvirt role) runs a checked job whose counters must
# name the region both ways, then a job under `virsh detach-device --live`
# of its <shmem>, which must end with the region guard's one message; after
# `virsh attach-device --live` a new job uses the region again.
# mpirun launches over ssh on a libvirt <interface type='udp'> pair (QEMU's
# -netdev socket,udp= on 127.0.0.1): two guests need no bridge, tap device
# or network namespace (qemu-config/README.md says why).
# Needs root, libvirtd and virsh, qemu-system-x86_64, unshare, mpicc, the
# MPI component, debootstrap and Debian's archive (the root file system of
# mpi-rootfs.sh, built once). Skips (77) without them unless
# IVSHM_REQUIRE_GUESTS=1.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
b=$(cd "$b" && pwd); s=$(cd "$s" && pwd)
kit=${IVSHM_GUEST_KIT:-/var/cache/libivshm/guest-kit}
rootfs=${IVSHM_MPI_ROOTFS:-/var/cache/libivshm/mpi-rootfs}
work=$(mktemp -d /tmp/ivshm-libvirt-mpi.XXXXXX)
lv=$work/libvirt
name=ivt-lvmpi-$$
daemon_pid= domains=
pass=0 fail=0

. "$s/tests/qemu/guest-lib.sh"

cleanup() {
    libvirt_stop
    rm -f "/dev/shm/$name"
    [ "${IVSHM_KEEP_GUEST_LOGS:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

libvirt_required
[ -f "$b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so" ] || skip "the MPI component was not built"
command -v mpicc >/dev/null || skip "no mpicc"
sh "$s/tests/qemu/guest-kit.sh" "$kit" || skip "no guest kernel kit (apt-get update first?)"
sh "$s/tests/qemu/mpi-rootfs.sh" "$rootfs" || skip "no MPI guest root file system (debootstrap)"

libvirt_qemu_user
export IVSHM_TOOL="$b/libivshm/tools/ivshm"
host="$b/qemu-config/ivshm-host"

echo "== building ivshmem.ko, the test program and the initramfs for $(cat "$kit/kver")"
sh "$s/tests/qemu/build-module.sh" "$kit" "$s" "$work/mod" || exit 1
mpicc -O2 -Wall -Wextra -Werror -o "$work/mpi_routes" "$s/tests/qemu/mpi_routes.c" ||
    { echo "FAIL: mpi_routes build"; exit 1; }
mpi_initrd "$work" "$kit" "$rootfs" "$b" "$s" "$work/initrd" \
    "$work/mod/ivshmem.ko" "$work/mpi_routes" || exit 1
# QEMU (user $quser) opens the kernel, the initramfs and the consoles here
cp "$kit/vmlinux" "$work/vmlinux"
chmod 755 "$work"

echo "== a private libvirtd (QEMU as $quser:$qgroup)"
libvirt_daemon "$lv"

echo "== two domains: <shmem> of ivshm-host libvirt-xml, a UDP link for mpirun"
t0=$(date +%s)
"$host" create "/dev/shm/$name" --size 64M --owner "$quser:$qgroup" --mode 0660 | sed 's/^/   /'
shm=$("$host" libvirt-xml --name "$name" --size 64M 2>/dev/null)
echo "$shm" | sed 's/^/   [libvirt-xml] /'
# each guest's end of the link: its own UDP port, the other's as source
port=$((20000 + ($$ % 10000) * 2))
# guest N ROLE: vmN (10.77.0.N), 1 GiB as in test_qemu_mpi.sh
guest() {
    me=$((port + $1 - 1)) other=$((port + 2 - $1))
    define_and_check "$name-vm$1" 1024 "$work/initrd" \
        "rdinit=/init ivt_name=vm$1 ivt_ip=10.77.0.$1 ivt_role=$2" "$shm
    <interface type='udp'>
      <mac address='52:54:00:77:00:0$1'/>
      <source address='127.0.0.1' port='$other'>
        <local address='127.0.0.1' port='$me'/>
      </source>
      <model type='e1000'/>
    </interface>"
}
guest 1 libvirt
guest 2 member
start_all "$name-vm2" "$name-vm1"
shmem_hotplug "$name-vm1" "$shm"
wait_off 900 "$name-vm1"
wait_off 0 "$name-vm2"
echo "   ($(($(date +%s) - t0)) s)"

log=$work/$name-vm1.log
grep -E '^(IVT-|==|    |   \()' "$log" | grep -v '^IVT-READY' | sed 's/^/   [vm1] /'
p=$(grep -c '^IVT-PASS' "$log") f=$(grep -c '^IVT-FAIL' "$log")
f2=$(grep -c '^IVT-FAIL' "$work/$name-vm2.log")
[ "$f2" = 0 ] || grep '^IVT-FAIL' "$work/$name-vm2.log" | sed 's/^/   [vm2] /'
pass=$((pass + p)) fail=$((fail + f + f2))
if ! grep -q '^IVT-END' "$log"; then
    fail=$((fail + 1))
    echo "FAIL: the lead guest did not finish; its console and QEMU's log:"
    tail -60 "$log"; tail -10 "$lv/log/qemu/$name-vm1.log" 2>/dev/null
fi
echo "test_libvirt_mpi: $pass passed, $fail failed"
# every check must have run: 2 check-libvirt, 2 AppArmor rules, detach
# and attach here; the lead's ssh, 3 for the job, 3 under the unplug, 1
# after the plug
want=14
[ "$pass" -eq "$want" ] || echo "FAIL: $pass checks passed, $want expected"
[ "$fail" -eq 0 ] && [ "$pass" -eq "$want" ]
