#!/bin/sh
# one-off: 8-byte latency only, old (oldsrc = f9f8c33) / new interleaved,
# 15 rounds (ab-mpi.sh's builds are reused)
set -u
top=$(pwd)
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
export OMPI_MCA_plm_rsh_agent=/bin/false
mpicc -O2 benchmarks/ivshm_osu.c -o /tmp/osu
for round in $(seq 1 15); do
  for v in old new; do
    R=/dev/shm/ivshm-ab; b=$top/_$v
    "$b/libivshm/tools/ivshm" format file:$R --size 512M --force >/dev/null
    IVSHM_REGION=file:$R mpirun --allow-run-as-root -np 2 --bind-to core --map-by core \
      --mca mca_base_component_path "$b/mpi-plugin/.libs:$SYS" --mca pml ob1 --mca btl self,ivshmem \
      --mca btl_ivshmem_same_vm 1 -x IVSHM_REGION /tmp/osu latency -m 64 -r 11 2>&1 |
      awk -v v=$v -v r=$round '$1==8 || $1==64 {printf "latency %s r%d %s %s\n", v, r, $1, $2}'
  done
done
