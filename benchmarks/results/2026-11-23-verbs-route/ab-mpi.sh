#!/bin/sh
# one-off (results/2026-11-23-verbs-route): the region route before (oldsrc =
# f9f8c33) and after the verbs route was added, ivshm-osu latency and bw
# (median of 7 each), old / new / vader interleaved, 5 rounds, ranks bound
# to cores. Run from the repository root with the old tree in oldsrc/.
set -u
top=$(pwd)
build() { [ -x "$2/benchmarks/ivshm-lat" ] && return 0; mkdir -p "$2" && cd "$2" && "$1/configure" CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j16 >make.out 2>&1; rc=$?; cd "$top"; return $rc; }
build "$top/oldsrc" "$top/_old" && build "$top" "$top/_new" || exit 1
grep -E "verbs route" "$top/_new/configure.out" || true
mpicc -O2 benchmarks/ivshm_osu.c -o /tmp/osu
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
export OMPI_MCA_plm_rsh_agent=/bin/false
run() { # VERSION BENCH SIZES
  v=$1 bench=$2 sizes=$3
  R=/dev/shm/ivshm-ab; b=$top/_$v; [ $v = vader ] && b=$top/_new
  "$b/libivshm/tools/ivshm" format file:$R --size 512M --force >/dev/null
  if [ $v = vader ]; then btl="self,vader"; else btl="self,ivshmem"; fi
  IVSHM_REGION=file:$R mpirun --allow-run-as-root -np 2 --bind-to core --map-by core \
    --mca mca_base_component_path "$b/mpi-plugin/.libs:$SYS" --mca pml ob1 --mca btl $btl \
    --mca btl_ivshmem_same_vm 1 -x IVSHM_REGION /tmp/osu $bench 2>&1 |
    awk -v v=$v -v r=$round -v b=$bench -v s=" $sizes " 'index(s, " " $1 " ") {printf "%s %s r%d %s %s\n", b, v, r, $1, $2}'
}
for round in 1 2 3 4 5; do
  for v in old new vader; do
    run $v latency "8 64 1024 65536"
    run $v bw "8 65536 1048576"
  done
done
