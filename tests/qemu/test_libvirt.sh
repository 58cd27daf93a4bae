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
# channel messages between the two guests, doorbells). `ivshm-host
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
daemon_pid= server_pid= domains=
pass=0 fail=0

. "$s/tests/qemu/guest-lib.sh"

# QEMU's pids from libvirt's run directory, for when virsh cannot end them
qemu_pids() { cat "$lv/run/qemu"/*.pid 2>/dev/null; }
cleanup() {
    if [ -n "$daemon_pid" ]; then
        for d in $domains; do $virsh destroy "$d" >/dev/null 2>&1; done
        for p in $(qemu_pids); do kill "$p" 2>/dev/null; done
        kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null
    fi
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
    rm -f "/dev/shm/$name" "/dev/shm/$name.db"
    [ "${IVSHM_KEEP_GUEST_LOGS:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

[ "$(id -u)" = 0 ] || skip "needs root (libvirt's system daemon, a mount namespace)"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
command -v libvirtd >/dev/null || skip "no libvirtd (apt-get install libvirt-daemon libvirt-daemon-driver-qemu)"
command -v virsh >/dev/null || skip "no virsh (apt-get install libvirt-clients)"
command -v unshare >/dev/null || skip "no unshare (util-linux)"
[ -x /bin/busybox ] || skip "no busybox (busybox-static)"
sh "$s/tests/qemu/guest-kit.sh" "$kit" || skip "no guest kernel kit (apt-get update first?)"

# QEMU runs as this user and group, as libvirt's qemu driver runs it as
# libvirt-qemu (libvirt-daemon-system creates that user; else nobody)
if getent passwd libvirt-qemu >/dev/null; then
    quser=libvirt-qemu qgroup=$(id -gn libvirt-qemu)
else
    quser=nobody qgroup=$(id -gn nobody)
fi
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
mkdir -p "$lv/etc" "$lv/run" "$lv/lib" "$lv/log" "$lv/cache"
cat >"$lv/etc/qemu.conf" <<EOF
user = "$quser"
group = "$qgroup"
# no virtlogd: QEMU's own output goes to a file in the log directory
stdio_handler = "file"
EOF
cat >"$lv/etc/libvirtd.conf" <<EOF
log_outputs = "3:file:$lv/libvirtd.log"
EOF
binds="etc/libvirt:etc run/libvirt:run var/lib/libvirt:lib var/log/libvirt:log var/cache/libvirt:cache"
# The qemu driver resolves its built-in user and group libvirt-qemu before
# it reads qemu.conf, and refuses to start where they do not exist (only
# libvirt-daemon-system creates them): the daemon's namespace gets them as
# names of $quser's ids
if ! getent passwd libvirt-qemu >/dev/null; then
    { cat /etc/passwd; echo "libvirt-qemu:x:$(id -u "$quser"):$(id -g "$quser")::/nonexistent:/usr/sbin/nologin"; } >"$lv/passwd"
    { cat /etc/group; echo "libvirt-qemu:x:$(id -g "$quser"):"; } >"$lv/group"
    binds="$binds etc/passwd:passwd etc/group:group"
fi
# libvirt's system paths, each bound to the test's folder in the daemon's
# own mount namespace (the machine's directories only serve as mount points);
# its pid file in the test's folder too, not /run/libvirtd.pid, which a
# libvirtd of the machine (or of another run) holds
unshare --mount --propagation private sh -c '
    lv=$1; shift
    for d; do
        [ -e "/${d%%:*}" ] || mkdir -p "/${d%%:*}"
        mount --bind "$lv/${d#*:}" "/${d%%:*}" || exit 1
    done
    exec libvirtd --config "$lv/etc/libvirtd.conf" --pid-file "$lv/libvirtd.pid"' sh "$lv" $binds >"$lv/daemon.out" 2>&1 &
daemon_pid=$!
virsh="virsh -q -c qemu:///system?socket=$lv/run/libvirt-sock"
i=0
until $virsh version >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -gt 100 ] || ! kill -0 "$daemon_pid" 2>/dev/null; then
        echo "FAIL: libvirtd did not come up"; cat "$lv/daemon.out" "$lv/libvirtd.log" 2>/dev/null
        exit 1
    fi
    sleep 0.2
done
$virsh version | sed 's/^/   /'

# domain NAME ROLE APPEND-EXTRA SHMEM-XML: a guest of the busybox initramfs
domain_xml() {
    cat <<EOF
<domain type='qemu'>
  <name>$1</name>
  <memory unit='MiB'>384</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>$work/vmlinux</kernel>
    <initrd>$work/initrd</initrd>
    <cmdline>console=ttyS0 panic=-1 loglevel=4 ivt_role=$2 $3</cmdline>
  </os>
  <cpu mode='maximum'/>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>$(command -v qemu-system-x86_64)</emulator>
    <controller type='usb' model='none'/>
    <serial type='file'><source path='$work/$1.log'/><target port='0'/></serial>
    <memballoon model='none'/>
$4
  </devices>
</domain>
EOF
}

# define_and_check NAME ROLE APPEND-EXTRA SHMEM-XML: virsh define, then
# check-libvirt on what libvirt stored
define_and_check() {
    domain_xml "$@" >"$work/$1.xml"
    if ! $virsh define "$work/$1.xml" >"$work/$1.define" 2>&1; then
        fail=$((fail + 1)); echo "FAIL: virsh define $1:"; cat "$work/$1.define"; return 1
    fi
    domains="$domains $1"
    $virsh dumpxml "$1" >"$work/$1.stored.xml"
    sed -n '/<shmem/,/<\/shmem>/p' "$work/$1.stored.xml" | sed "s/^/   [$1 stored] /"
    if "$host" check-libvirt "$work/$1.stored.xml" >"$work/$1.check" 2>&1; then
        pass=$((pass + 1)); echo "   check-libvirt on virsh dumpxml $1: ok"
    else
        fail=$((fail + 1)); echo "FAIL: check-libvirt on virsh dumpxml $1:"
    fi
    sed "s/^/   [$1 check] /" "$work/$1.check"
}

# start_all NAME...: virsh start each; run_guests NAME...: waits (bounded)
# until libvirt reports them shut off, then counts their checks
start_all() {
    for d in "$@"; do
        if ! $virsh start "$d" >"$work/$d.start" 2>&1; then
            fail=$((fail + 1)); echo "FAIL: virsh start $d:"; cat "$work/$d.start"
            tail -5 "$lv/log/qemu/$d.log" 2>/dev/null
        fi
    done
}
wait_off() {
    t=0
    for d in "$@"; do
        while [ "$($virsh domstate "$d" 2>/dev/null)" = running ] && [ $t -lt 300 ]; do
            sleep 1; t=$((t + 1))
        done
        [ "$($virsh domstate "$d" 2>/dev/null)" = running ] && $virsh destroy "$d" >/dev/null 2>&1
    done
}
collect() {
    for d in "$@"; do
        log=$work/$d.log
        p=$(grep -c '^IVT-PASS' "$log" 2>/dev/null || true)
        f=$(grep -c '^IVT-FAIL' "$log" 2>/dev/null || true)
        pass=$((pass + p)); fail=$((fail + f))
        if ! grep -q '^IVT-END' "$log" 2>/dev/null; then
            fail=$((fail + 1))
            echo "FAIL: guest $d did not finish; its console and QEMU's log:"
            tail -30 "$log" 2>/dev/null; tail -10 "$lv/log/qemu/$d.log" 2>/dev/null
        fi
        echo "-- guest $d: $p passed, $f failed"
        grep -E '^(IVT-|    )' "$log" 2>/dev/null | sed "s/^/   [$d] /"
    done
}

# await_console NAME TEXT: waits (bounded: until the domain is off, at most
# 300 s) for the guest's console to say TEXT
await_console() {
    t=0
    until grep -q "$2" "$work/$1.log" 2>/dev/null; do
        [ "$($virsh domstate "$1" 2>/dev/null)" = running ] && [ $t -lt 1500 ] || return 1
        sleep 0.2; t=$((t + 1))
    done
}
# hotplug NAME SHMEM-XML: guest-init.sh's hotplug_checks from the host's
# side: virsh detach-device when the guest's guarded job runs, virsh
# attach-device when the guest has seen the device go, then the host's end
# (role b) of the guest's new channel job over the region
hotplug() {
    echo "$2" >"$work/shmem.xml"
    if ! await_console "$1" '^IVT-HOTPLUG-DETACH'; then
        fail=$((fail + 1)); echo "FAIL: guest $1 never asked for the detach"; return 1
    fi
    th=$(date +%s)
    if $virsh detach-device "$1" "$work/shmem.xml" --live >"$work/detach.out" 2>&1; then
        pass=$((pass + 1)); echo "   virsh detach-device $1 <shmem>: ok"
    else
        fail=$((fail + 1)); echo "FAIL: virsh detach-device $1 <shmem>:"; cat "$work/detach.out"
        return 1
    fi
    if ! await_console "$1" '^IVT-HOTPLUG-ATTACH'; then
        fail=$((fail + 1)); echo "FAIL: guest $1 never saw the device go"; return 1
    fi
    if $virsh attach-device "$1" "$work/shmem.xml" --live >"$work/attach.out" 2>&1; then
        pass=$((pass + 1)); echo "   virsh attach-device $1 <shmem>: ok"
    else
        fail=$((fail + 1)); echo "FAIL: virsh attach-device $1 <shmem>:"; cat "$work/attach.out"
        return 1
    fi
    $virsh dumpxml "$1" | sed -n '/<shmem/,/<\/shmem>/p' | grep -o "<address .*" |
        sed 's/^/   [re-attached at] /'
    if IVSHM_REGION="file:/dev/shm/$name" IVSHM_TEST_JOB=hotplug \
        timeout 200 "$b/tests/qemu/guest_test" chan b 100 >"$work/host-chan.out" 2>&1; then
        pass=$((pass + 1)); echo "   host's end of the channel job after the re-attach: ok"
    else
        fail=$((fail + 1)); echo "FAIL: host's end of the channel job after the re-attach:"
    fi
    sed 's/^/   [host] /' "$work/host-chan.out"
    echo "   (detach to the job's end after the re-attach: $(($(date +%s) - th)) s)"
}

echo "== permissions: a region only root may open"
# libvirt does not chown the backing file of a <shmem>: QEMU (not root)
# must be given it; check-libvirt says so before virsh start fails
"$IVSHM_TOOL" format "file:/dev/shm/$name" --size 16M --mode 0600 >/dev/null
shm=$("$host" libvirt-xml --name "$name" --size 16M 2>/dev/null)
define_and_check "$name-root" plain-a "" "$shm"
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
define_and_check "$name-plain-a" plain-a "ivt_hotplug=1" "$shm"
define_and_check "$name-plain-b" plain-b "" "$shm"
start_all "$name-plain-a" "$name-plain-b"
hotplug "$name-plain-a" "$shm"
wait_off "$name-plain-a" "$name-plain-b"
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
for r in a b; do define_and_check "$name-db-$r" "db-$r" "$align" "$shm"; done
start_all "$name-db-a" "$name-db-b"
wait_off "$name-db-a" "$name-db-b"
collect "$name-db-a" "$name-db-b"
sed 's/^/   [server] /' "$work/server.log"
kill "$server_pid"; wait "$server_pid" 2>/dev/null; server_pid=
echo "   ($(($(date +%s) - t0)) s)"

echo "test_libvirt: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
