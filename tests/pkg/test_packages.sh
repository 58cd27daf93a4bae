#!/bin/sh
# The Debian packages (debian/), as an admin gets and uses them:
#  1. dpkg-buildpackage -us -uc -b builds them from a copy of the tree, and
#     lintian finds no error and no warning that is not overridden with its
#     reason (debian/*.lintian-overrides);
#  2. `apt install ./*.deb` installs them into a clean Debian 12 root
#     (debootstrap with Debian's openmpi-bin, cached as the guests' roots
#     are, in /var/cache/libivshm/pkg-rootfs) seen through an overlay, so
#     that every change the packages make lands in the overlay's upper
#     layer; DKMS builds the guest driver for the kernel whose headers the
#     root holds (the guest kit's, where the QEMU tests made it);
#  3. from the installed files only (ivshm, Open MPI's component directory,
#     the --tune parameter sets, libivshm-heap.so and libuct_ivshmem.so
#     found by the loader by name), MPI jobs run across two simulated VMs
#     (tests/simvm/simvm.sh; mpirun in the root, its daemons in the VMs'
#     namespaces): every payload checked, the region carrying the pair
#     (the component's counters and `ivshm stat`), the region heap's blocks
#     from the region, the UCX transport listed by ucx_info;
#  4. `apt purge` removes them, and the upper layer then holds nothing but
#     files identical to the clean root's and what dpkg and apt keep of
#     their own (their database, logs and caches).
# Needs root, debootstrap, debhelper (dh-dkms), lintian, Open MPI and
# network namespaces (scripts/install-deps.sh installs them); skipped (77)
# otherwise, a FAIL under IVSHM_REQUIRE_ALL=1.
set -u
top_srcdir=$(cd "${top_srcdir:-.}" && pwd) # the test changes directory
. "$(dirname "$0")/../simvm/lib.sh"
simvm_require
for tool in debootstrap dpkg-buildpackage dh dh_dkms lintian; do
    command -v "$tool" >/dev/null || simvm_skip "no $tool (scripts/install-deps.sh installs it)"
done
PKGS="libivshm1 libivshm-dev ivshm-tools openmpi-ivshmem libivshm-heap libuct-ivshmem ivshmem-dkms"
ROOTFS=${IVSHM_PKG_ROOTFS:-/var/cache/libivshm/pkg-rootfs}
KIT=${IVSHM_GUEST_KIT:-/var/cache/libivshm/guest-kit}

work=$(mktemp -d)
R=$work/root
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
unmount_root() {
    for m in mnt/simvm mnt run/ivshm-simvm run/netns run tmp dev/shm dev/pts dev sys proc; do
        mountpoint -q "$R/$m" 2>/dev/null && umount -R "$R/$m" 2>/dev/null
    done
    mountpoint -q "$R" 2>/dev/null && umount "$R"
}
cleanup() { unmount_root; "$SIMVM" down; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
t0=$(date +%s)
lap() { echo "time: $1 $(($(date +%s) - t0)) s"; }
in_root() { chroot "$R" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"; }

# ---- 1. build, from the files of the tree (git's where it is a checkout:
# not its build trees; the dist tree's otherwise)
mkdir -p "$work/src" "$work/mnt/debs" "$work/mnt/simvm"
if git -C "$top_srcdir" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$top_srcdir" && git ls-files -co --exclude-standard -z | xargs -0 tar -cf -) | tar -C "$work/src" -xf -
else
    (cd "$top_srcdir" && tar --exclude='./_build*' --exclude=./autom4te.cache -cf - .) | tar -C "$work/src" -xf -
fi
jobs=$(nproc 2>/dev/null || echo 2)
if (cd "$work/src" && dpkg-buildpackage -us -uc -b -j"$jobs") >"$work/build.log" 2>&1; then
    ok "dpkg-buildpackage -us -uc -b built $(ls "$work"/*.deb | grep -vc -- -dbgsym_) packages"
else
    tail -40 "$work/build.log"; bad "dpkg-buildpackage failed"; exit 1
fi
lap build
for p in $PKGS; do
    deb=$(ls "$work/${p}"_*.deb 2>/dev/null | head -1)
    [ -n "$deb" ] || { bad "no package $p built"; continue; }
    cp "$deb" "$work/mnt/debs/"
done
lint=$(lintian --fail-on error,warning "$work"/libivshm_*.changes 2>&1)
lint_rc=$?
if [ $lint_rc = 0 ] && ! printf '%s\n' "$lint" | grep -q '^[EW]: '; then
    ok "lintian: no errors, no warnings without an override"
else
    bad "lintian (rc $lint_rc)"; printf '%s\n' "$lint" | grep '^[EW]: '
fi
lap lintian

# ---- 2. a clean Debian 12 root, once: the guests' root builder with the
# packages this test needs beside openmpi-bin (dkms and its compiler, ucx_info,
# what the packages recommend), then the guest kit's kernel headers
sh "$top_srcdir/tests/qemu/mpi-rootfs.sh" "$ROOTFS" \
    "dkms gcc make libc6-dev patch adduser python3 ucx-utils" || { bad "debootstrap root"; exit 1; }
kver=
if [ -f "$KIT/kver" ] && ls "$KIT"/debs/linux-headers-*.deb >/dev/null 2>&1 &&
   ls "$KIT"/debs/linux-compiler-gcc-12-x86_*.deb >/dev/null 2>&1; then
    kver=$(cat "$KIT/kver")
fi
if [ -n "$kver" ] && [ "$(cat "$ROOTFS/.ivshm-pkg-headers" 2>/dev/null)" != "$kver" ]; then
    mkdir -p "$ROOTFS/tmp/debs"
    cp "$KIT"/debs/linux-headers-*.deb "$KIT"/debs/linux-kbuild-*.deb \
        "$KIT"/debs/linux-compiler-gcc-12-x86_*.deb "$ROOTFS/tmp/debs/"
    chroot "$ROOTFS" sh -c 'dpkg -i /tmp/debs/*.deb' >"$work/headers.log" 2>&1 ||
        { tail -20 "$work/headers.log"; bad "the kit's kernel headers do not install"; exit 1; }
    # the module index DKMS refreshes exists in the clean root already
    chroot "$ROOTFS" depmod "$kver" >/dev/null 2>&1 || true
    rm -rf "$ROOTFS/tmp/debs"
    echo "$kver" >"$ROOTFS/.ivshm-pkg-headers"
fi
lap rootfs

# the overlay, and what the chroot needs of the machine; /tmp and /run are
# the job's, outside the root; /mnt holds the packages and the test's own
# programs (the simulated VMs' agent, the MPI checks), outside the root too
mkdir -p "$work/upper" "$work/ovl" "$R"
mount -t overlay overlay -o "lowerdir=$ROOTFS,upperdir=$work/upper,workdir=$work/ovl" "$R" ||
    { bad "overlay mount"; exit 1; }
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --bind /dev "$R/dev"
mount --bind /dev/pts "$R/dev/pts"
mount --bind /dev/shm "$R/dev/shm"
mount -t tmpfs tmpfs "$R/tmp"
mount -t tmpfs tmpfs "$R/run"
mount --bind "$work/mnt" "$R/mnt"
mount --bind -o ro "$top_srcdir/tests/simvm" "$R/mnt/simvm"

cd "$work/mnt/debs" || exit 1
if in_root sh -c 'cd /mnt/debs && apt install -y ./*.deb' >"$work/install.log" 2>&1; then
    n=$(in_root dpkg-query -W -f='${db:Status-Abbrev}${Package}\n' $PKGS 2>/dev/null | grep -c '^ii ')
    if [ "$n" = 7 ]; then ok "apt install ./*.deb: the 7 packages installed"
    else bad "apt install: $n of 7 packages installed"; tail -20 "$work/install.log"; fi
else
    bad "apt install ./*.deb"; tail -30 "$work/install.log"; exit 1
fi
cd "$work" || exit 1
lap install
if in_root getent group ivshmem >/dev/null && [ -f "$R/lib/udev/rules.d/60-ivshmem.rules" ]; then
    ok "ivshmem-dkms: the group ivshmem exists, its udev rules are installed"
else
    bad "ivshmem-dkms: group or udev rules missing"
fi
if [ -n "$kver" ]; then
    st=$(in_root dkms status ivshmem 2>&1)
    if printf '%s\n' "$st" | grep -q "ivshmem/1.0, $kver, x86_64: installed" &&
       ls "$R/lib/modules/$kver/updates/dkms/"ivshmem.ko* >/dev/null 2>&1; then
        ok "DKMS built and installed ivshmem.ko for $kver at install"
    else
        bad "DKMS: $st"; grep -i -A3 'dkms\|error' "$work/install.log" | tail -20
    fi
else
    echo "note: no guest kit kernel headers: DKMS only registered the module"
    in_root dkms status ivshmem | grep -q "ivshmem/1.0: added" && ok "DKMS registered ivshmem/1.0" ||
        bad "DKMS status: $(in_root dkms status ivshmem)"
fi
comps=$(in_root ompi_info 2>/dev/null | sed -n 's/^ *MCA \([a-z]*\): ivshmem .*/\1/p' | sort | tr '\n' ' ')
if [ "$comps" = "btl coll mpool " ]; then
    ok "ompi_info finds the installed components: $comps"
else
    bad "ompi_info lists ivshmem for: '$comps'"
fi

# ---- 3. MPI across two simulated VMs of one host, from the installed files
mpicc -O2 "$top_srcdir/tests/simvm/mpi_check.c" -o "$work/mnt/mpi_check" &&
    mpicc -O2 -pthread -I"$top_srcdir/tests/simvm" "$top_srcdir/tests/simvm/mpi_heap.c" -o "$work/mnt/mpi_heap" ||
    { bad "mpicc"; exit 1; }
"$SIMVM" up a:0 a:1
mkdir -p "$R/run/netns" "$R/run/ivshm-simvm"
mount --rbind /run/netns "$R/run/netns"
mount --bind /run/ivshm-simvm "$R/run/ivshm-simvm"
region=$("$SIMVM" regions)
in_root ivshm format "file:$region" --size 256M --force >/dev/null || bad "ivshm format (installed)"
# mpirun in the root; its daemons started by simvm's agent in the VMs
root_mpirun() { # NAME ARGS...: output in $work/NAME.out, rc in $rc
    name=$1
    shift
    timeout -k 10 120 chroot "$R" env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
        mpirun --allow-run-as-root -np 2 --host 10.200.0.1:1,10.200.0.2:1 --bind-to none \
        --mca plm_rsh_agent /mnt/simvm/agent --mca orte_default_hostfile none \
        --mca oob_tcp_if_include 10.200.0.0/24 --mca mpi_yield_when_idle 1 \
        --mca btl_ivshmem_stats 1 --mca osc pt2pt "$@" >"$work/$name.out" 2>&1
    rc=$?
}
# --tune ivshmem: ob1 over self, vader, ivshmem; no tcp, so the pair of
# VMs has no route but the region
root_mpirun check --tune ivshmem /mnt/mpi_check
sends=$(sed -n 's/.*btl ivshmem stats: .* rank \([0-9]\) -> rank [0-9]: route region: \([0-9]*\) sends.*/\2/p' "$work/check.out" |
        awk '$1 > 0' | wc -l)
if [ $rc = 0 ] && grep -q "2 ranks: 10 passed, 0 failed" "$work/check.out" && [ "$sends" = 2 ]; then
    ok "--tune ivshmem: mpi_check passes between the VMs, both ranks sent through the region"
else
    bad "--tune ivshmem job (rc $rc, $sends ranks sent through the region)"; tail -30 "$work/check.out"
fi
# the region's own counters, read by the installed ivshm while a job holds
# its channels open: a pair of ranks exchanges 1000 checked messages, then
# waits for the test to look (/mnt/go) before it finalizes
cat >"$work/hold.c" <<'C'
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    int rank, bad = 0, buf[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 0; i < 1000; i++) {
        for (int k = 0; k < 256; k++)
            buf[k] = rank == 0 ? i * 256 + k : -1;
        if (rank == 0) {
            MPI_Send(buf, 256, MPI_INT, 1, 0, MPI_COMM_WORLD);
        } else {
            MPI_Recv(buf, 256, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int k = 0; k < 256; k++)
                bad += buf[k] != i * 256 + k;
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("hold: 1000 messages, %d bad ints\n", bad);
        fflush(stdout);
    }
    for (int t = 0; t < 600 && access("/mnt/go", F_OK) != 0; t++)
        usleep(100000);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
C
mpicc -O2 "$work/hold.c" -o "$work/mnt/hold" || bad "mpicc hold.c"
root_mpirun hold --tune ivshmem /mnt/hold &
job=$!
for t in $(seq 600); do grep -q '^hold:' "$work/hold.out" 2>/dev/null && break; sleep 0.1; done
stat=$(in_root ivshm stat "file:$region" --json 2>&1)
touch "$work/mnt/go"
wait $job
hold_rc=$?
eps=$(printf '%s\n' "$stat" | grep -o '"msgs_in":[0-9]*' | awk -F: '$2 >= 1000' | wc -l)
if [ $hold_rc = 0 ] && grep -q "hold: 1000 messages, 0 bad ints" "$work/hold.out" && [ "$eps" -ge 1 ]; then
    ok "ivshm stat (installed) during the job: an endpoint of the pair received the 1000 messages through the region"
else
    bad "ivshm stat during the job ($eps endpoints with >= 1000 messages in)"; printf '%s\n' "$stat" | head -20
    tail -20 "$work/hold.out"
fi
# --tune ivshmem-heap: the heap preloaded by name, as the parameter set says
root_mpirun heap --tune ivshmem-heap /mnt/mpi_heap
blocks=$(sed -n 's/.*btl ivshmem heap: rank [0-9]*: \([0-9]*\) blocks .*/\1/p' "$work/heap.out" | awk '$1 >= 20' | wc -l)
if [ $rc = 0 ] && grep -q "2 ranks: 8 passed, 0 failed" "$work/heap.out" && [ "$blocks" = 2 ]; then
    ok "--tune ivshmem-heap: mpi_heap passes, both ranks' large blocks came from the region"
else
    bad "--tune ivshmem-heap job (rc $rc, $blocks ranks with region blocks)"; tail -30 "$work/heap.out"
fi
# --tune ivshmem-ucx: Open MPI's pml ucx with the installed UCT transport
# (UCX_TLS restricted as between all simulated VMs: they share /dev/shm)
root_mpirun ucx --tune ivshmem-ucx -x UCX_TLS=self,ivshmem,tcp -x UCX_IVSHMEM_STATS=y /mnt/mpi_check
usent=$(sed -n 's/^uct ivshmem: .* sent [0-9]* messages (\([0-9]*\) bytes).*/\1/p' "$work/ucx.out" |
        awk '$1 > 8388608' | wc -l)
if [ $rc = 0 ] && grep -q "2 ranks: 10 passed, 0 failed" "$work/ucx.out" && [ "$usent" -ge 2 ]; then
    ok "--tune ivshmem-ucx: mpi_check passes over pml ucx, both ranks sent > 8 MiB through the region"
else
    bad "--tune ivshmem-ucx job (rc $rc, $usent interfaces sent > 8 MiB)"; tail -30 "$work/ucx.out"
fi
# the UCX transport, loaded by name from where the package put it
if in_root env IVSHM_REGION="file:$region" LD_PRELOAD=libuct_ivshmem.so timeout 30 ucx_info -d \
        >"$work/ucxinfo.out" 2>&1 && grep -q "Transport: ivshmem" "$work/ucxinfo.out"; then
    ok "ucx_info -d lists the installed ivshmem transport"
else
    bad "ucx_info -d with libuct_ivshmem.so"; tail -20 "$work/ucxinfo.out"
fi
umount -R "$R/run/netns"; umount "$R/run/ivshm-simvm"
"$SIMVM" down
lap mpi

# ---- 4. purge, then nothing of the packages is left in the root
if in_root apt purge -y $PKGS >"$work/purge.log" 2>&1 &&
   [ -z "$(in_root dpkg-query -W -f='${db:Status-Abbrev}${Package}\n' $PKGS 2>/dev/null | grep -v '^un ')" ]; then
    ok "apt purge: the 7 packages are gone"
else
    bad "apt purge"; tail -20 "$work/purge.log"
fi
lap purge
unmount_root
# What dpkg, apt and ldconfig keep of their own; the shadow tools' backup
# copies of the account files (adduser made and removed the group)
kept='^\./(var/lib/dpkg|var/lib/apt|var/cache/apt|var/cache/debconf|var/log|var/cache/ldconfig)(/|$)|^\./etc/ld\.so\.cache$|^\./etc/(group|gshadow|passwd|shadow)-$'
left=$(cd "$work/upper" && find . -mindepth 1 | grep -Ev "$kept" | while read -r f; do
    if [ -d "$f" ] && [ ! -L "$f" ]; then
        [ -d "$ROOTFS/$f" ] || echo "new directory $f"
    elif [ -c "$f" ] && [ "$(stat -c %t:%T "$f")" = 0:0 ]; then
        echo "removed from the clean root: $f"
    elif [ ! -e "$ROOTFS/$f" ] && [ ! -L "$ROOTFS/$f" ]; then
        echo "new file $f"
    elif [ -L "$f" ]; then
        [ "$(readlink "$f")" = "$(readlink "$ROOTFS/$f")" ] || echo "changed link $f"
    else
        cmp -s "$f" "$ROOTFS/$f" || echo "changed file $f"
    fi
done)
if [ -z "$left" ]; then
    ok "after purge the root is the clean root again ($(cd "$work/upper" && find . -mindepth 1 | grep -Ec "$kept") entries of dpkg/apt's own state aside)"
else
    bad "left behind after purge:"; printf '%s\n' "$left" | head -40
fi
lap total
echo "test_packages: $pass passed, $fail failed"
[ "$fail" = 0 ]
