#!/bin/sh
# one-off (results/2026-11-24-threads): the 4-thread message rate (mtrate -t
# 4, each rank on 4 cores, ivshm-osu pins thread k to the k-th) under
# MPI_THREAD_MULTIPLE with btl_ivshmem_thread_spin = SPINS (a thread tries
# the component's lock that many times before it sleeps on it), vader in
# the same rounds; ROUNDS rounds interleaved, single node (btl_ivshmem_same_vm).
# Columns: set-up, round, bytes, median, mean. Run from the repository root
# after benchmarks/device-build.sh.
set -u
top=${top:-$(pwd)}
B=$top/_dev
mpicc -O2 -pthread "$top/benchmarks/ivshm_osu.c" -o /tmp/osu
SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
export OMPI_MCA_plm_rsh_agent=/bin/false
R=/dev/shm/ivshm-spin
run() { # LABEL BTL SPIN
    "$B/libivshm/tools/ivshm" format file:$R --size 512M --force >/dev/null
    IVSHM_REGION=file:$R mpirun --allow-run-as-root -np 2 \
      --mca mca_base_component_path "$B/mpi-plugin/.libs:$SYS" --mca pml ob1 --mca btl "$2" \
      --mca btl_ivshmem_same_vm 1 --mca btl_ivshmem_thread_spin "$3" -x IVSHM_REGION \
      --bind-to core --map-by slot:PE=4 /tmp/osu mtrate -t 4 -m "${MAXB:-65536}" -r 5 >/tmp/run.out 2>&1
    awk -v l="$1" -v r=$round '/^[0-9]/ {print l, "r" r, $1, $2, $3}' /tmp/run.out
    grep -q "^[0-9]" /tmp/run.out || { echo "FAILED: $1"; tail -5 /tmp/run.out; }
}
for round in $(seq 1 "${ROUNDS:-3}"); do
    for s in ${SPINS:-0 100 1000}; do run "mtrate4 spin$s" self,ivshmem "$s"; done
    run "mtrate4 vader" self,vader 0
done
rm -f $R
