#!/bin/sh
# What an admin installs, in a real guest booted with systemd: the guest
# driver built by DKMS, the udev rules, and the ivshm-server@ unit
# (tests/qemu/admin-guest-check.sh lists the checks).
#   1. DKMS: dkms add/build/install of guest-driver/ against Debian's 6.1
#      headers, in a Debian chroot (tests/qemu/dkms-build.sh)
#   2. one guest: Debian 12 with systemd, udev, Open MPI and QEMU, the DKMS
#      module in /lib/modules/KVER/updates/dkms, the rules in
#      /etc/udev/rules.d, the unit in /etc/systemd/system; an ivshmem-plain
#      device on a formatted region
# Needs root, qemu-system-x86_64, debootstrap and Debian's archive (root
# file systems cached under /var/cache/libivshm). Skips (77) without them
# unless IVSHM_REQUIRE_GUESTS=1.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
b=$(cd "$b" && pwd); s=$(cd "$s" && pwd)
cache=${IVSHM_GUEST_CACHE:-/var/cache/libivshm}
kit=${IVSHM_GUEST_KIT:-$cache/guest-kit}
rootfs=$cache/admin-rootfs
work=$(mktemp -d /tmp/ivshm-qemu-admin.XXXXXX)
R=/dev/shm/ivshm-qemu-admin-$$
qpid=
cleanup() {
    [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
    rm -f "$R"
    [ "${IVSHM_KEEP_GUEST_LOGS:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap "exit 1" INT TERM

. "$s/tests/qemu/guest-lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (chroot, debootstrap)"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
so=$b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so
[ -f "$so" ] || skip "the MPI component was not built"
command -v mpicc >/dev/null || skip "no mpicc"
sh "$s/tests/qemu/guest-kit.sh" "$kit" || skip "no guest kernel kit (apt-get update first?)"
sh "$s/tests/qemu/mpi-rootfs.sh" "$rootfs" "systemd systemd-sysv udev qemu-system-x86 dbus" ||
    skip "no guest root file system (debootstrap)"
kver=$(cat "$kit/kver")

echo "== DKMS: the guest driver for $kver, in a Debian chroot"
sh "$s/tests/qemu/dkms-build.sh" "$kit" "$s" "$cache/dkms-root" "$work/ivshmem.ko" || exit 1
mpicc -O2 -Wall -Wextra -Werror -o "$work/mpi_routes" "$s/tests/qemu/mpi_routes.c" ||
    { echo "FAIL: mpi_routes build"; exit 1; }

echo "== the guest's root file system"
root=$work/root
cp -a "$rootfs" "$root"
mods=$kit/root/lib/modules/$kver
mkdir -p "$root/lib/modules/$kver/updates/dkms"
cp "$work/ivshmem.ko" "$root/lib/modules/$kver/updates/dkms/"
cp "$mods"/modules.order "$mods"/modules.builtin* "$root/lib/modules/$kver/" 2>/dev/null
depmod -b "$root" "$kver" || { echo "FAIL: depmod"; exit 1; }
# what the admin guide (qemu-config/README.md) has the admin install
cp "$s/guest-driver/60-ivshmem.rules" "$root/etc/udev/rules.d/"
chroot "$root" groupadd --system ivshmem
mkdir -p "$root/usr/local/bin" "$root/etc/systemd/system/multi-user.target.wants"
# the server as make install leaves it: the binary and libivshm.so
mkdir -p "$root/usr/local/lib"
cp "$b/qemu-config/.libs/ivshm-server" "$root/usr/local/bin/"
cp -P "$b"/libivshm/.libs/libivshm.so.* "$root/usr/local/lib/"
ldconfig -r "$root"
cp "$b/tests/qemu/ivshm-static" "$root/usr/local/bin/ivshm"
sed "s|^ExecStart=[^ ]*/ivshm-server |ExecStart=/usr/local/bin/ivshm-server |" \
    "$b/qemu-config/ivshm-server@.service" >"$root/etc/systemd/system/ivshm-server@.service"
install_mpi_component "$root" "$b" "$s"
mkdir -p "$root/opt/ivt"
cp "$work/mpi_routes" "$s/tests/qemu/admin-guest-check.sh" "$root/opt/ivt/"
chmod 755 "$root/opt/ivt/mpi_routes"
cat >"$root/etc/systemd/system/ivt-admin.service" <<'EOF'
[Unit]
Description=libivshm admin checks (tests/qemu/test_guest_admin.sh)
After=systemd-udevd.service systemd-journald.service systemd-udev-trigger.service

[Service]
Type=oneshot
ExecStart=/bin/sh /opt/ivt/admin-guest-check.sh
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0

[Install]
WantedBy=multi-user.target
EOF
ln -sf /etc/systemd/system/ivt-admin.service "$root/etc/systemd/system/multi-user.target.wants/"
# the serial console is ours: no login prompt on it
ln -sf /dev/null "$root/etc/systemd/system/serial-getty@ttyS0.service"
echo admin-guest >"$root/etc/hostname"
: >"$root/etc/machine-id"
(cd "$root" && find . | cpio -o -H newc 2>/dev/null) >"$work/initrd"
rm -rf "$root"
echo "   initramfs: $(($(stat -c %s "$work/initrd") / 1048576)) MB"

"$b/libivshm/tools/ivshm" format "file:$R" --size 16M >/dev/null || { echo "FAIL: format"; exit 1; }
echo "== the guest (systemd as init)"
t0=$(date +%s)
timeout 1200 qemu-system-x86_64 -machine pc,accel=tcg -cpu max -m 1536 -smp 1 \
    -nodefaults -display none -no-reboot -monitor none -serial "file:$work/guest.log" \
    -kernel "$kit/vmlinux" -initrd "$work/initrd" \
    -append "console=ttyS0 rdinit=/sbin/init panic=-1 loglevel=4 systemd.show_status=0" \
    -object "memory-backend-file,id=m0,share=on,mem-path=$R,size=16M" \
    -device ivshmem-plain,memdev=m0,addr=4 >"$work/guest.qemu" 2>&1 &
qpid=$!
wait "$qpid"
qpid=
echo "   ($(($(date +%s) - t0)) s)"

log=$work/guest.log
grep -E '^(IVT-|==|    )' "$log" | sed 's/^/   /'
pass=$(grep -c '^IVT-PASS' "$log")
fail=$(grep -c '^IVT-FAIL' "$log")
if ! grep -q '^IVT-END' "$log"; then
    fail=$((fail + 1))
    echo "FAIL: the guest did not finish; its console:"
    tail -60 "$log"; cat "$work/guest.qemu"
fi
echo "test_guest_admin: $pass passed, $fail failed"
[ "$pass" -eq 14 ] || echo "FAIL: $pass checks passed, 14 expected"
[ "$fail" -eq 0 ] && [ "$pass" -eq 14 ]
