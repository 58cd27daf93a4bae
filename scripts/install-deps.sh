#!/bin/sh
# Installs the Debian 12 packages libivshm needs to build, test and run its
# demo. Run as root; safe to run again.
set -eu
PKGS="build-essential autoconf automake libtool pkg-config
      libopenmpi-dev openmpi-bin libhwloc-dev libcmocka-dev
      clang libclang-rt-14-dev iproute2 util-linux procps python3
      qemu-system-x86 busybox-static xz-utils gnuplot-nox
      libibverbs-dev librdmacm-dev debootstrap cpio kmod
      openssh-client systemd"
missing=
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $missing
fi
