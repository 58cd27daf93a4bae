#!/bin/sh
# Builds the guest driver the way an admin's Debian 12 guest does, with
# DKMS: a Debian chroot (debootstrap, cached in CHROOT_DIR) with dkms and the
# guest kit's kernel headers, then `dkms add`, `dkms build` and `dkms install`
# of guest-driver/ (its dkms.conf) for the kit's kernel. The installed module
# is copied to OUT_KO.
# Usage: dkms-build.sh KIT_DIR SRC_DIR CHROOT_DIR OUT_KO
set -eu
kit=$1 src=$2 root=$3 out=$4
kver=$(cat "$kit/kver")
abi=${kver%-amd64}
PKGS="dkms gcc make libc6-dev kmod libelf1 libssl3 openssl patch"
want="$kver $PKGS"
if ! [ -f "$root/.ivshm-dkms" ] || [ "$(cat "$root/.ivshm-dkms")" != "$want" ]; then
    command -v debootstrap >/dev/null || { echo "dkms-build: no debootstrap" >&2; exit 1; }
    mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
    rm -rf "$root.tmp"
    mkdir -p "$root.tmp"
    debootstrap --variant=minbase --include="$(echo $PKGS | tr ' ' ',')" bookworm "$root.tmp" "$mirror" \
        >"$root.tmp.log" 2>&1 || { tail -20 "$root.tmp.log" >&2; echo "dkms-build: debootstrap failed" >&2; exit 1; }
    # the kit's headers (the security suite's kernel) and the compiler
    # package of the same version they ask for
    debs="$kit/debs"
    (cd "$debs" && { ls linux-compiler-gcc-12-x86_*.deb >/dev/null 2>&1 ||
        apt-get download -q linux-compiler-gcc-12-x86 >/dev/null 2>&1; }) ||
        { echo "dkms-build: cannot download linux-compiler-gcc-12-x86" >&2; exit 1; }
    mkdir -p "$root.tmp/tmp/debs"
    cp "$debs"/linux-headers-*.deb "$debs"/linux-kbuild-*.deb "$debs"/linux-compiler-gcc-12-x86_*.deb "$root.tmp/tmp/debs/"
    chroot "$root.tmp" sh -c 'dpkg -i /tmp/debs/*.deb' >>"$root.tmp.log" 2>&1 ||
        { tail -20 "$root.tmp.log" >&2; echo "dkms-build: the headers do not install" >&2; exit 1; }
    rm -rf "$root.tmp/tmp/debs" "$root.tmp/var/cache/apt/archives"/*.deb
    echo "$want" > "$root.tmp/.ivshm-dkms"
    rm -rf "$root"
    mv "$root.tmp" "$root"
    rm -f "$root.tmp.log"
fi
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$src/guest-driver/dkms.conf")
rm -rf "$root/usr/src/ivshmem-$ver" "$root/var/lib/dkms/ivshmem"
mkdir -p "$root/usr/src/ivshmem-$ver"
cp "$src/guest-driver/dkms.conf" "$src/guest-driver/Kbuild" "$src/guest-driver/ivshmem.c" \
    "$src/guest-driver/ivshmem_uapi.h" "$root/usr/src/ivshmem-$ver/"
[ -d "$root/lib/modules/$kver/build" ] || ln -sfn "/usr/src/linux-headers-$kver" "$root/lib/modules/$kver/build"
for step in add build install; do
    if ! chroot "$root" dkms "$step" -m ivshmem -v "$ver" -k "$kver" >"$out.$step.log" 2>&1; then
        cat "$out.$step.log"
        echo "FAIL: dkms $step"
        exit 1
    fi
done
ko=$(find "$root/lib/modules/$kver/updates/dkms" -name 'ivshmem.ko*' | head -n1)
[ -n "$ko" ] || { echo "FAIL: dkms install left no ivshmem.ko"; exit 1; }
cp "$ko" "$out"
echo "dkms-build: ivshmem/$ver built and installed for $kver ($(basename "$ko"))"
