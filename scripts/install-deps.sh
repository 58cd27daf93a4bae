#!/bin/sh
# Installs the Debian 12 packages libivshm needs to build, test and run its
# demo. Run as root; safe to run again.
set -eu
PKGS="build-essential autoconf automake libtool pkg-config
      libopenmpi-dev openmpi-bin libhwloc-dev libcmocka-dev
      clang libclang-rt-14-dev iproute2 util-linux procps python3
      qemu-system-x86 busybox-static xz-utils gnuplot-nox
      libibverbs-dev librdmacm-dev debootstrap cpio kmod
      openssh-client systemd
      libucx-dev ucx-utils mpich libmpich-dev dpkg-dev
      debhelper dh-dkms lintian
      libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients"
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

# Debian's mpich registers mpirun/mpicc/mpiexec alternatives of its own
# (at a higher priority than Open MPI's on some installs): the suite means
# Open MPI by those names, and reaches MPICH by its explicit ones
# (mpiexec.mpich, mpicc.mpich).
for alt in mpi mpirun mpi-x86_64-linux-gnu; do
    update-alternatives --query "$alt" >/dev/null 2>&1 || continue
    best=$(update-alternatives --list "$alt" | grep -i openmpi | head -1)
    [ -z "$best" ] || update-alternatives --set "$alt" "$best" >/dev/null
done

# The UCX transport (mpi-plugin/ucx) builds against UCX's internal headers,
# which only UCX's source package has: the source of the installed libucx0,
# from a bookworm deb-src line, unpacked once into a cache folder outside
# the tree (configure finds it there, or --with-ucx-src=DIR).
UCX_SRC_CACHE=${IVSHM_UCX_SRC_CACHE:-/var/cache/libivshm/ucx-src}
ucx_ver=$(dpkg-query -W -f='${Version}' libucx0 2>/dev/null || true)
if [ -n "$ucx_ver" ] && [ ! -f "$UCX_SRC_CACHE/$ucx_ver/.unpacked" ]; then
    if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ &&
       ! grep -qs '^deb-src .*bookworm' /etc/apt/sources.list; then
        cat >/etc/apt/sources.list.d/libivshm-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        apt-get update -q
    fi
    rm -rf "$UCX_SRC_CACHE/$ucx_ver"
    mkdir -p "$UCX_SRC_CACHE/$ucx_ver"
    (cd "$UCX_SRC_CACHE/$ucx_ver" && apt-get source -q "ucx=$ucx_ver" >apt-source.log 2>&1) || {
        cat "$UCX_SRC_CACHE/$ucx_ver/apt-source.log"; exit 1; }
    touch "$UCX_SRC_CACHE/$ucx_ver/.unpacked"
fi
