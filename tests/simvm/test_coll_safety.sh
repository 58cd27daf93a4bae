#!/bin/sh
# coll ivshmem where ranks disagree or pause (docs/collectives.md), with
# real mpirun across simulated VMs (2 VMs x 2 ranks, one region):
#  1. mismatched settings: VM 0's parameter file sets
#     coll_ivshmem_max_bytes 1024, VM 1 has none. Every broadcast is
#     right, rank 0 says once which setting differs between which ranks,
#     and every rank's counters show the collectives went to the modules
#     below (stepped aside), none through the region;
#  2. comm rank 0 paused: the communicator's area lives in rank 0's
#     chunks. Rank 0 stops (SIGSTOP) until another VM sees its lease in
#     doubt (past the region's 1 s lease) and 2 s more; a bystander
#     process of another VM then takes every chunk it can and fills it;
#     ranks 1-3 broadcast twice from rank 1 meanwhile (into rank 0's
#     area); then rank 0 resumes. Waits are for events, not sleeps.
#     Every broadcast is right and the bystander's chunks are intact (a
#     paused owner is alive: its chunks are not handed out).
# Needs root, iproute2 and Open MPI; skipped (77) otherwise.
set -u
. "$(dirname "$0")/lib.sh"
simvm_require
[ -f "$top_builddir/mpi-plugin/coll/.libs/mca_coll_ivshmem.so" ] ||
    simvm_skip "coll ivshmem not built (no libmpi to link)"
[ -x "$top_builddir/tests/simvm/bystander" ] || simvm_skip "bystander not built"

work=$(mktemp -d)
trap '"$SIMVM" down; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
mpicc -O2 "$top_srcdir/tests/simvm/mpi_coll.c" -o "$work/mpi_coll"
pass=0 fail=0

"$SIMVM" up a:0 a:1
SIMVM_TIMEOUT=40
export SIMVM_TIMEOUT
hosts=10.200.0.1:2,10.200.0.2:2

# Each rank reads the parameter file of its VM (by host name), as a site
# with one file per VM would set it up.
cat >"$work/per_vm" <<EOF
#!/bin/sh
f="$work/params-\$(hostname).conf"
[ -f "\$f" ] && OMPI_MCA_mca_base_param_files=\$f && export OMPI_MCA_mca_base_param_files
exec "\$@"
EOF
chmod +x "$work/per_vm"
right() { grep -c "mpi_coll: rank [0-9]: all broadcasts right" "$1"; }

# ---- 1. mismatched settings
simvm_format 256M
echo "coll_ivshmem_max_bytes = 1024" >"$work/params-vm0-hosta.conf"
simvm_mpirun "$hosts" 4 --mca btl self,vader,ivshmem,tcp --mca mpi_yield_when_idle 1 \
    --mca coll_ivshmem_stats 1 "$work/per_vm" "$work/mpi_coll" bcasts >"$work/agree.out" 2>&1
rc=$?
said=$(grep -c "ranks disagree on coll_ivshmem_max_bytes (rank 0: 1024, rank 2: 0, 2 ranks differ from rank 0)" "$work/agree.out")
aside=$(grep "coll ivshmem stats: MPI_COMM_WORLD rank [0-9] of 4 (stepped aside):" "$work/agree.out" |
        grep -c "bcast 0/1[0-9] ")
if [ $rc -eq 0 ] && [ "$(right "$work/agree.out")" = 4 ] && [ "$said" = 1 ] &&
   [ "$(grep -c "ranks disagree" "$work/agree.out")" = 1 ] && [ "$aside" = 4 ]; then
    ok "coll_ivshmem_max_bytes 1024 on VM 0 only: every broadcast right, one message naming the setting and ranks, all 4 ranks stepped aside"
else
    bad "mismatched settings (rc $rc, $(right "$work/agree.out") ranks right, message $said times, $aside ranks aside)"
    grep -E "WRONG|right|disagree|stats|rror" "$work/agree.out" | head -12; tail -4 "$work/agree.out"
fi
rm -f "$work/params-vm0-hosta.conf"

# ---- 2. comm rank 0 paused past its lease
region=$("$SIMVM" regions)
"$top_builddir/libivshm/tools/ivshm" format "file:$region" --size 256M --lease-ms 1000 --force >/dev/null
simvm_mpirun "$hosts" 4 --mca btl self,vader,ivshmem,tcp --mca mpi_yield_when_idle 1 \
    "$work/mpi_coll" bcasts pause "$work/filled" >"$work/pause.out" 2>&1 &
job=$!
i=0
while [ $i -lt 300 ] && ! grep -q "mpi_coll: rank 0 pauses" "$work/pause.out"; do sleep 0.1; i=$((i + 1)); done
pid0=$(sed -n 's/.*mpi_coll: rank 0 pauses (pid \([0-9]*\)).*/\1/p' "$work/pause.out")
# Events, not sleeps (a loaded 2-core machine stretches any sleep): the
# bystander starts only once another VM's view counts rank 0's lease in
# doubt (its heartbeat older than the lease timeout), and two timeouts
# after that, so rank 0 is far past its lease when the bystander's gc runs.
in_doubt() {
    IVSHM_VM_ID=bystander "$top_builddir/libivshm/tools/ivshm" info "file:$region" |
        sed -n 's/^processes .*, \([0-9]*\) in doubt$/\1/p'
}
i=0
while [ $i -lt 600 ] && [ "$(in_doubt)" != 1 ]; do sleep 0.1; i=$((i + 1)); done
doubt=$(in_doubt)
sleep 2
IVSHM_VM_ID=bystander "$top_builddir/tests/simvm/bystander" "file:$region" "$work/done" \
    >"$work/bystander.out" 2>&1 &
by=$!
i=0
while [ $i -lt 300 ] && ! grep -q "bystander: took" "$work/bystander.out"; do sleep 0.1; i=$((i + 1)); done
touch "$work/filled" # ranks 1-3 broadcast now
# Ranks 1-3 finish two broadcasts without rank 0 (both buffer sets: slots
# and counters written into rank 0's area while it is stopped); the third
# waits for rank 0. Resume it only once all three said so.
i=0
while [ $i -lt 600 ] &&
      [ "$(grep -c "mpi_coll: rank [123]: first two broadcasts" "$work/pause.out")" != 3 ]; do
    sleep 0.1; i=$((i + 1))
done
early=$(grep -c "mpi_coll: rank [123]: first two broadcasts" "$work/pause.out")
[ -n "$pid0" ] && kill -CONT "$pid0"
wait $job
rc=$?
touch "$work/done"
wait $by
brc=$?
if [ -n "$pid0" ] && [ "$doubt" = 1 ] && [ "$early" = 3 ] && [ $rc -eq 0 ] &&
   [ "$(right "$work/pause.out")" = 4 ] && [ $brc -eq 0 ] &&
   grep -q "bystander: [0-9]* chunks, 0 changed" "$work/bystander.out"; then
    ok "rank 0 paused past its lease: every broadcast right, the bystander's chunks intact ($(sed -n 's/bystander: took //p' "$work/bystander.out"))"
else
    bad "rank 0 paused (pid ${pid0:-none}, in doubt ${doubt:-?}, $early ranks broadcast meanwhile, rc $rc, $(right "$work/pause.out") ranks right, bystander rc $brc)"
    cat "$work/bystander.out"; grep -E "WRONG|right|rror|gone" "$work/pause.out" | head -8; tail -4 "$work/pause.out"
fi

echo "test_coll_safety: $pass passed, $fail failed"
[ $fail -eq 0 ]
