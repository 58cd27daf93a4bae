#!/bin/sh
# What an admin installs, checked in a Debian guest booted with systemd
# (tests/qemu/test_guest_admin.sh); run by ivt-admin.service once the
# system is up. Prints "IVT-PASS name" / "IVT-FAIL name: why", then
# "IVT-END", and powers off.
#   dkms     the module DKMS built and installed loads (modprobe)
#   udev     the rules give /dev/ivshmem0 and sysfs resource2 to the group;
#            a member runs an MPI job over the region, a non-member cannot
#            map it
#   systemd  ivshm-server@t1 starts, serves a QEMU client, comes back after
#            a kill and serves again
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
pass() { echo "IVT-PASS $1"; }
fail() { echo "IVT-FAIL $1: $2"; }
same() { if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "want '$2', got '$3'"; fi; }
kver=$(uname -r)

echo "== dkms"
same dkms-module-path "/lib/modules/$kver/updates/dkms/ivshmem.ko" "$(modinfo -n ivshmem 2>&1)"
if modprobe ivshmem; then pass dkms-module-loads; else fail dkms-module-loads "modprobe ivshmem"; fi
udevadm settle -t 30

echo "== udev"
same udev-devnode "root:ivshmem 660" "$(stat -c '%U:%G %a' /dev/ivshmem0 2>&1)"
dev=
for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor")" = 0x1af4 ] && [ "$(cat "$d/device")" = 0x1110 ] && dev=$d
done
same udev-resource2 "ivshmem 660" "$(stat -c '%G %a' "$dev/resource2" 2>&1)"
udevadm test "/sys/class/ivshmem/ivshmem0" >/tmp/udevadm.out 2>&1
if grep -q 'GROUP.*ivshmem\|ivshmem.*GROUP\|60-ivshmem.rules' /tmp/udevadm.out; then
    pass udevadm-test-applies-rule
else
    fail udevadm-test-applies-rule "udevadm test does not name the rule"; tail -20 /tmp/udevadm.out
fi
useradd -m -G ivshmem alice
useradd -m bob
runuser -u alice -- timeout 600 mpirun -np 2 --oversubscribe --mca pml ob1 --mca btl self,ivshmem \
    --mca btl_ivshmem_same_vm 1 --mca btl_ivshmem_verbs 0 --mca btl_ivshmem_stats 1 \
    --mca mpi_yield_when_idle 1 /opt/ivt/mpi_routes check >/tmp/alice.out 2>&1
rc=$?
sed 's/^/    /' /tmp/alice.out
if [ $rc = 0 ] && grep -q "route region: [1-9]" /tmp/alice.out; then
    pass udev-member-runs-mpi-over-region
else
    fail udev-member-runs-mpi-over-region "mpirun exit $rc as alice (group ivshmem)"
fi
if runuser -u bob -- ivshm info --region dev:auto >/tmp/bob.out 2>&1; then
    fail udev-nonmember-refused "bob (not in group ivshmem) mapped the region"
elif ! grep -q "permission denied.*60-ivshmem.rules" /tmp/bob.out; then
    fail udev-nonmember-refused "the message does not name the cause and the rule"
else
    pass udev-nonmember-refused
fi
sed 's/^/    /' /tmp/bob.out

echo "== systemd: ivshm-server@t1"
getent group kvm >/dev/null || groupadd --system kvm
ivshm format file:/dev/shm/t1 --size 16M >/dev/null
systemctl start ivshm-server@t1
sleep 2
same server-active active "$(systemctl is-active ivshm-server@t1)"
same server-socket "root:kvm 660" "$(stat -c '%U:%G %a' /run/ivshm/t1.sock 2>&1)"
# client N: a QEMU whose ivshmem-doorbell device connects to the server
# (stopped before its guest runs: -S); the server logs the peer
client() {
    qemu-system-x86_64 -machine pc,accel=tcg -nodefaults -display none -S -monitor none \
        -chardev socket,path=/run/ivshm/t1.sock,id=c0 \
        -device ivshmem-doorbell,chardev=c0,vectors=1 >/tmp/qemu$1.log 2>&1 &
    echo $! >/tmp/qemu$1.pid
}
# served K: the server's journal says "peer 0 connected" K times (the
# server numbers peers from 0 each time it starts)
served() {
    i=0
    while [ $i -lt 60 ]; do
        n=$(journalctl -u ivshm-server@t1 -o cat 2>/dev/null | grep -c "peer 0 connected")
        [ "$n" -ge "$1" ] && return 0
        i=$((i + 1)); sleep 1
    done
    return 1
}
client 1
if served 1; then pass server-serves-qemu; else fail server-serves-qemu "no 'peer 0 connected'"; cat /tmp/qemu1.log; fi
pid1=$(systemctl show -p MainPID --value ivshm-server@t1)
systemctl kill -s KILL ivshm-server@t1
sleep 3
pid2=$(systemctl show -p MainPID --value ivshm-server@t1)
same server-restarted-active active "$(systemctl is-active ivshm-server@t1)"
same server-restart-count 1 "$(systemctl show -p NRestarts --value ivshm-server@t1)"
[ -n "$pid2" ] && [ "$pid2" != 0 ] && [ "$pid2" != "$pid1" ] && pass server-new-process ||
    fail server-new-process "MainPID $pid1 then $pid2"
kill "$(cat /tmp/qemu1.pid)" 2>/dev/null
# the restarted server serves a new client
client 2
if served 2; then
    pass restarted-server-serves-qemu
else
    fail restarted-server-serves-qemu "no second 'peer 0 connected'"
fi
kill "$(cat /tmp/qemu2.pid)" 2>/dev/null
journalctl -u ivshm-server@t1 -o cat | sed 's/^/    [server] /'
systemctl stop ivshm-server@t1
echo "IVT-END"
echo o > /proc/sysrq-trigger
