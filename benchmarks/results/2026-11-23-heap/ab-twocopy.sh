#!/bin/sh
# one-off (results/2026-11-23-heap): the two-copy path before (oldsrc =
# 5f1b4eb: ob1 packs into a private staging buffer, send copies it into a
# channel fragment) and after (alloc reserves the channel fragment, ob1
# packs straight into it). malloc'd buffers, no region heap; ivshm-osu bw,
# bibw and latency from 4 KiB (median of 7, then mean), vader and vader
# without CMA in the same rounds; single node, ranks bound to cores 0,1,
# ivshmem forced with btl_ivshmem_same_vm; 3 rounds interleaved.
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
mpicc -O2 "$top/benchmarks/ivshm_osu.c" -o /tmp/osu
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
"$top/_new/libivshm/tools/ivshm" format file:/dev/shm/ivshm-ab --size 512M --force >/dev/null
m() { mpirun --allow-run-as-root -np 2 --bind-to core --map-by core --mca pml ob1 "$@"; }
for round in 1 2 3; do
    for b in bw bibw latency; do
        for v in _old _new; do
            m --mca mca_base_component_path "$top/$v/mpi-plugin/.libs:$SYS" -x IVSHM_REGION=file:/dev/shm/ivshm-ab \
                --mca btl self,ivshmem --mca btl_ivshmem_same_vm 1 /tmp/osu $b -m 4194304 -r 7 |
                awk -v t="$round $v $b" '/^[0-9]/ && $1 >= 4096 {print t, $0}'
        done
        m --mca btl self,vader /tmp/osu $b -m 4194304 -r 7 | awk -v t="$round vader $b" '/^[0-9]/ && $1 >= 4096 {print t, $0}'
        m --mca btl self,vader --mca btl_vader_single_copy_mechanism none /tmp/osu $b -m 4194304 -r 7 |
            awk -v t="$round nocma $b" '/^[0-9]/ && $1 >= 4096 {print t, $0}'
    done
done
rm -f /dev/shm/ivshm-ab
