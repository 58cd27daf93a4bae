#!/bin/sh
# one-off (results/2026-11-23-heap): small-message latency and window
# bandwidth for cell sizes (messages up to a cell ride inline; larger ones
# take a fragment), against vader; single node, ranks bound to cores 0,1,
# ivshmem forced with btl_ivshmem_same_vm; 3 rounds interleaved.
# Run from the build directory (_dev) with top=source tree.
set -u
mpicc -O2 "$top/benchmarks/ivshm_osu.c" -o /tmp/osu
"$PWD/libivshm/tools/ivshm" format file:/dev/shm/ivshm-cells --size 512M --force >/dev/null
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
m() { mpirun --allow-run-as-root -np 2 --bind-to core --map-by core --mca pml ob1 \
        --mca mca_base_component_path "$PWD/mpi-plugin/.libs:$SYS" -x IVSHM_REGION=file:/dev/shm/ivshm-cells "$@"; }
for round in 1 2 3; do
  for cfg in "256 64" "1024 32" "2112 16" vader; do
    set -- $cfg
    for b in latency bw; do
      if [ "$cfg" = vader ]; then
        m --mca btl self,vader /tmp/osu $b -m 4096 -r 11 | sed "s/^/$round vader $b /"
      else
        m --mca btl self,ivshmem --mca btl_ivshmem_same_vm 1 --mca btl_ivshmem_cell_size $1 \
          --mca btl_ivshmem_fbox_size $2 /tmp/osu $b -m 4096 -r 11 | sed "s/^/$round cell$1 $b /"
      fi
    done
  done
done | grep -v '#'
rm -f /dev/shm/ivshm-cells
