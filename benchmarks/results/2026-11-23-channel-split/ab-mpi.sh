#!/bin/sh
# one-off (results/2026-11-23-channel-split): ivshm-osu latency/bw, old (oldsrc = 9c30463) / new / vader interleaved
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; top=$(pwd)
build() { [ -x "$2/benchmarks/ivshm-lat" ] && return 0; mkdir -p "$2" && cd "$2" && "$1/configure" CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j16 >make.out 2>&1; rc=$?; cd "$top"; return $rc; }
build "$top/oldsrc" "$top/_old" && build "$top" "$top/_new" || exit 1
mpicc -O2 benchmarks/ivshm_osu.c -o /tmp/osu
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
export OMPI_MCA_plm_rsh_agent=/bin/false
for round in 1 2 3 4 5; do
for v in old new vader; do
  R=/dev/shm/ivshm-bis; b=$top/_$v; [ $v = vader ] && b=$top/_new
  "$b/libivshm/tools/ivshm" format file:$R --size 512M --force >/dev/null
  if [ $v = vader ]; then btl="self,vader"; else btl="self,ivshmem"; fi
  IVSHM_REGION=file:$R mpirun --allow-run-as-root -np 2 --bind-to core --map-by core --mca mca_base_component_path "$b/mpi-plugin/.libs:$SYS" --mca pml ob1 --mca btl $btl --mca btl_ivshmem_same_vm 1 -x IVSHM_REGION /tmp/osu latency 2>&1 | awk -v v=$v -v r=$round '$1==8||$1==64||$1==1024||$1==65536{printf "lat %s r%d %s %s\n", v, r, $1, $2}'
  IVSHM_REGION=file:$R mpirun --allow-run-as-root -np 2 --bind-to core --map-by core --mca mca_base_component_path "$b/mpi-plugin/.libs:$SYS" --mca pml ob1 --mca btl $btl --mca btl_ivshmem_same_vm 1 -x IVSHM_REGION /tmp/osu bw 2>&1 | awk -v v=$v -v r=$round '$1==8||$1==65536||$1==1048576{printf "bw %s r%d %s %s\n", v, r, $1, $2}'
done
done
