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
# where configure looks for them (only the opal headers are kept).
#
# Environment: IVSHM_TRIXIE_ROOT (default /var/cache/libivshm/trixie-root;
# the build log is $IVSHM_TRIXIE_ROOT.log),
# IVSHM_DEBIAN_MIRROR (default http://deb.debian.org/debian).
# Exit: CMD's status; 77 where Debian's archive cannot be reached (the
# reason is printed; scripts/test.sh counts 77 as a failure on CI).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
root=${IVSHM_TRIXIE_ROOT:-/var/cache/libivshm/trixie-root}
mirror=${IVSHM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# what the build and the tests need (scripts/install-deps.sh has Debian
# 12's list); a change of this list rebuilds the root
PKGS="build-essential autoconf automake libtool pkg-config
      openmpi-bin libopenmpi-dev libhwloc-dev libcmocka-dev
      iproute2 util-linux procps python3 kmod"
stamp="libivshm trixie root: $(echo "$PKGS" | tr -s ' \n' '  ')"

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
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends '"$(echo "$PKGS" | tr -s ' \n' '  ')"'
        ver=$(dpkg-query -W -f="\${Version}" libopenmpi-dev)
        dir=/var/cache/libivshm/ompi-src/$ver
        mkdir -p "$dir" && cd "$dir"
        apt-get source -q --download-only "openmpi=$ver"
        tar -xJf openmpi_*.orig.tar.xz --wildcards "*/opal/*.h" "*/opal/include/*"
        rm -f openmpi_*
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

[ "$(cat "$root/.libivshm-root" 2>/dev/null)" = "$stamp" ] || build_root
if [ $# -eq 0 ]; then
    in_root "$root" 'exec sh -i'
else
    in_root "$root" "$*"
fi
