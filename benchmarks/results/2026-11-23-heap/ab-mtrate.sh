#!/bin/sh
# one-off (results/2026-11-23-heap): MPI_THREAD_MULTIPLE message rate with
# 4 threads per rank (ivshm-osu mtrate -t 4, up to 64 KiB, median of 5),
# before (oldsrc = 5f1b4eb: fragments copied under the component's lock)
# and after (btl_alloc reserves the fragment under the lock, ob1 packs into
# it outside), vader in the same rounds; each rank bound to 4 cores
# (--map-by slot:PE=4), ivshmem forced with btl_ivshmem_same_vm; 3 rounds.
# Run from the repository root with oldsrc/ and the generated build
# systems present.
set -u
top=$(pwd)
build() {
    src=$1 d=$2
    rm -rf "$d" && mkdir -p "$d" && (cd "$d" && "$src/configure" --disable-guest-tests CFLAGS="-O2 -g" >configure.out 2>&1 &&
        make -j16 >make.out 2>&1) || { tail -n 20 "$d/configure.out"; tail -n 20 "$d/make.out"; exit 1; }
}
build "$top/oldsrc" "$top/_old"
build "$top" "$top/_new"
mpicc -O2 -pthread "$top/benchmarks/ivshm_osu.c" -o /tmp/osu
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
"$top/_new/libivshm/tools/ivshm" format file:/dev/shm/ivshm-mt --size 512M --force >/dev/null
m() { mpirun --allow-run-as-root -np 2 --bind-to core --map-by slot:PE=4 --mca pml ob1 "$@"; }
for round in 1 2 3; do
    for v in _old _new; do
        m --mca mca_base_component_path "$top/$v/mpi-plugin/.libs:$SYS" -x IVSHM_REGION=file:/dev/shm/ivshm-mt \
            --mca btl self,ivshmem --mca btl_ivshmem_same_vm 1 /tmp/osu mtrate -t 4 -m 65536 -r 5 |
            awk -v t="$round $v" '/^[0-9]/ {print t, $1, $2}'
    done
    m --mca btl self,vader /tmp/osu mtrate -t 4 -m 65536 -r 5 | awk -v t="$round vader" '/^[0-9]/ {print t, $1, $2}'
done
rm -f /dev/shm/ivshm-mt
