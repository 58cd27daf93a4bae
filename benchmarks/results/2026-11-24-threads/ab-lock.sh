#!/bin/sh
# one-off (results/2026-11-24-threads): what the component's lock costs one
# thread under MPI_THREAD_MULTIPLE. Single node (btl_ivshmem_same_vm), ranks
# on CPUs 2 and 4 (a taskset wrapper, alike in every set-up), ivshm-osu
# latency to 256 B, 7 rounds interleaved: ivshmem and vader with -T
# (MPI_THREAD_MULTIPLE) and without. Lines: lat, set-up, round, bytes,
# median, mean. Run from the repository root after
# benchmarks/device-build.sh; summary: ab-lock-summary.py FILE.
set -u
top=$(pwd); B=$top/_dev
mpicc -O2 -pthread "$top/benchmarks/ivshm_osu.c" -o /tmp/osu
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
export OMPI_MCA_plm_rsh_agent=/bin/false
R=/dev/shm/ivshm-ab
printf '#!/bin/sh\nexec taskset -c $((2 + 2 * OMPI_COMM_WORLD_RANK)) "$@"\n' > /tmp/pin; chmod +x /tmp/pin
run() { label=$1 btl=$2; shift 2
  "$B/libivshm/tools/ivshm" format file:$R --size 512M --force >/dev/null
  IVSHM_REGION=file:$R mpirun --allow-run-as-root -np 2 --bind-to none \
   --mca mca_base_component_path "$B/mpi-plugin/.libs:$SYS" --mca pml ob1 --mca btl $btl \
   --mca btl_ivshmem_same_vm 1 -x IVSHM_REGION "$@" /tmp/pin /tmp/osu latency -m 256 -r 11 $T > /tmp/run.out 2>&1
  awk -v l="$label" -v r=$round '/^[0-9]/ {print "lat", l, "r" r, $1, $2, $3}' /tmp/run.out
  grep -q "^[0-9]" /tmp/run.out || { echo "FAILED $label"; tail -3 /tmp/run.out; }
}
for round in 1 2 3 4 5 6 7; do
  T=-T run ivs-T self,ivshmem
  T="" run ivs-single self,ivshmem
  T=-T run vader-T self,vader
  T="" run vader-single self,vader
done
