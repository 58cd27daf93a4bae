#!/bin/sh
# Compiles the Open MPI components (BTL, mpool and coll) against Open MPI
# 5.x headers with -Werror: keeps the BTL_VERSION >= 330 paths and the 5.x
# renames (ompi_compat.h) honest on a machine that runs 4.1.
#
# coll ivshmem has its coll 2.4.0 path (ompi_compat.h): its errors fail
# the check like the others. The components also build and run against
# 5.0.7 in a Debian 13 root (scripts/test-debian13.sh, docs/support.md).
#
# Debian 12 has no Open MPI 5; Debian 13 (trixie) has 5.0.7. Its
# libopenmpi-dev lacks some internal headers a component needs (e.g. the
# threads implementation's), so the matching source package supplies the
# opal/ tree, and libpmix-dev / libevent-dev what opal includes. All come
# from Debian's archive through a private apt configuration: the machine's
# own apt state is not touched. Cached in $IVSHM_OMPI5_CACHE.
#
# Exit: 0 compiled, 1 a compile error, 77 the archive could not be reached
# (scripts/test.sh fails on 77 too: CI has Debian's archive).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${IVSHM_OMPI5_CACHE:-/var/cache/libivshm/ompi5}
mkdir -p "$cache/lists/partial" "$cache/archives/partial" "$cache/root" "$cache/debs"
cat >"$cache/sources.list" <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
EOF
apt_opts="-o Dir::Etc::SourceList=$cache/sources.list -o Dir::Etc::SourceParts=/dev/null
 -o Dir::State::Lists=$cache/lists -o Dir::Cache=$cache -o APT::Sandbox::User=root"
if [ ! -f "$cache/ready" ]; then
    # shellcheck disable=SC2086
    if ! apt-get -q $apt_opts update >"$cache/apt.log" 2>&1 ||
       ! (cd "$cache/debs" && apt-get -q $apt_opts download libopenmpi-dev libpmix-dev libevent-dev &&
          apt-get -q $apt_opts source --download-only openmpi) >>"$cache/apt.log" 2>&1; then
        echo "check-ompi5: SKIP: Debian's trixie archive not reachable (see $cache/apt.log)"
        exit 77
    fi
    for d in "$cache"/debs/*.deb; do dpkg-deb -x "$d" "$cache/root"; done
    tar -xJf "$cache"/debs/openmpi_*.orig.tar.xz -C "$cache/root" --wildcards \
        '*/opal/*.h' '*/opal/include/*'
    touch "$cache/ready"
fi
inc=$cache/root/usr/lib/x86_64-linux-gnu/openmpi/include
src=$(find "$cache/root" -maxdepth 1 -type d -name 'openmpi-5*' | head -1)
pmix=$(dirname "$(find "$cache/root" -name pmix.h | head -1)")
ver=$(sed -n 's/^#define OMPI_VERSION "\(.*\)"/\1/p' "$inc/openmpi/opal_config.h" 2>/dev/null || true)
grep -q "define BTL_VERSION 330" "$inc/openmpi/opal/mca/btl/btl.h" ||
    { echo "check-ompi5: the headers are not BTL 3.3"; exit 1; }
# cc5 FLAGS... FILE: compiles FILE against the 5.x headers
cc5() {
    gcc -std=gnu11 -Wall -Wextra -Werror -mcx16 -c -o /dev/null \
        -I"$inc/openmpi" -I"$src" -I"$src/opal/include" -I"$inc" -I"$pmix" \
        -I"$cache/root/usr/include" -I"$top/libivshm/include" -I"$top/mpi-plugin" "$@"
}
rc=0
# the verbs route's files too, where libibverbs-dev and librdmacm-dev are
verbs=
[ -f /usr/include/infiniband/verbs.h ] && [ -f /usr/include/rdma/rdma_cma.h ] &&
    verbs="btl/btl_ivshmem_verbs_device.c btl/btl_ivshmem_verbs.c btl/btl_ivshmem_verbs_module.c"
for f in btl/btl_ivshmem_component.c btl/btl_ivshmem_module.c btl/btl_ivshmem_send.c \
    btl/btl_ivshmem_rdma.c btl/btl_ivshmem_heap.c mpool/mpool_ivshmem_component.c $verbs; do
    if cc5 ${verbs:+-DIVSHMEM_HAVE_VERBS=1} -I"$top/mpi-plugin/btl" "$top/mpi-plugin/$f"; then
        echo "check-ompi5: ok: $f against Open MPI ${ver:-5.x}"
    else
        echo "check-ompi5: FAIL: $f against Open MPI ${ver:-5.x}"; rc=1
    fi
done
# coll: ompi/ headers from libopenmpi-dev, the shim after them (as in
# mpi-plugin/coll/local.mk)
ported=0
grep -q "mca_coll_base_component_2_4_0_t" "$top"/mpi-plugin/coll/*.h "$top"/mpi-plugin/*.h && ported=1
coll_bad=0 first=""
for f in "$top"/mpi-plugin/coll/*.c; do
    rel=${f#"$top/mpi-plugin/"}
    if cc5 -I"$top/mpi-plugin/btl" -idirafter "$top/mpi-plugin/coll/shim" "$f" 2>"$cache/coll.err"; then
        echo "check-ompi5: ok: $rel against Open MPI ${ver:-5.x}"
    else
        coll_bad=$((coll_bad + 1))
        [ -n "$first" ] || first=$(grep -m1 "error:" "$cache/coll.err" | sed 's/^.*error: //')
        if [ $ported = 1 ]; then
            cat "$cache/coll.err"; echo "check-ompi5: FAIL: $rel against Open MPI ${ver:-5.x}"; rc=1
        fi
    fi
done
if [ $ported = 0 ] && [ $coll_bad -gt 0 ]; then
    echo "check-ompi5: not run: coll ivshmem against Open MPI ${ver:-5.x} (written for coll 2.0.0, 5.x has coll 2.4.0: $coll_bad of $(ls "$top"/mpi-plugin/coll/*.c | wc -l) files fail, first error: $first)"
fi
exit $rc
