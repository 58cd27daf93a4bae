#!/bin/sh
# one-off (results/2026-11-23-short-cell): small-message latency before
# (oldsrc = fee6bdc: every cell carries a 56-byte header, so an 8-byte MPI
# message, with ob1's 16-byte match header, spans two lines) and after
# (whole messages go short: 32-byte header, one line up to 16 bytes of
# data), vader in the same rounds. ivshm-osu latency and mlat (7 pairs),
# 1 B - 4 KiB, median of 11 repeats and their mean; single node, ranks
# bound to cores (latency: cores 0,1; mlat: 0-13), ivshmem forced with
# btl_ivshmem_same_vm; $ROUNDS (default 5) rounds interleaved. Run from the repository root
# with oldsrc/ and the generated build systems present. NEW_MCA: extra
# mpirun arguments for the new build only (e.g. another cell size).
set -u
. benchmarks/results/2026-11-23-short-cell/ab-build.sh
mpicc -O2 "$top/benchmarks/ivshm_osu.c" -o /tmp/osu
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
m() { np=$1; shift; mpirun --allow-run-as-root -np "$np" --bind-to core --map-by core --mca pml ob1 "$@"; }
for round in $(seq "${ROUNDS:-5}"); do
    for b in latency mlat; do
        np=2; [ $b = mlat ] && np=14
        for v in _old _new; do
            "$top/$v/libivshm/tools/ivshm" format file:/dev/shm/ivshm-ab$v --size 512M --force >/dev/null
            extra=""; [ $v = _new ] && extra=${NEW_MCA:-}
            # shellcheck disable=SC2086
            m $np --mca mca_base_component_path "$top/$v/mpi-plugin/.libs:$SYS" -x IVSHM_REGION=file:/dev/shm/ivshm-ab$v \
                --mca btl self,ivshmem --mca btl_ivshmem_same_vm 1 $extra /tmp/osu $b -m 4096 -r 11 |
                awk -v t="$round $v $b" '/^[0-9]/ {print t, $0}'
            rm -f /dev/shm/ivshm-ab$v
        done
        m $np --mca btl self,vader /tmp/osu $b -m 4096 -r 11 | awk -v t="$round vader $b" '/^[0-9]/ {print t, $0}'
    done
done
