#!/bin/busybox sh
# /init of the QEMU test guests (tests/qemu/test_qemu.sh). The kernel
# command line's ivt_role=ROLE picks what this guest checks; every check
# prints "IVT-PASS name" or "IVT-FAIL name: why" on the serial console, and
# the guest ends with "IVT-END" and powers off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
exec 2>&1

pass() { echo "IVT-PASS $1"; }
fail() { echo "IVT-FAIL $1: $2"; }
# check NAME CMD...: CMD must succeed
check() {
    n=$1; shift
    if out=$("$@" 2>&1); then pass "$n"; else fail "$n" "exit $? from '$*': $out"; fi
    [ -n "$out" ] && echo "$out" | sed 's/^/    /'
}
# expect_err NAME CODE TEXT CMD...: CMD must exit CODE and say TEXT
expect_err() {
    n=$1 code=$2 text=$3; shift 3
    out=$("$@" 2>&1); rc=$?
    echo "$out" | sed 's/^/    /'
    if [ "$rc" -eq "$code" ] && echo "$out" | grep -q -- "$text"; then pass "$n"
    else fail "$n" "want exit $code and '$text', got exit $rc"; fi
}
# same NAME WANT GOT
same() { if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "want '$2', got '$3'"; fi; }

driver_checks() { # $1: plain|doorbell
    check insmod insmod /ivshmem.ko
    same chardev yes "$( [ -c /dev/ivshmem0 ] && echo yes )"
    same driver-mode "$1" "$(cat /sys/class/ivshmem/ivshmem0/mode)"
    check driver-map /guest_test probe dev:auto
    check auto-prefers-driver sh -c '/guest_test probe auto | grep -q /dev/ivshmem0'
    check list-shows-driver sh -c '/ivshm list | grep -q "driver: dev:/dev/ivshmem0"'
    # the driver leaves BAR2 to sysfs (CONFIG_IO_STRICT_DEVMEM=y here)
    check sysfs-and-driver-same-memory /guest_test cross pci:auto dev:auto
}

rmmod_checks() {
    /guest_test hold-map 4 > /tmp/hold 2>&1 &
    hold=$!
    sleep 1
    if rmmod ivshmem 2>/dev/null; then fail rmmod-while-mapped "unloaded under a live mapping"
    else pass rmmod-while-mapped; fi
    wait $hold
    exec 3</dev/ivshmem0
    if rmmod ivshmem 2>/dev/null; then fail rmmod-while-open "unloaded under an open file"
    else pass rmmod-while-open; fi
    exec 3<&-
    check rmmod-idle rmmod ivshmem
    same chardev-gone no "$( [ -e /dev/ivshmem0 ] && echo yes || echo no )"
    check sysfs-after-rmmod /guest_test probe pci:auto
    check reinsmod insmod /ivshmem.ko
}

# unplug_under DEV CMD: runs guest_test CMD, unbinds DEV under it (what
# hot-unplug does to the driver), prints its output (kept in /tmp/CMD) and
# sets rc to its exit status
unplug_under() {
    /guest_test "$2" > "/tmp/$2" 2>&1 &
    victim=$!
    sleep 1
    echo "$1" > /sys/bus/pci/drivers/ivshmem/unbind
    wait $victim; rc=$?
    sed 's/^/    /' "/tmp/$2"
}
# the device goes away under a process that has it mapped and sleeps in
# read(), then under a libivshm user with the region guard
unplug_checks() {
    dev=$(basename "$(readlink /sys/class/ivshmem/ivshmem0/device)")
    unplug_under "$dev" unplug-victim
    same unplug-wakes-and-revokes 0 "$rc"
    same unplug-chardev-gone no "$( [ -e /dev/ivshmem0 ] && echo yes || echo no )"
    echo "$dev" > /sys/bus/pci/drivers/ivshmem/bind
    check rebind-after-unplug /guest_test probe dev:auto
    # a libivshm user with the region guard: one message, exit 75, no crash
    unplug_under "$dev" unplug-guarded
    same unplug-guard-exit 75 "$rc"
    same unplug-guard-message yes "$(grep -q 'ivshmem device removed' /tmp/unplug-guarded && echo yes)"
    echo "$dev" > /sys/bus/pci/drivers/ivshmem/bind
    check rebind-after-guarded-unplug /guest_test probe dev:auto
}

# the ivshmem devices in sysfs and their drivers (busybox has no lspci)
pci_ivshmem() {
    for d in /sys/bus/pci/devices/*; do
        [ "$(cat "$d/vendor")" = 0x1af4 ] && [ "$(cat "$d/device")" = 0x1110 ] || continue
        echo "${d##*/} driver=$(basename "$(readlink "$d/driver" 2>/dev/null)")"
    done
}
# hotplug_checks: the host takes the device away (libvirt's detach-device:
# ACPI hot-unplug) under a libivshm user with the region guard, then plugs it
# back (attach-device); the driver must bind the new device and a new job
# (a channel with the host, role b) must run over the region; in doorbell
# mode the new device is a new client of the server. "IVT-HOTPLUG"
# lines on the console tell the host when to act (test_libvirt.sh)
hotplug_checks() {
    dev=$(basename "$(readlink /sys/class/ivshmem/ivshmem0/device)")
    echo "    before: $(pci_ivshmem)"
    /guest_test unplug-guarded > /tmp/hot-guarded 2>&1 &
    victim=$!
    i=0
    while ! grep -q "mapped and guarded" /tmp/hot-guarded 2>/dev/null && [ $i -lt 100 ]; do
        sleep 0.1; i=$((i + 1))
    done
    echo "IVT-HOTPLUG-DETACH $dev"
    wait $victim; rc=$?
    sed 's/^/    /' /tmp/hot-guarded
    same hot-unplug-guard-exit 75 "$rc"
    same hot-unplug-guard-message yes "$(grep -q 'ivshmem device removed' /tmp/hot-guarded && echo yes)"
    same hot-unplug-pci-gone "" "$(pci_ivshmem)"
    echo "IVT-HOTPLUG-ATTACH"
    i=0
    while [ ! -c /dev/ivshmem0 ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i + 1)); done
    echo "    after: $(pci_ivshmem)"
    same hot-plug-driver-bound ivshmem "$(pci_ivshmem | sed -n 's/.* driver=//p')"
    check hot-plug-probe /guest_test probe dev:auto
    IVSHM_REGION=dev:auto IVSHM_TEST_JOB=hotplug check chan-after-hot-plug /guest_test chan a 100
}

echo "IVT-BOOT role=$ivt_role kernel=$(uname -r)"
case $ivt_role in
plain-a|plain-b)
    me=${ivt_role#plain-}
    check sysfs-found sh -c '/ivshm list | grep -q "plain"'
    check sysfs-map /guest_test probe pci:auto
    driver_checks plain
    expect_err plain-read-enxio 1 "No such device or address" dd if=/dev/ivshmem0 of=/dev/null bs=8 count=1
    IVSHM_REGION=dev:auto IVSHM_TEST_JOB=chan check chan-through-driver /guest_test chan "$me" 300
    IVSHM_REGION=pci:auto IVSHM_TEST_JOB=chan2 check chan-through-sysfs /guest_test chan "$me" 100
    rmmod_checks
    [ "${ivt_hotplug:-0}" = 1 ] && hotplug_checks
    ;;
db-a|db-b)
    me=${ivt_role#db-}
    driver_checks doorbell
    same vectors 2 "$(cat /sys/class/ivshmem/ivshmem0/vectors)"
    echo "    IVPosition $(cat /sys/class/ivshmem/ivshmem0/ivposition)"
    # wake-ups only by interrupt: the safety-net re-check is an hour away
    export IVSHM_REGION=dev:auto IVSHM_DOORBELL_RECHECK_MS=3600000
    if [ "$me" = b ]; then
        IVSHM_TEST_JOB=db check doorbell-wakes-blocked-receiver /guest_test doorbell-wait 3
        IVSHM_TEST_JOB=dbfd check doorbell-event-fd-wakes-poll /guest_test doorbell-fd 3
        IVSHM_TEST_JOB=raw check raw-read-woken /guest_test raw-wait
    else
        IVSHM_TEST_JOB=db check doorbell-send /guest_test doorbell-send 3
        IVSHM_TEST_JOB=dbfd check doorbell-send-to-event-fd /guest_test doorbell-send 3
        IVSHM_TEST_JOB=raw check raw-ring-mmap-register /guest_test raw-ring
    fi
    IVSHM_TEST_JOB=dbchan check chan-doorbell-device /guest_test chan "$me" 200
    rmmod_checks
    unplug_checks
    [ "${ivt_hotplug:-0}" = 1 ] && hotplug_checks
    ;;
nodev)
    check list-none sh -c '/ivshm list | grep -q "no ivshmem devices"'
    expect_err no-device 5 "no ivshmem device" /guest_test probe auto
    check insmod-without-device insmod /ivshmem.ko
    expect_err no-driver-device 5 "no device of the ivshmem guest driver" /guest_test probe dev:auto
    ;;
badfmt)
    # two devices: 00:04.0 unformatted, 00:05.0 garbage
    expect_err two-devices-ambiguous 6 "choose one" /guest_test probe pci:auto
    expect_err unformatted 8 "" /guest_test probe pci:00:04.0
    expect_err wrong-magic 9 "" /guest_test probe pci:00:05.0
    check insmod insmod /ivshmem.ko
    expect_err unformatted-via-driver 8 "" /guest_test probe dev:/dev/ivshmem0
    ;;
*)
    fail role "unknown role '$ivt_role'"
    ;;
esac
# whatever the role: the kernel must not have complained
if dmesg | grep -E "BUG:|Oops|WARNING:|general protection|Call Trace" > /tmp/oops; then
    fail kernel-clean "$(head -5 /tmp/oops)"
else
    pass kernel-clean
fi
echo "IVT-END"
poweroff -f
