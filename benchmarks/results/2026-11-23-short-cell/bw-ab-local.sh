#!/bin/sh
# one-off: bandwidth (ivshm-osu bw, 64 KiB - 4 MiB, median of 5) of the
# build before the prefetch and 1088-byte cells ($OLD: b6c7621) and after
# ($NEW), vader in the same rounds, on the 2-core Debian machine, ranks on
# cores 0 and 1, ivshmem forced; 3 rounds. Columns: round, build, bytes,
# MB/s. Set OLD, NEW (build directories) and top (source tree).
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
mpicc -O2 $top/benchmarks/ivshm_osu.c -o /tmp/osu
for round in 1 2 3; do
  for v in $OLD $NEW; do
    $v/libivshm/tools/ivshm format file:/dev/shm/ivshm-bwab --size 512M --force >/dev/null
    IVSHM_REGION=file:/dev/shm/ivshm-bwab mpirun --allow-run-as-root -np 2 --bind-to core --map-by core --mca pml ob1 \
      --mca mca_base_component_path "$v/mpi-plugin/.libs:$SYS" -x IVSHM_REGION --mca btl self,ivshmem --mca btl_ivshmem_same_vm 1 \
      /tmp/osu bw -m 4194304 -r 5 2>/dev/null | awk -v t="$round $(basename $(dirname $v/x))" '/^[0-9]/ && $1 >= 65536 {print t, $1, $2}'
  done
  mpirun --allow-run-as-root -np 2 --bind-to core --map-by core --mca pml ob1 --mca btl self,vader /tmp/osu bw -m 4194304 -r 5 2>/dev/null | awk -v t="$round vader" '/^[0-9]/ && $1 >= 65536 {print t, $1, $2}'
done
rm -f /dev/shm/ivshm-bwab
