#!/bin/sh
# $1 build dir, $2 label, $3 btl, $4 bench, $5 size
set -u
B=$1; L=$2; K=${3:-ivshmem}; BENCH=${4:-bw}; M=${5:-8}
# runs in $CG_DIR (default /tmp/cg), which holds ivshm-osu: mpicc -O2 -g benchmarks/ivshm_osu.c -o ivshm-osu
cd "${CG_DIR:-/tmp/cg}"
$B/libivshm/tools/ivshm format file:/dev/shm/cgR --size 256M --force >/dev/null
if [ $K = vader ]; then set -- --mca btl self,vader; else
set -- --mca btl self,ivshmem --mca btl_ivshmem_same_vm 1 --mca mca_base_component_path "$B/mpi-plugin/btl/.libs:$B/mpi-plugin/mpool/.libs:$B/mpi-plugin/coll/.libs:/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3"; fi
rm -f $L.*
IVSHM_REGION=file:/dev/shm/cgR mpirun --allow-run-as-root -np 2 --mca plm_rsh_agent /bin/false \
  --mca pml ob1 --mca osc pt2pt --mca mpi_yield_when_idle 1 --bind-to none "$@" -x IVSHM_REGION \
  valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file=$L.%p ./ivshm-osu $BENCH -m $M -i 300 -r 1
rm -f /dev/shm/cgR
