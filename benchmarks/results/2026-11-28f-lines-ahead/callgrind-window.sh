#!/bin/sh
# callgrind-window.sh BUILD LABEL SIZE [vader]: two ranks of bwx (a window
# of 64 MPI_Isend of SIZE bytes, then a 4-byte answer; 300 windows, three
# times) under callgrind on this machine, through the ivshmem BTL of the
# build tree BUILD (or vader), then per message: the functions' inclusive
# instructions (cg_incl.py of ../2026-11-28-tx-checks/callgrind.sh's folder
# prints calls, inclusive and self counts per function).
# Build bwx with: mpicc -O2 -o bwx bwx.c
set -u
B=$1 L=$2 M=$3 K=${4:-ivshmem}
if [ "$K" = vader ]; then set -- --mca btl self,vader; else
set -- --mca btl self,ivshmem --mca btl_ivshmem_same_vm 1 --mca mca_base_component_path "$B/mpi-plugin/btl/.libs:$B/mpi-plugin/mpool/.libs:$B/mpi-plugin/coll/.libs:/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3"; fi
"$B/libivshm/tools/ivshm" format file:/dev/shm/bwxR --size 256M --force >/dev/null
IVSHM_REGION=file:/dev/shm/bwxR IT=300 mpirun --allow-run-as-root -np 2 --mca plm_rsh_agent /bin/false \
  --mca pml ob1 --mca osc pt2pt --bind-to core -x IVSHM_REGION -x IT "$@" \
  valgrind --tool=callgrind --callgrind-out-file="$L.%p" ./bwx "$M"
rm -f /dev/shm/bwxR
