#!/bin/sh
# callgrind of ivshm-osu bw -m 8 (both ranks, one OS); $1 = build dir, $2 = label, $3 = btl (ivshmem|vader)
set -u
B=$1; L=$2; K=${3:-ivshmem}
cd /tmp/cg2
[ -x ivshm-osu ] || mpicc -O2 -g /work/wt-msgrate2/benchmarks/ivshm_osu.c -o ivshm-osu
$B/libivshm/tools/ivshm format file:/dev/shm/cg2R --size 256M --force >/dev/null
if [ $K = vader ]; then set -- --mca btl self,vader; else
set -- --mca btl self,ivshmem --mca btl_ivshmem_same_vm 1 --mca mca_base_component_path "$B/mpi-plugin/btl/.libs:$B/mpi-plugin/mpool/.libs:$B/mpi-plugin/coll/.libs:/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3"; fi
rm -f $L.*
IVSHM_REGION=file:/dev/shm/cg2R mpirun --allow-run-as-root -np 2 --mca plm_rsh_agent /bin/false \
  --mca pml ob1 --mca osc pt2pt --mca mpi_yield_when_idle 1 --bind-to none "$@" -x IVSHM_REGION \
  valgrind --tool=callgrind --callgrind-out-file=$L.%p ./ivshm-osu bw -m 8 -i 300 -r 1
rm -f /dev/shm/cg2R
