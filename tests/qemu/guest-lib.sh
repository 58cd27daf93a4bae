# Sourced by the QEMU guest tests (tests/qemu/test_*.sh): what they share.

# skip WHY: exit 77 (skipped), or fail where guests are required
# (IVSHM_REQUIRE_GUESTS=1, or IVSHM_REQUIRE_ALL=1 for every tier)
skip() {
    if [ "${IVSHM_REQUIRE_GUESTS:-0}" = 1 ] || [ "${IVSHM_REQUIRE_ALL:-0}" = 1 ]; then
        echo "FAIL: $* (the guest tests must run here: IVSHM_REQUIRE_GUESTS/IVSHM_REQUIRE_ALL=1)"; exit 1
    fi
    echo "SKIP: $*"
    exit 77
}

# install_mpi_component ROOT BUILD SRC: the component where Debian's Open
# MPI looks for it in the guest's root file system, with its help file
install_mpi_component() {
    cp "$2/mpi-plugin/btl/.libs/mca_btl_ivshmem.so" "$2/mpi-plugin/mpool/.libs/mca_mpool_ivshmem.so" \
        "$1/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/"
    cp "$3/mpi-plugin/btl/help-mpi-btl-ivshmem.txt" "$1/usr/share/openmpi/"
}

# busybox_initrd WORK BUILD SRC OUT: the busybox initramfs of the guests of
# test_qemu.sh and test_libvirt.sh (guest-init.sh as /init, ivshmem.ko
# from WORK/mod, the static guest_test and ivshm) written to OUT
busybox_initrd() {
    ir=$1/initramfs
    mkdir -p "$ir/bin" "$ir/proc" "$ir/sys" "$ir/dev" "$ir/tmp"
    cp /bin/busybox "$ir/bin/busybox"
    cp "$3/tests/qemu/guest-init.sh" "$ir/init"
    cp "$1/mod/ivshmem.ko" "$2/tests/qemu/guest_test" "$ir/"
    cp "$2/tests/qemu/ivshm-static" "$ir/ivshm"
    chmod +x "$ir/init" "$ir/guest_test" "$ir/ivshm"
    (cd "$ir" && find . | /bin/busybox cpio -o -H newc 2>/dev/null) > "$4"
}

# mpi_initrd WORK KIT ROOTFS BUILD SRC OUT FILE...: the initramfs of the MPI
# guests (test_qemu_mpi.sh, test_libvirt_mpi.sh): a copy of the Debian root
# file system ROOTFS (mpi-rootfs.sh) with the kernel modules of KIT the
# guests load, the component, mpi-guest-init.sh as /init, one ssh key for
# root on every guest, names vm1..vm4 (10.77.0.N), and the FILEs in
# /opt/ivt; written to OUT. Returns 1 (with a FAIL line) if a step fails
mpi_initrd() {
    work=$1 kit=$2 rootfs=$3 build=$4 src=$5 out=$6; shift 6
    kver=$(cat "$kit/kver")
    root=$work/root
    cp -a "$rootfs" "$root"
    # the kernel modules the guests load, with what they depend on
    mods=$kit/root/lib/modules/$kver
    [ -s "$mods/modules.dep" ] || depmod -b "$kit/root" "$kver" || { echo "FAIL: depmod of the kit"; return 1; }
    need="e1000 crc32_generic rdma_rxe ib_uverbs rdma_ucm"
    list=
    while [ -n "$need" ]; do
        next=
        for m in $need; do
            f=$(sed -n "s|^\(\(.*/\)\?$m\.ko[^:]*\):.*|\1|p" "$mods/modules.dep" | head -n1)
            [ -n "$f" ] || { echo "FAIL: module $m not in $kver"; return 1; }
            case " $list " in *" $f "*) continue ;; esac
            list="$list $f"
            for d in $(sed -n "s|^$f: *||p" "$mods/modules.dep"); do
                next="$next $(basename "$d" | sed 's/\.ko.*//')"
            done
        done
        need=$next
    done
    for f in $list; do
        mkdir -p "$root/lib/modules/$kver/$(dirname "$f")"
        cp "$mods/$f" "$root/lib/modules/$kver/$f"
    done
    cp "$mods"/modules.order "$mods"/modules.builtin* "$root/lib/modules/$kver/" 2>/dev/null
    depmod -b "$root" "$kver" || { echo "FAIL: depmod"; return 1; }
    # the component where Debian's Open MPI looks for it, its help file, and
    # the aggregate parameter set users give to mpirun -am
    install_mpi_component "$root" "$build" "$src"
    mkdir -p "$root/usr/share/openmpi/amca-param-sets"
    cp "$src/mpi-plugin/amca-param-sets/ivshmem" "$root/usr/share/openmpi/amca-param-sets/ivshmem"
    mkdir -p "$root/opt/ivt"
    cp "$@" "$root/opt/ivt/"
    cp "$src/tests/qemu/mpi-guest-init.sh" "$root/init"
    chmod +x "$root/init"
    # one key for root on every guest; no host key checks on a private segment
    mkdir -p "$root/root/.ssh"
    ssh-keygen -q -t ed25519 -N "" -f "$root/root/.ssh/id_ed25519" || { echo "FAIL: ssh-keygen"; return 1; }
    cp "$root/root/.ssh/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
    cp "$root/root/.ssh/id_ed25519" "$work/id"  # to look into a guest while it runs
    printf 'Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n' \
        > "$root/root/.ssh/config"
    chmod 700 "$root/root/.ssh"; chmod 600 "$root/root/.ssh/"*
    # a host key made here: generating one under TCG at the first login
    # takes minutes
    mkdir -p "$root/etc/dropbear"
    chroot "$root" dropbearkey -t ed25519 -f /etc/dropbear/dropbear_ed25519_host_key >/dev/null 2>&1 ||
        { echo "FAIL: dropbearkey"; return 1; }
    printf '127.0.0.1 localhost\n' > "$root/etc/hosts"
    for i in 1 2 3 4; do printf '10.77.0.%d vm%d\n' "$i" "$i" >> "$root/etc/hosts"; done
    (cd "$root" && find . | cpio -o -H newc 2>/dev/null) > "$out"
    rm -rf "$root"
    echo "   initramfs: $(($(stat -c %s "$out") / 1048576)) MB"
}

# ---- a private libvirtd (test_libvirt.sh, test_libvirt_mpi.sh) ----
# libvirt_required: skips without what a private libvirtd needs
libvirt_required() {
    [ "$(id -u)" = 0 ] || skip "needs root (libvirt's system daemon, a mount namespace)"
    command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
    command -v libvirtd >/dev/null || skip "no libvirtd (apt-get install libvirt-daemon libvirt-daemon-driver-qemu)"
    command -v virsh >/dev/null || skip "no virsh (apt-get install libvirt-clients)"
    command -v unshare >/dev/null || skip "no unshare (util-linux)"
}
# libvirt_qemu_user: quser and qgroup, whom QEMU runs as, as libvirt's qemu
# driver runs it as libvirt-qemu (libvirt-daemon-system creates that user;
# else nobody)
libvirt_qemu_user() {
    if getent passwd libvirt-qemu >/dev/null; then
        quser=libvirt-qemu qgroup=$(id -gn libvirt-qemu)
    else
        quser=nobody qgroup=$(id -gn nobody)
    fi
}

# libvirt_daemon LV: starts libvirtd with its configuration, run, state and
# log directories under LV (nothing of the machine's libvirt is read or
# changed, no systemd needed), QEMU as $quser:$qgroup; sets daemon_pid and
# virsh (the command that talks to it). Exits if it does not come up
libvirt_daemon() {
    lv=$1
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
    # The qemu driver resolves its built-in user and group libvirt-qemu
    # before it reads qemu.conf, and refuses to start where they do not
    # exist (only libvirt-daemon-system creates them): the daemon's
    # namespace gets them as names of $quser's ids
    if ! getent passwd libvirt-qemu >/dev/null; then
        { cat /etc/passwd; echo "libvirt-qemu:x:$(id -u "$quser"):$(id -g "$quser")::/nonexistent:/usr/sbin/nologin"; } >"$lv/passwd"
        { cat /etc/group; echo "libvirt-qemu:x:$(id -g "$quser"):"; } >"$lv/group"
        binds="$binds etc/passwd:passwd etc/group:group"
    fi
    # libvirt's system paths, each bound to the test's folder in the
    # daemon's own mount namespace (the machine's directories only serve as
    # mount points); its pid file in the test's folder too, not
    # /run/libvirtd.pid, which a libvirtd of the machine (or of another
    # run) holds
    # libvirt probes QEMU's capabilities with KVM where root may open
    # /dev/kvm, and finds that cache stale on every look-up where QEMU's user
    # may not ("KVM was enabled when probing ..., but it is not available
    # now": 4 s per probe, 40 s per virsh define): in the daemon's namespace
    # QEMU's group may open /dev/kvm, which the domains (type 'qemu': TCG)
    # never use
    if [ -c /dev/kvm ]; then
        rm -f "$lv/kvm"
        mknod -m 0660 "$lv/kvm" c $((0x$(stat -c %t /dev/kvm))) $((0x$(stat -c %T /dev/kvm))) &&
            chgrp "$qgroup" "$lv/kvm" && binds="$binds dev/kvm:kvm"
    fi
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
}

# libvirt_stop: ends the domains in $domains, QEMUs that virsh cannot end
# (their pids from libvirt's run directory) and the daemon
libvirt_stop() {
    [ -n "${daemon_pid:-}" ] || return 0
    for d in $domains; do $virsh destroy "$d" >/dev/null 2>&1; done
    for p in $(cat "$lv/run/qemu"/*.pid 2>/dev/null); do kill "$p" 2>/dev/null; done
    kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null
    daemon_pid=
}

# domain_xml NAME MEMORY-MIB INITRD CMDLINE DEVICES-XML: a TCG domain that
# boots $work/vmlinux with INITRD, its console in $work/NAME.log
domain_xml() {
    cat <<EOF
<domain type='qemu'>
  <name>$1</name>
  <memory unit='MiB'>$2</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>$work/vmlinux</kernel>
    <initrd>$3</initrd>
    <cmdline>console=ttyS0 panic=-1 loglevel=4 $4</cmdline>
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
$5
  </devices>
</domain>
EOF
}

# define_and_check NAME DOMAIN-XML-ARGS...: virsh define (domain_xml NAME
# ARGS...), then check-libvirt on what libvirt stored; counts in pass/fail
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
    apparmor_rules "$1"
}

# apparmor_rules NAME: where libvirt's AppArmor driver is on, it writes each
# VM's file rules with its virt-aa-helper from the domain's XML; the same
# helper's dry run here (no security module needed) must grant QEMU the
# shared file (plain: /dev/shm/NAME) or the server's socket (doorbell) rw
apparmor_rules() {
    aa=/usr/lib/libvirt/virt-aa-helper
    x=$work/$1.stored.xml
    sock=$(sed -n "s/.*<server path='\([^']*\)'.*/\1/p" "$x" | head -1)
    want=$sock
    [ -n "$want" ] || want=/dev/shm/$(sed -n "s/.*<shmem name='\([^']*\)'.*/\1/p" "$x" | head -1)
    if [ ! -x "$aa" ]; then
        fail=$((fail + 1)); echo "FAIL: no $aa (libvirt-daemon): libvirt's AppArmor rules are not checked"
        return
    fi
    "$aa" -d -r -u "libvirt-$($virsh domuuid "$1")" <"$x" >"$work/$1.aa" 2>&1
    if grep -q "\"$want\" rw" "$work/$1.aa"; then
        pass=$((pass + 1)); echo "   libvirt's AppArmor rules for $1 (virt-aa-helper): \"$want\" rw"
    else
        fail=$((fail + 1)); echo "FAIL: libvirt's AppArmor rules for $1 do not grant \"$want\" rw:"
        sed "s/^/   [$1 aa] /" "$work/$1.aa"
    fi
}

# start_all NAME...: virsh start each
start_all() {
    for d in "$@"; do
        if ! $virsh start "$d" >"$work/$d.start" 2>&1; then
            fail=$((fail + 1)); echo "FAIL: virsh start $d:"; cat "$work/$d.start"
            tail -5 "$lv/log/qemu/$d.log" 2>/dev/null
        fi
    done
}
# wait_off LIMIT NAME...: waits (at most LIMIT s in all) until libvirt
# reports them shut off, and destroys those still running then
wait_off() {
    limit=$1 t=0; shift
    for d in "$@"; do
        while [ "$($virsh domstate "$d" 2>/dev/null)" = running ] && [ $t -lt "$limit" ]; do
            sleep 1; t=$((t + 1))
        done
        [ "$($virsh domstate "$d" 2>/dev/null)" = running ] && $virsh destroy "$d" >/dev/null 2>&1
    done
}
# await_console NAME TEXT LIMIT: waits (bounded: until the domain is off, at
# most LIMIT s) for the guest's console to say TEXT
await_console() {
    t=0
    until grep -q "$2" "$work/$1.log" 2>/dev/null; do
        [ "$($virsh domstate "$1" 2>/dev/null)" = running ] && [ $t -lt $(($3 * 5)) ] || return 1
        sleep 0.2; t=$((t + 1))
    done
}

# shmem_hotplug NAME SHMEM-XML: virsh detach-device --live of the <shmem>
# when guest NAME asks for it ("IVT-HOTPLUG-DETACH" on its console), virsh
# attach-device --live when it has seen the device go
# ("IVT-HOTPLUG-ATTACH"); counts in pass/fail, returns 1 if a step failed,
# 2 (not counted) if QEMU ended during the detach
shmem_hotplug() {
    echo "$2" >"$work/$1.shmem.xml"
    if ! await_console "$1" '^IVT-HOTPLUG-DETACH' 600; then
        fail=$((fail + 1)); echo "FAIL: guest $1 never asked for the detach"; return 1
    fi
    if $virsh detach-device "$1" "$work/$1.shmem.xml" --live >"$work/$1.detach" 2>&1; then
        pass=$((pass + 1)); echo "   virsh detach-device $1 <shmem>: ok"
    elif i=0; while [ "$($virsh domstate "$1" 2>/dev/null)" = running ] && [ $i -lt 50 ]; do
             sleep 0.2; i=$((i + 1)); done
         [ "$($virsh domstate "$1" 2>/dev/null)" != running ]; then
        echo "   virsh detach-device $1 <shmem>: QEMU ended ($($virsh domstate --reason "$1" 2>/dev/null)):"
        sed 's/^/     /' "$work/$1.detach"
        return 2
    else
        fail=$((fail + 1)); echo "FAIL: virsh detach-device $1 <shmem>:"; cat "$work/$1.detach"
        return 1
    fi
    if ! await_console "$1" '^IVT-HOTPLUG-ATTACH' 300; then
        fail=$((fail + 1)); echo "FAIL: guest $1 never saw the device go"; return 1
    fi
    if $virsh attach-device "$1" "$work/$1.shmem.xml" --live >"$work/$1.attach" 2>&1; then
        pass=$((pass + 1)); echo "   virsh attach-device $1 <shmem>: ok"
    else
        fail=$((fail + 1)); echo "FAIL: virsh attach-device $1 <shmem>:"; cat "$work/$1.attach"
        return 1
    fi
    $virsh dumpxml "$1" | sed -n '/<shmem/,/<\/shmem>/p' | grep -o "<address .*" |
        sed 's/^/   [re-attached at] /'
}
