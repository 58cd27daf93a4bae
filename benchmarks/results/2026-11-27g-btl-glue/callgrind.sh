#!/bin/sh
# callgrind of ivshm-osu (both ranks, one OS, no VMs): sh callgrind.sh
# BUILD LABEL [ivshmem|vader] [BENCH] [BYTES]; writes LABEL.PID in the
# current folder, read with ../2026-11-27b-msgrate/cg_incl.py (per
# function) or instr.py (per instruction: add --dump-instr=yes below).
set -u
B=$1; L=$2; K=${3:-ivshmem}; BENCH=${4:-bw}; M=${5:-8}
here=$(cd "$(dirname "$0")" && pwd)
[ -x ivshm-osu ] || mpicc -O2 -g "$here/../../ivshm_osu.c" -o ivshm-osu
$B/libivshm/tools/ivshm format file:/dev/shm/cgR --size 256M --force >/dev/null
if [ $K = vader ]; then set -- --mca btl self,vader; else
set -- --mca btl self,ivshmem --mca btl_ivshmem_same_vm 1 --mca mca_base_component_path "$B/mpi-plugin/btl/.libs:$B/mpi-plugin/mpool/.libs:$B/mpi-plugin/coll/.libs:/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3"; fi
rm -f $L.*
IVSHM_REGION=file:/dev/shm/cgR mpirun --allow-run-as-root -np 2 --mca plm_rsh_agent /bin/false \
  --mca pml ob1 --mca osc pt2pt --mca mpi_yield_when_idle 1 --bind-to none "$@" -x IVSHM_REGION \
  valgrind --tool=callgrind --callgrind-out-file=$L.%p ./ivshm-osu $BENCH -m $M -i 300 -r 1
rm -f /dev/shm/cgR
