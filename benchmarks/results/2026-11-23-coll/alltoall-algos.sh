#!/bin/sh
# one-off (results/2026-11-23-coll): alltoall at 15 ranks with coll/tuned's
# algorithms forced (coll_tuned_use_dynamic_rules 1,
# coll_tuned_alltoall_algorithm 1 linear, 2 pairwise, 3 modified Bruck,
# 4 linear with a bounded number of requests), over ivshmem point-to-point
# (what coll ivshmem falls back to above alltoall_max) and over vader,
# against native with tuned's own choice. Single node, rank r on CPU r,
# ivshm-osu alltoall up to 64 KiB, medians of 5 and their mean, 3 rounds.
# Run from the build directory (_dev) with top=source tree; columns: set-up,
# round, bytes, median, mean.
set -eu
top_builddir=$PWD
. "$top/tests/simvm/lib.sh"
mpicc -O2 "$top/benchmarks/ivshm_osu.c" -o /tmp/osu
printf '#!/bin/sh\nexec taskset -c "$OMPI_COMM_WORLD_RANK" "$@"\n' >/tmp/pin && chmod +x /tmp/pin
single_node_region /dev/shm/ivshm-a2a 1G
run() { # LABEL MCA...
    label=$1; shift
    single_node_mpirun 15 --oversubscribe --bind-to none "$@" /tmp/pin /tmp/osu alltoall -m 65536 -r 5 2>/dev/null |
        awk -v l="$label" -v r="$round" '/^[0-9]/ {print l, r, $1, $2, $3}'
}
for round in 1 2 3; do
    run native --mca btl self,vader --mca coll ^ivshmem
    run ivshmem --mca btl self,vader,ivshmem,tcp
    for a in 1 2 3 4; do
        dyn="--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_alltoall_algorithm $a"
        # shellcheck disable=SC2086
        run "ivshmem-a$a" --mca btl self,vader,ivshmem,tcp $dyn
        # shellcheck disable=SC2086
        run "native-a$a" --mca btl self,vader --mca coll ^ivshmem $dyn
    done
done
rm -f /dev/shm/ivshm-a2a
