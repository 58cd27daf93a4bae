#!/bin/sh
# The admin guide's libvirt path, against Debian's libvirt itself: a
# private libvirtd (its own mount namespace, configuration, run, state and
# log directories under the test's folder: nothing of the machine's libvirt
# is read or changed, and no systemd is needed) defines and starts QEMU
# guests (domain type 'qemu': TCG) whose <shmem> device is what
# `ivshm-host libvirt-xml` prints, in both modes:
#   plain     ivshmem-plain on /dev/shm/NAME made by `ivshm-host create`
#   doorbell  ivshmem-doorbell through ivshm-server's socket
# The guests boot the busybox initramfs of test_qemu.sh (guest-init.sh's
# plain-a/b and db-a/b roles: BAR2 through sysfs and the driver, verified
# channel messages between the two guests, doorbells); in each mode guest
# a's device is unplugged (`virsh detach-device --live`) under a guarded
# process and plugged back (`attach-device`). `ivshm-host
# check-libvirt` runs on what libvirt stores (`virsh dumpxml`). QEMU runs
# as a user that is not root, as libvirt's qemu driver does by default.
# Needs root, libvirtd and virsh (libvirt-daemon, libvirt-daemon-driver-qemu,
# libvirt-clients), qemu-system-x86_64, unshare and busybox-static. Skips
# (77) without them unless IVSHM_REQUIRE_GUESTS=1.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
b=$(cd "$b" && pwd); s=$(cd "$s" && pwd)
kit=${IVSHM_GUEST_KIT:-/var/cache/libivshm/guest-kit}
work=$(mktemp -d /tmp/ivshm-libvirt.XXXXXX)
lv=$work/libvirt
name=ivt-lv-$$
daemon_pid= server_pid= domains= crashed=
pass=0 fail=0

. "$s/tests/qemu/guest-lib.sh"

cleanup() {
    libvirt_stop
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
    rm -f "/dev/shm/$name" "/dev/shm/$name.db"
    [ "${IVSHM_KEEP_GUEST_LOGS:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

libvirt_required
[ -x /bin/busybox ] || skip "no busybox (busybox-static)"
sh "$s/tests/qemu/guest-kit.sh" "$kit" || skip "no guest kernel kit (apt-get update first?)"

# QEMU runs as libvirt-qemu, or nobody
libvirt_qemu_user
export IVSHM_TOOL="$b/libivshm/tools/ivshm"
host="$b/qemu-config/ivshm-host"

echo "== building ivshmem.ko and the initramfs for $(cat "$kit/kver")"
sh "$s/tests/qemu/build-module.sh" "$kit" "$s" "$work/mod" || exit 1
busybox_initrd "$work" "$b" "$s" "$work/initrd"
# QEMU (user $quser) opens the kernel, the initramfs, the consoles and the
# server socket in here
cp "$kit/vmlinux" "$work/vmlinux"
chmod 755 "$work"

echo "== a private libvirtd (QEMU as $quser:$qgroup)"
libvirt_daemon "$lv"

# collect NAME...: counts the checks of the guests NAME
collect() {
    for d in "$@"; do
        log=$work/$d.log
        p=$(grep -c '^IVT-PASS' "$log" 2>/dev/null || true)
        f=$(grep -c '^IVT-FAIL' "$log" 2>/dev/null || true)
        pass=$((pass + p)); fail=$((fail + f))
        if [ "$d" = "$crashed" ]; then
            echo "   (guest $d ended with QEMU's crash in the unplug)"
        elif ! grep -q '^IVT-END' "$log" 2>/dev/null; then
            fail=$((fail + 1))
            echo "FAIL: guest $d did not finish; its console and QEMU's log:"
            tail -30 "$log" 2>/dev/null; tail -10 "$lv/log/qemu/$d.log" 2>/dev/null
        elif [ "$p" -lt 15 ]; then
            # every role makes 19 checks or more: a role that finished
            # with fewer skipped some
            fail=$((fail + 1))
            echo "FAIL: guest $d finished after only $p checks (every role makes at least 15)"
        fi
        echo "-- guest $d: $p passed, $f failed"
        grep -E '^(IVT-|    )' "$log" 2>/dev/null | sed "s/^/   [$d] /"
    done
}

# guest NAME ROLE APPEND-EXTRA SHMEM-XML: defines a guest of the busybox
# initramfs (guest-init.sh's ROLE) and checks what libvirt stored
guest() {
    define_and_check "$1" 384 "$work/initrd" "ivt_role=$2 $3" "$4"
}

# hotplug NAME SHMEM-XML REGION: guest-init.sh's hotplug_checks from the
# host's side: virsh detach-device when the guest's guarded job runs, virsh
# attach-device when the guest has seen the device go, then the host's end
# (role b) of the guest's new channel job over the region (file REGION)
hotplug() {
    th=$(date +%s)
    shmem_hotplug "$1" "$2"
    case $? in
    0) ;;
    2) db_unplug_crash "$1"; return 1 ;;
    *) return 1 ;;
    esac
    if IVSHM_REGION="file:$3" IVSHM_TEST_JOB=hotplug \
        timeout 200 "$b/tests/qemu/guest_test" chan b 100 >"$work/host-chan.out" 2>&1; then
        pass=$((pass + 1)); echo "   host's end of the channel job after the re-attach: ok"
    else
        fail=$((fail + 1)); echo "FAIL: host's end of the channel job after the re-attach:"
    fi
    sed 's/^/   [host] /' "$work/host-chan.out"
    echo "   (detach to the job's end after the re-attach: $(($(date +%s) - th)) s)"
}

# db_unplug_crash NAME: Debian 12's QEMU (7.2) dies with SIGSEGV when
# libvirt unplugs an ivshmem-doorbell device (qemu-config/README.md): what
# it did before, checked. The guest saw the device go (its guarded process
# ended with the guard's message), QEMU's end was a crash, and the server
# and the other guest go on (the server's log and guest b's checks, below)
db_unplug_crash() {
    crashed=$1
    if sed -n '/^IVT-HOTPLUG-DETACH/,$p' "$work/$1.log" | grep -q 'ivshmem device removed'; then
        pass=$((pass + 1)); echo "   the guest saw the doorbell device go before QEMU ended"
    else
        fail=$((fail + 1)); echo "FAIL: QEMU ended before the guest saw the device go"
    fi
    if [ "$($virsh domstate --reason "$1" 2>/dev/null)" = "shut off (crashed)" ]; then
        pass=$((pass + 1)); echo "   QEMU crashed in the doorbell device's unplug (QEMU 7.2, as known)"
    else
        fail=$((fail + 1)); echo "FAIL: QEMU ended in the unplug, but not as the known crash"
    fi
}

echo "== permissions: a region only root may open"
# libvirt does not chown the backing file of a <shmem>: QEMU (not root)
# must be given it; check-libvirt says so before virsh start fails
"$IVSHM_TOOL" format "file:/dev/shm/$name" --size 16M --mode 0600 >/dev/null
shm=$("$host" libvirt-xml --name "$name" --size 16M 2>/dev/null)
guest "$name-root" plain-a "" "$shm"
if grep -q "root's only" "$work/$name-root.check"; then
    pass=$((pass + 1)); echo "   check-libvirt warns of the root-only region"
else
    fail=$((fail + 1)); echo "FAIL: check-libvirt did not warn of the root-only region"
fi
if $virsh start "$name-root" >"$work/$name-root.start" 2>&1; then
    fail=$((fail + 1)); echo "FAIL: QEMU (as $quser) opened a root-only region"
    $virsh destroy "$name-root" >/dev/null 2>&1
else
    pass=$((pass + 1)); echo "   virsh start refused, as expected:"
    grep -o "Permission denied\|error: .*" "$work/$name-root.start" | head -2 | sed 's/^/     /'
fi
$virsh undefine "$name-root" >/dev/null 2>&1
rm -f "/dev/shm/$name"

echo "== plain: ivshm-host create + libvirt-xml, two domains"
t0=$(date +%s)
"$host" create "/dev/shm/$name" --size 16M --owner "$quser:$qgroup" --mode 0660 |
    sed 's/^/   /'
shm=$("$host" libvirt-xml --name "$name" --size 16M 2>/dev/null)
echo "$shm" | sed 's/^/   [libvirt-xml] /'
# guest a also goes through hot-unplug and plug (hotplug_checks)
guest "$name-plain-a" plain-a "ivt_hotplug=1" "$shm"
guest "$name-plain-b" plain-b "" "$shm"
start_all "$name-plain-a" "$name-plain-b"
hotplug "$name-plain-a" "$shm" "/dev/shm/$name"
wait_off 300 "$name-plain-a" "$name-plain-b"
collect "$name-plain-a" "$name-plain-b"
# libvirt left the region as ivshm-host create made it (no relabelling)
got=$(stat -c '%U:%G %a' "/dev/shm/$name")
if [ "$got" = "$quser:$qgroup 660" ]; then pass=$((pass + 1)); echo "   region still $got"
else fail=$((fail + 1)); echo "FAIL: libvirt changed the region to $got"; fi
echo "   ($(($(date +%s) - t0)) s)"

echo "== doorbell: ivshm-server + libvirt-xml --doorbell, two domains"
t0=$(date +%s)
sock=$work/$name.sock
"$host" create "/dev/shm/$name.db" --size 16M --mode 0600 >/dev/null
"$b/qemu-config/ivshm-server" -S "$sock" -m "/dev/shm/$name.db" -n 2 \
    --group "$qgroup" --mode 0660 >"$work/server.log" 2>&1 &
server_pid=$!
i=0; while [ ! -S "$sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
shm=$("$host" libvirt-xml --name "$name-db" --size 16M --doorbell "$sock" --vectors 2)
echo "$shm" | sed 's/^/   [libvirt-xml] /'
# BAR0 page-aligned and page-sized, so the register page can be mmapped
align="pci=resource_alignment=12@pci:1af4:1110"
# guest a also goes through hot-unplug and plug: libvirt 9.0 accepts it as
# in plain mode, QEMU 7.2 crashes in it (db_unplug_crash); a QEMU that
# survives goes on to the plug as in plain mode
guest "$name-db-a" db-a "$align ivt_hotplug=1" "$shm"
guest "$name-db-b" db-b "$align" "$shm"
start_all "$name-db-a" "$name-db-b"
hotplug "$name-db-a" "$shm" "/dev/shm/$name.db"
wait_off 300 "$name-db-a" "$name-db-b"
collect "$name-db-a" "$name-db-b"
sed 's/^/   [server] /' "$work/server.log"
if kill -0 "$server_pid" 2>/dev/null && grep -q "peer 0 left" "$work/server.log"; then
    pass=$((pass + 1)); echo "   server alive, saw guest a's device leave"
else
    fail=$((fail + 1)); echo "FAIL: ivshm-server died or missed guest a's device leaving"
fi
kill "$server_pid"; wait "$server_pid" 2>/dev/null; server_pid=
echo "   ($(($(date +%s) - t0)) s)"

echo "test_libvirt: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
