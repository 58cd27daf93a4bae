#!/bin/sh
# A Debian 13 (trixie) root on the Debian 12 machine, to build and run the
# project against Open MPI 5.0 (docs/support.md). Made once by debootstrap
# and apt-get from Debian's archive and cached; reused while complete.
#
#   scripts/debian13-root.sh [CMD...]
#
# runs CMD (a shell string, default: an interactive shell) inside the root
# as root, in the source tree, which is bind-mounted at its own path (so
# build trees made inside keep their absolute paths). /proc, /sys, /dev and
# /dev/shm are the machine's: the simulated VMs' regions in /dev/shm and
# their network namespaces work as outside. Every mount is made in a mount
# namespace of the command's own and goes away with it; the simulated VMs'
# lock (/run/ivshm-simvm.lock) is the machine's, so runs inside and outside
# the root take turns.
#
# Debian 13's libopenmpi-dev leaves out headers opal_config.h includes
# (opal/mca/threads/pthreads/): the root also holds Open MPI's sources of
# the installed version, /var/cache/libivshm/ompi-src/VERSION/openmpi-X,
# where configure looks for them (only the opal headers are kept). The
# UCX transport (mpi-plugin/ucx) builds against the internal headers of
# the installed UCX: its source package is unpacked (not built) into
# /var/cache/libivshm/ucx-src/VERSION/ucx-X in the root, where configure
# looks for it, as scripts/install-deps.sh does on Debian 12; a step of
# its own, after the root is complete, redone until it succeeds.
#
# Environment: IVSHM_TRIXIE_ROOT (default /var/cache/libivshm/trixie-root;
# the build log is $IVSHM_TRIXIE_ROOT.log),
# IVSHM_DEBIAN_MIRROR (default http://deb.debian.org/debian),
# IVSHM_UCX_SRC: an unpacked UCX source tree of the installed version
# (UCX's release tag; default /var/cache/libivshm/ucx-upstream/ucx-X),
# copied in where the archive does not serve UCX's source package (a
# mirror of binaries only); without either the root has no UCX sources,
# configure leaves the transport out and scripts/test-debian13.sh fails.
# Exit: CMD's status; 77 where Debian's archive cannot be reached (the
# reason is printed; scripts/test.sh counts 77 as a failure on CI).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
root=${IVSHM_TRIXIE_ROOT:-/var/cache/libivshm/trixie-root}
mirror=${IVSHM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# what the build and the tests need (scripts/install-deps.sh has Debian
# 12's list); a change of this list, or of the steps after it (the
# recipe's word below), rebuilds the root
PKGS="build-essential autoconf automake libtool pkg-config
      openmpi-bin libopenmpi-dev libhwloc-dev libcmocka-dev
      libucx-dev ucx-utils mpich libmpich-dev dpkg-dev
      iproute2 util-linux procps python3 kmod"
stamp="libivshm trixie root (ompi-src, alternatives): $(echo "$PKGS" | tr -s ' \n' '  ')"

[ "$(id -u)" = 0 ] || { echo "debian13-root: needs root (debootstrap, chroot, mounts)"; exit 77; }

# in_root DIR CMD: CMD in the root DIR, with the machine's /proc, /sys,
# /dev (and /dev/shm) and the source tree mounted in a private namespace
in_root() {
    r=$1
    shift
    mkdir -p "$r$top" "$r/run"
    unshare --mount --propagation private sh -ec '
        r=$1 top=$2
        shift 2
        # the root a mount point of its own: ip netns exec makes / a slave
        mount --bind "$r" "$r"
        mount --rbind /proc "$r/proc"
        mount --rbind /sys "$r/sys"
        mount --rbind /dev "$r/dev"
        mount -t tmpfs tmpfs "$r/run"
        mkdir -p "$r/run/netns"
        mount --bind "$top" "$r$top"
        : >>/run/ivshm-simvm.lock
        : >"$r/run/ivshm-simvm.lock"
        mount --bind /run/ivshm-simvm.lock "$r/run/ivshm-simvm.lock"
        exec chroot "$r" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            LANG=C.UTF-8 /bin/sh -c "cd \"\$0\" && $*" "$top"' \
        in_root "$r" "$top" "$@"
}

# build: into a fresh folder, moved in place only when complete
build_root() {
    new=$root.new
    rm -rf "$new"
    mkdir -p "$(dirname "$root")"
    log=$root.log
    echo "debian13-root: making the Debian 13 root in $root (log: $log)"
    if ! debootstrap --variant=minbase trixie "$new" "$mirror" >"$log" 2>&1; then
        tail -5 "$log"
        echo "debian13-root: SKIP: debootstrap trixie from $mirror failed (see $log)"
        rm -rf "$new"
        exit 77
    fi
    # deb-src too: Open MPI's sources (the headers Debian leaves out)
    printf 'deb %s trixie main\ndeb-src %s trixie main\n' "$mirror" "$mirror" >"$new/etc/apt/sources.list"
    # shellcheck disable=SC2016
    if ! in_root "$new" '
        set -e
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends '"$(echo "$PKGS" | tr -s ' \n' '  ')"'
        ver=$(dpkg-query -W -f="\${Version}" libopenmpi-dev)
        dir=/var/cache/libivshm/ompi-src/$ver
        mkdir -p "$dir" && cd "$dir"
        apt-get source -q --download-only "openmpi=$ver"
        tar -xJf openmpi_*.orig.tar.xz --wildcards "*/opal/*.h" "*/opal/include/*"
        rm -f openmpi_*
        # mpich registers mpirun/mpicc alternatives of its own: the tests
        # mean Open MPI by those names (mpiexec.mpich, mpicc.mpich: MPICH)
        for alt in mpi mpirun mpi-x86_64-linux-gnu; do
            update-alternatives --query "$alt" >/dev/null 2>&1 || continue
            best=$(update-alternatives --list "$alt" | grep -i openmpi | head -1)
            [ -z "$best" ] || update-alternatives --set "$alt" "$best" >/dev/null
        done
        apt-get clean' >>"$log" 2>&1; then
        tail -5 "$log"
        echo "debian13-root: SKIP: installing the packages in the root failed (see $log)"
        rm -rf "$new"
        exit 77
    fi
    echo "$stamp" >"$new/.libivshm-root"
    rm -rf "$root"
    mv "$new" "$root"
}

# ucx_src: the sources of the root's UCX, unpacked once into the cache
# folder configure reads: the source of the installed libucx0 (a binNMU
# has its source's version), in a folder named by the upstream version
# pkg-config gives (Debian's is X+ds)
ucx_src() {
    # shellcheck disable=SC2016
    ver=$(chroot "$root" dpkg-query -W -f='${Version}' libucx0)
    up=$(chroot "$root" pkg-config --modversion ucx)
    dir=/var/cache/libivshm/ucx-src/$ver
    [ ! -f "$root$dir/.unpacked" ] || return 0
    given=${IVSHM_UCX_SRC:-/var/cache/libivshm/ucx-upstream/ucx-$up}
    rm -rf "$root$dir"
    mkdir -p "$root$dir"
    # shellcheck disable=SC2016
    if in_root "$root" '
        set -e
        cd '"$dir"'
        apt-get source -q --download-only "ucx=$(dpkg-query -W -f="\${source:Version}" libucx0)"
        dpkg-source -q -x ucx_*.dsc ucx-'"$up"'
        rm -f ucx_*' >"$root.ucx-src.log" 2>&1; then
        :
    elif [ -f "$given/configure.ac" ]; then
        echo "debian13-root: the archive does not serve UCX's source package ($root.ucx-src.log): UCX $up's sources from $given"
        cp -a "$given" "$root$dir/ucx-$up"
    else
        tail -3 "$root.ucx-src.log"
        echo "debian13-root: no sources of UCX $up (the archive does not serve them, see $root.ucx-src.log; IVSHM_UCX_SRC=DIR gives a tree): the UCX transport is left out"
        return 0
    fi
    touch "$root$dir/.unpacked"
}

[ "$(cat "$root/.libivshm-root" 2>/dev/null)" = "$stamp" ] || build_root
ucx_src
if [ $# -eq 0 ]; then
    in_root "$root" 'exec sh -i'
else
    in_root "$root" "$*"
fi
