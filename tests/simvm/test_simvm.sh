#!/bin/sh
# MPI across simulated VMs (network + UTS namespaces) with real mpirun:
#  1. one job over two "hosts": co-resident VMs talk through ivshmem (proved
#     per peer by the component's counters), same-VM ranks through vader,
#     other-host ranks through tcp; every MPI check passes;
#  2. MPI_Alloc_mem buffers that do not fit the region stay private; ranks
#     of unlike cell sizes (btl_ivshmem_cell_size) pass every check over
#     the region alone;
#  3. a missing region, a region of another layout version, a region too
#     small for the job: the job passes over tcp and each process prints
#     one warning;
#  4. a rank paused (SIGSTOP) past its lease: the lease is kept, in doubt
#     (a paused VM is alive); an admin's 'ivshm gc --force' releases it;
#     resumed, the rank's job ends with an MPI error naming the lost
#     lease, no hang.
# Needs root, iproute2 and Open MPI; skipped (77) otherwise (a FAIL under
# IVSHM_REQUIRE_ALL=1).
set -u
. "$(dirname "$0")/lib.sh"
simvm_require

work=$(mktemp -d)
trap '"$SIMVM" down; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
mpicc -O2 "$top_srcdir/tests/simvm/mpi_check.c" -o "$work/mpi_check"
pass=0 fail=0

"$SIMVM" up a:0 a:1 a:2 b:3 b:4
simvm_format 256M
A=10.200.0.1:2,10.200.0.2:1,10.200.0.3:1,10.200.0.4:1,10.200.0.5:1

# ---- 1. the mixed job
simvm_mpirun "$A" 6 --mca btl self,vader,ivshmem,tcp --mca mpi_yield_when_idle 1 \
    --mca btl_ivshmem_stats 1 --mca btl_ivshmem_verbose 1 "$work/mpi_check" >"$work/mixed.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "6 ranks: 10 passed, 0 failed" "$work/mixed.out"; then
    ok "mixed job: all MPI checks pass"
else
    bad "mixed job (rc $rc)"; tail -30 "$work/mixed.out"
fi
# ranks 0,1 in VM0; 2 in VM1; 3 in VM2 (host a); 4 in VM3; 5 in VM4 (host b)
want="0-2 0-3 1-2 1-3 2-0 2-1 2-3 3-0 3-1 3-2 4-5 5-4"
got=$(sed -n 's/.*btl ivshmem stats: .* rank \([0-9]*\) -> rank \([0-9]*\): route region: \([0-9]*\) sends.*/\1-\2 \3/p' "$work/mixed.out" |
      awk '$2 > 0 {print $1}' | sort -t- -k1,1n -k2,2n | tr '\n' ' ' | sed 's/ $//')
if [ "$got" = "$want" ]; then
    ok "ivshmem carried exactly the co-resident cross-VM pairs: $got"
else
    bad "ivshmem pairs: got '$got', want '$want'"
fi
# MPI_Alloc_mem buffers live in the region: ivshmem pairs moved them with
# single-copy gets (every pair exchanges such buffers both ways)
single=$(sed -n 's/.*btl ivshmem stats: .* rank \([0-9]*\) -> rank \([0-9]*\): route region: \([0-9]*\) sends.* \([0-9]*\) gets \([0-9]*\) bytes.* \([0-9]*\) refused/\1-\2 \3 \4 \6/p' "$work/mixed.out" |
      awk '$2 > 0 { n++; if ($3 > 0 && $4 == 0) g++ } END { printf "%d/%d", g, n }')
if [ "$single" = "12/12" ]; then
    ok "every ivshmem pair read MPI_Alloc_mem buffers with single-copy gets, none refused ($single)"
else
    bad "single-copy gets: $single pairs"; grep "btl ivshmem stats" "$work/mixed.out"
fi
if grep -q "rank 0 -> rank 1: same-vm: left to other BTLs" "$work/mixed.out" &&
   grep -q "rank 0 -> rank 4: remote: left to other BTLs" "$work/mixed.out"; then
    ok "same-VM peers left to vader, other-host peers left to the network"
else
    bad "add_procs decisions"; grep "btl ivshmem: rank" "$work/mixed.out" | head
fi

# ---- 2. a region with room for the channels but not for 4 MiB
# MPI_Alloc_mem buffers: those stay in private memory, the job passes
simvm_format 16M
simvm_mpirun 10.200.0.1:1,10.200.0.2:1 2 --mca btl self,vader,ivshmem,tcp --mca mpi_yield_when_idle 1 \
    --mca btl_ivshmem_stats 1 --mca btl_ivshmem_verbose 1 "$work/mpi_check" >"$work/full.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "2 ranks: 10 passed, 0 failed" "$work/full.out" &&
   grep -q "MPI_Alloc_mem of 4194304 bytes stays in private memory" "$work/full.out" &&
   [ "$(grep -c "btl ivshmem stats: .* sends" "$work/full.out")" = 2 ]; then
    ok "region too full for MPI_Alloc_mem buffers: they stay private, job passes over ivshmem"
else
    bad "full region for MPI_Alloc_mem (rc $rc)"; tail -20 "$work/full.out"
fi
simvm_format 256M

# ---- 2b. ranks of unlike cell sizes: VM 0's rank sets 128-byte cells, VM
# 1's keeps 1,088, and only the region carries the job (no tcp). VM 1's
# rank sends ob1's small messages (up to 1,056 bytes inline in its own
# cells) whole; those longer than VM 0's 96 bytes reach it in fragments
cat >"$work/small_cells" <<EOF
#!/bin/sh
[ "\$(hostname)" = vm0-hosta ] && OMPI_MCA_btl_ivshmem_cell_size=128 &&
    export OMPI_MCA_btl_ivshmem_cell_size
exec "\$@"
EOF
chmod +x "$work/small_cells"
simvm_mpirun 10.200.0.1:1,10.200.0.2:1 2 --mca btl self,ivshmem --mca mpi_yield_when_idle 1 \
    --mca btl_ivshmem_stats 1 "$work/small_cells" "$work/mpi_check" >"$work/cells.out" 2>&1
rc=$?
routes=$(grep -c "btl ivshmem stats: host vm[01]-hosta rank [01] -> rank [01]: route region: [1-9][0-9]* sends" "$work/cells.out")
if [ $rc -eq 0 ] && grep -q "2 ranks: 10 passed, 0 failed" "$work/cells.out" && [ "$routes" = 2 ]; then
    ok "cells of 128 and 1088 bytes in one job: every MPI check passes over the region alone"
else
    bad "unlike cell sizes (rc $rc, $routes ranks sent over the region)"; tail -20 "$work/cells.out"
fi

# ---- 3. bad configurations: correct over tcp, one warning per process
bad_config() { # name expected-warning-fragment
    name=$1 frag=$2
    simvm_mpirun 10.200.0.1:1,10.200.0.2:1 2 --mca btl self,ivshmem,tcp \
        --mca btl_ivshmem_stats 1 "$work/mpi_check" >"$work/$name.out" 2>&1
    rc=$?
    n=$(grep -c "$frag" "$work/$name.out")
    if [ $rc -eq 0 ] && grep -q "2 ranks: 10 passed, 0 failed" "$work/$name.out" &&
       ! grep -q "btl ivshmem stats" "$work/$name.out" && [ "$n" -ge 1 ] && [ "$n" -le 2 ]; then
        ok "$name: job passed over tcp with $n warning(s)"
    else
        bad "$name (rc $rc, $n warnings)"; tail -30 "$work/$name.out"
    fi
}
SIMVM_REGION_OVERRIDE=file:/dev/shm/ivshm-simvm-missing
export SIMVM_REGION_OVERRIDE
bad_config missing-region "cannot use the shared region"
R=/dev/shm/ivshm-simvm-badversion
"$top_builddir/libivshm/tools/ivshm" format "file:$R" --size 16M --force >/dev/null
python3 - "$R" <<'PY'
import struct, sys
f = open(sys.argv[1], "r+b"); h = bytearray(f.read(120))
h[8:12] = struct.pack("<I", 99)         # a layout version no libivshm reads
s = 0xcbf29ce484222325
for b in h:
    s = ((s ^ b) * 0x100000001b3) & 0xffffffffffffffff
f.seek(0); f.write(h); f.seek(120); f.write(struct.pack("<Q", s)); f.close()
PY
SIMVM_REGION_OVERRIDE=file:$R
bad_config wrong-version "format this ivshmem BTL cannot use"
rm -f "$R"
R=/dev/shm/ivshm-simvm-small
"$top_builddir/libivshm/tools/ivshm" format "file:$R" --size 1M --chunk 4K --force >/dev/null
SIMVM_REGION_OVERRIDE=file:$R
bad_config region-too-small "has no room for this process"
rm -f "$R"
unset SIMVM_REGION_OVERRIDE

# ---- 4. a rank paused past the lease timeout (a suspended VM)
cat >"$work/pingpong.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    int rank, x = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double end = MPI_Wtime() + 40;
    while (MPI_Wtime() < end) {
        if (rank == 0) {
            MPI_Send(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
        }
        if (++x == 1000 && rank == 0) {
            printf("pingpong: running\n"); /* the test pauses a rank now */
            fflush(stdout);
        }
    }
    printf("pingpong: %d round trips, not stopped\n", x);
    MPI_Finalize();
    return 0;
}
C
mpicc -O2 "$work/pingpong.c" -o "$work/pingpong"
for r in $("$SIMVM" regions); do
    "$top_builddir/libivshm/tools/ivshm" format "file:$r" --size 64M --lease-ms 500 --force >/dev/null
done
SIMVM_TIMEOUT=60 simvm_mpirun 10.200.0.1:1,10.200.0.2:1 2 --mca btl self,vader,ivshmem \
    --mca mpi_yield_when_idle 1 "$work/pingpong" >"$work/pause.out" 2>&1 &
job=$!
pid=""
# pause only once messages flow (both ranks hold their leases): on a
# loaded machine MPI_Init can take seconds, and a rank paused before it
# attaches has no lease to lose
for _ in $(seq 300); do
    grep -q "pingpong: running" "$work/pause.out" 2>/dev/null &&
        pid=$(pgrep -f "^$work/pingpong" | tail -1) && [ -n "$pid" ] && break
    pid=""
    sleep 0.1
done
# keep it stopped until its lease is in doubt (heartbeat expired, kept:
# a paused VM is alive, docs/lifetimes.md), then declare it dead as an admin
# does ('ivshm gc --force'), and until its pid leaves the live slots of
# 'ivshm info' (events, not fixed pauses)
pid_state() { # PID's registry slot state in one of the regions, or nothing
    for r in $("$SIMVM" regions); do
        "$top_builddir/libivshm/tools/ivshm" info --region "file:$r" 2>/dev/null |
            grep -Eo "(alive|claiming|reclaiming|in-doubt) +pid $1 " | cut -d' ' -f1 |
            grep . && return 0
    done
    return 1
}
pid_live() { pid_state "$1" >/dev/null; }
[ -z "$pid" ] || pid_live "$pid" || { echo "FAIL: rank $pid holds no slot in 'ivshm info'"; pid=""; }
t0=$(date +%s)
reclaimed=""
doubt=""
if [ -n "$pid" ] && kill -STOP "$pid"; then
    for _ in $(seq 300); do
        [ "$(pid_state "$pid")" = in-doubt ] && { doubt=$(($(date +%s) - t0)); break; }
        sleep 0.1
    done
    if [ -n "$doubt" ]; then
        for r in $("$SIMVM" regions); do
            "$top_builddir/libivshm/tools/ivshm" gc --force --region "file:$r"
        done
        for _ in $(seq 300); do
            pid_live "$pid" || { reclaimed=$(($(date +%s) - t0)); break; }
            sleep 0.1
        done
    fi
    kill -CONT "$pid"
fi
[ -n "$doubt" ] && echo "paused rank's lease in doubt (kept) after ${doubt} s" ||
    echo "FAIL: the paused rank's lease was not shown in doubt within 30 s"
[ -n "$reclaimed" ] && echo "paused rank's lease released by 'ivshm gc --force' after ${reclaimed} s" ||
    echo "FAIL: 'ivshm gc --force' did not release the paused rank's lease"
wait "$job"
rc=$?
t1=$(date +%s)
if [ -n "$pid" ] && [ -n "$doubt" ] && [ -n "$reclaimed" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $((t1 - t0)) -lt 50 ] &&
   grep -q "lost its lease on the shared region" "$work/pause.out" &&
   ! grep -q "not stopped" "$work/pause.out"; then
    ok "rank paused past the lease: the job ended with an error in $((t1 - t0)) s"
    grep -m1 "lost its lease" "$work/pause.out"
else
    bad "paused rank (pid '$pid', in doubt after '${doubt}' s, released after '${reclaimed}' s, rc $rc, $((t1 - t0)) s)"; tail -20 "$work/pause.out"
fi
simvm_format 256M

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
