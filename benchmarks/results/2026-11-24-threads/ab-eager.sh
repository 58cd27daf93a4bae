#!/bin/sh
# one-off (results/2026-11-24-threads): ivshmem's eager limit and BTL list
# between two simulated VMs. Set-ups: ivshmem (btl self,vader,ivshmem,tcp)
# with btl_ivshmem_eager_limit (and rndv_eager_limit) 4096 (the default
# until 134061c),
# 16384, 32768, 32896 (32 KiB and room for ob1's header) and 65536 (ivs-e16k,
# ivs-e32k, ivs-e32kh, ivs-e64k); ivs-notcp (btl self,vader,ivshmem); the same with the
# region heap preloaded (heap, heap-e16k; heap-min1m: only blocks from
# 1 MiB in the region); ivsdef: the component's own eager limit, with
# -dm1 / -dm2 an experiment's IVSHM_DEMOTE (CLDEMOTE of sent fragments,
# and of cells); vader (both ranks in one VM).
# Benchmarks: latency, latmt (latency -T: MPI_THREAD_MULTIPLE) and bw (one
# pair on CPUs 2 and 4) and mtrate -t 4
# (rank 0's threads on CPUs 2-5, rank 1's on 6-9), to MAXB (64 KiB), ROUNDS rounds
# interleaved. Lines: bench, set-up, round, bytes, median, mean. Run from
# the repository root after benchmarks/device-build.sh with top_srcdir and
# top_builddir exported.
set -u
. "$top_srcdir/tests/simvm/lib.sh"
"$SIMVM" up a:0 a:1 >/dev/null
trap '"$SIMVM" down' EXIT INT TERM
simvm_format 512M
mpicc -O2 -pthread "$top_srcdir/benchmarks/ivshm_osu.c" -o /tmp/osu
cat >/tmp/pinw <<'PIN'
#!/bin/sh
r=$OMPI_COMM_WORLD_RANK
[ "$(nproc)" -gt 9 ] || exec "$@" # not pinned where CPUs 2-9 are missing
[ "$PIN_THREADS" = 4 ] && exec taskset -c $((2 + 4 * r))-$((5 + 4 * r)) "$@"
exec taskset -c $((2 + 2 * r)) "$@"
PIN
chmod +x /tmp/pinw
HEAP=$top_builddir/libivshm/.libs/libivshm-heap.so
run() { # SETUP BENCH
    s=$1 b=$2
    case $s in
    vader) set -- 10.200.0.1:2 2 --mca btl self,vader ;;
    *) btl=self,vader,ivshmem,tcp
       [ "$s" = ivs-notcp ] && btl=self,vader,ivshmem
       set -- 10.200.0.1:1,10.200.0.2:1 2 --mca btl $btl
       case $s in *e16k) e=16384 ;; *e32k) e=32768 ;; *e32kh) e=32896 ;; *e64k) e=65536 ;; ivsdef*) e="" ;; *) e=4096 ;; esac
       [ -z "$e" ] || set -- "$@" --mca btl_ivshmem_eager_limit $e --mca btl_ivshmem_rndv_eager_limit $e
       case $s in *-dm1) set -- "$@" -x IVSHM_DEMOTE=1 ;; *-dm2) set -- "$@" -x IVSHM_DEMOTE=2 ;; esac
       case $s in heap*) set -- "$@" -x LD_PRELOAD=$HEAP ;; esac
       case $s in *min1m) set -- "$@" -x IVSHM_HEAP_MIN=1048576 ;; esac ;;
    esac
    case $b in
    latency) set -- "$@" -x PIN_THREADS=1 /tmp/pinw /tmp/osu latency -m ${MAXB:-65536} -r 7 ;;
    latmt) set -- "$@" -x PIN_THREADS=1 /tmp/pinw /tmp/osu latency -m ${MAXB:-65536} -r 7 -T ;;
    mtrate) set -- "$@" -x PIN_THREADS=4 /tmp/pinw /tmp/osu mtrate -t 4 -m ${MAXB:-65536} -r 5 ;;
    bw) set -- "$@" -x PIN_THREADS=1 /tmp/pinw /tmp/osu bw -m ${MAXB:-65536} -r 5 ;;
    esac
    simvm_mpirun "$@" >/tmp/run.out 2>&1
    awk -v b="$b" -v l="$s" -v r=$round '/^[0-9]/ {print b, l, "r" r, $1, $2, $3}' /tmp/run.out
    grep -q "^[0-9]" /tmp/run.out || { echo "FAILED: $b $s"; tail -5 /tmp/run.out; }
}
for round in $(seq 1 "${ROUNDS:-3}"); do
    for b in ${BENCHES:-latency mtrate}; do
        for s in ${SETUPS:-ivshmem ivs-e16k ivs-e32k heap heap-e16k vader}; do run $s $b; done
    done
done
