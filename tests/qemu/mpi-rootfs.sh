#!/bin/sh
# Builds the Debian root file system of the guests that run MPI jobs:
# debootstrap --variant=minbase (Debian 12) plus Open MPI, dropbear (the
# launcher's ssh), and the verbs stack for soft-RoCE. Nothing is installed
# on the host; the tree is cached in ROOTFS_DIR and rebuilt only when the
# package list below changes.
# Usage: mpi-rootfs.sh ROOTFS_DIR [EXTRA_PACKAGES]
#   (~3 min and ~100 MB downloaded once per package list)
set -eu
dir=${1:?usage: mpi-rootfs.sh ROOTFS_DIR [EXTRA_PACKAGES]}
PKGS="openmpi-bin libopenmpi3 dropbear-bin openssh-client iproute2 kmod
      ibverbs-providers libibverbs1 librdmacm1 ibverbs-utils procps ${2:-}"
want=$(echo $PKGS | tr ' ' '\n' | sort | tr '\n' ' ')
[ -f "$dir/.ivshm-rootfs" ] && [ "$(cat "$dir/.ivshm-rootfs")" = "$want" ] && exit 0

mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
[ -n "$mirror" ] || mirror=$(sed -n 's/^deb \(http[^ ]*\) bookworm .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -n1)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
command -v debootstrap >/dev/null || { echo "mpi-rootfs: no debootstrap" >&2; exit 1; }
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
if ! debootstrap --variant=minbase --include="$(echo $PKGS | tr ' ' ',')" \
        bookworm "$dir.tmp" "$mirror" >"$dir.tmp.log" 2>&1; then
    tail -20 "$dir.tmp.log" >&2
    echo "mpi-rootfs: debootstrap failed (log: $dir.tmp.log)" >&2
    exit 1
fi
# what an initramfs does not need
rm -rf "$dir.tmp/var/cache/apt/archives"/*.deb "$dir.tmp/usr/share/doc" \
    "$dir.tmp/usr/share/man" "$dir.tmp/usr/share/locale" "$dir.tmp/var/lib/apt/lists"/*
echo "$want" > "$dir.tmp/.ivshm-rootfs"
rm -rf "$dir"
mv "$dir.tmp" "$dir"
rm -f "$dir.tmp.log"
echo "mpi-rootfs: ready in $dir ($(du -sm "$dir" | cut -f1) MB)"
