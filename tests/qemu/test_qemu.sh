#!/bin/sh
# Real guests: Debian's 6.1 kernel under QEMU (TCG), a busybox initramfs
# with our module and static test programs, 2 guests at a time sharing one
# region (see guest-init.sh for what each guest checks):
#   plain     ivshmem-plain: sysfs and driver mappings, channels, rmmod
#   doorbell  ivshmem-doorbell through ivshm-server: interrupts wake a
#             blocked receiver (libivshm and raw read()), register mmap
#   errors    a guest without the device; a guest whose regions are
#             unformatted or hold something else
# Needs qemu-system-x86_64, busybox-static and Debian's apt lists (the
# kernel packages are downloaded once into $IVSHM_GUEST_KIT). Skips (77)
# without them unless IVSHM_REQUIRE_GUESTS=1.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
b=$(cd "$b" && pwd); s=$(cd "$s" && pwd)
kit=${IVSHM_GUEST_KIT:-/var/cache/libivshm/guest-kit}
work=$(mktemp -d /tmp/ivshm-qemu.XXXXXX)
R=/dev/shm/ivshm-qemu-$$
server_pid=
pass=0 fail=0
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
    rm -f "$R".*
    [ "${IVSHM_KEEP_GUEST_LOGS:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

. "$s/tests/qemu/guest-lib.sh"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
[ -x /bin/busybox ] || skip "no busybox (busybox-static)"
sh "$s/tests/qemu/guest-kit.sh" "$kit" || skip "no guest kernel kit (apt-get update first?)"

# ---- the module, built against the guest kernel's headers ----
echo "== building ivshmem.ko for $(cat "$kit/kver")"
sh "$s/tests/qemu/build-module.sh" "$kit" "$s" "$work/mod" || exit 1

# ---- the initramfs ----
busybox_initrd "$work" "$b" "$s" "$work/initrd"

# guest NAME ROLE APPEND-EXTRA QEMU-DEVICE-ARGS...: boots one guest in the
# background (pid added to $pids); its console goes to $work/NAME.log
guest() {
    name=$1 role=$2 extra=$3; shift 3
    timeout 300 qemu-system-x86_64 -machine pc,accel=tcg -cpu max -m 384 -smp 1 \
        -nodefaults -display none -no-reboot -monitor none \
        -serial "file:$work/$name.log" \
        -kernel "$kit/vmlinux" -initrd "$work/initrd" \
        -append "console=ttyS0 panic=-1 loglevel=4 ivt_role=$role $extra" \
        "$@" >"$work/$name.qemu" 2>&1 &
    pids="$pids $!"
}

# collect NAME...: waits for the guests and counts their checks
collect() {
    for name in "$@"; do
        log=$work/$name.log
        p=$(grep -c '^IVT-PASS' "$log" 2>/dev/null || true)
        f=$(grep -c '^IVT-FAIL' "$log" 2>/dev/null || true)
        pass=$((pass + p)); fail=$((fail + f))
        if ! grep -q '^IVT-END' "$log" 2>/dev/null; then
            fail=$((fail + 1))
            echo "FAIL: guest $name did not finish; its console:"
            tail -40 "$log" 2>/dev/null; cat "$work/$name.qemu"
        fi
        echo "-- guest $name: $p passed, $f failed"
        grep -E '^(IVT-|    )' "$log" | sed "s/^/   [$name] /"
    done
}

plain_dev() { # ID FILE ADDR
    echo "-object memory-backend-file,id=$1,share=on,mem-path=$2,size=16M -device ivshmem-plain,memdev=$1,addr=$3"
}

IVSHM="$b/libivshm/tools/ivshm"
"$IVSHM" format "file:$R.plain" --size 16M >/dev/null || { echo "FAIL: format"; exit 1; }
"$IVSHM" format "file:$R.db" --size 16M >/dev/null || { echo "FAIL: format"; exit 1; }

echo "== plain: two guests, ivshmem-plain"
t0=$(date +%s)
pids=
# shellcheck disable=SC2046
guest plain-a plain-a "" $(plain_dev m0 "$R.plain" 4)
# shellcheck disable=SC2046
guest plain-b plain-b "" $(plain_dev m0 "$R.plain" 4)
# shellcheck disable=SC2086
wait $pids
collect plain-a plain-b
echo "   ($(($(date +%s) - t0)) s)"

echo "== doorbell: two guests, ivshmem-doorbell through ivshm-server"
t0=$(date +%s)
"$b/qemu-config/ivshm-server" -S "$work/db.sock" -m "$R.db" -n 2 >"$work/server.log" 2>&1 &
server_pid=$!
i=0; while [ ! -S "$work/db.sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
# BAR0 page-aligned and page-sized, so the register page can be mmapped
align="pci=resource_alignment=12@pci:1af4:1110"
pids=
guest db-a db-a "$align" -chardev socket,path="$work/db.sock",id=c0 \
    -device ivshmem-doorbell,chardev=c0,vectors=2,addr=4
guest db-b db-b "$align" -chardev socket,path="$work/db.sock",id=c0 \
    -device ivshmem-doorbell,chardev=c0,vectors=2,addr=4
# shellcheck disable=SC2086
wait $pids
collect db-a db-b
sed 's/^/   [server] /' "$work/server.log"
if kill -0 "$server_pid" 2>/dev/null && grep -q "peer 1 left" "$work/server.log"; then
    pass=$((pass + 1)); echo "   server alive, saw both guests leave"
else
    fail=$((fail + 1)); echo "FAIL: ivshm-server died or missed a disconnect"
fi
kill "$server_pid"; wait "$server_pid" 2>/dev/null; server_pid=
echo "   ($(($(date +%s) - t0)) s)"

echo "== errors: no device; unformatted and foreign regions"
t0=$(date +%s)
truncate -s 16M "$R.zero"
head -c 16777216 /dev/urandom > "$R.junk"
pids=
guest nodev nodev ""
# shellcheck disable=SC2046
guest badfmt badfmt "" $(plain_dev m0 "$R.zero" 4) $(plain_dev m1 "$R.junk" 5)
# shellcheck disable=SC2086
wait $pids
collect nodev badfmt
echo "   ($(($(date +%s) - t0)) s)"

echo "test_qemu: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
