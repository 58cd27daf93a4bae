#!/bin/sh
# Compares MPI transports between simulated VMs in one run, as ratios:
#   ivshmem      2 VMs on one host, one rank each (btl self,vader,ivshmem,tcp)
#   ivshmem-heap the same with the region heap preloaded (the one switch of
#                docs/heap.md): malloc'd buffers from 64 KiB live in the
#                region and large messages move with one copy (also with
#                the real OSU suite, unmodified)
#   ivshmem-am   the same with buffers from MPI_Alloc_mem, which the ivshmem
#                mpool places in the region: large messages move with one
#                copy (ivshm-osu only: the OSU suite has no such option)
#   vader        2 ranks in one VM (native shared memory, single copy)
#   vader-nocma  the same without single copy: Open MPI 4.1's
#                btl_vader_single_copy_mechanism none; 5.x moved single
#                copy into the smsc framework (cma, knem, xpmem) and its sm
#                BTL (still answering to vader) has no such parameter:
#                --mca smsc ^cma there (Debian 13's 5.0.7 has only cma)
#   tcp          2 VMs, btl self,tcp (the network path)
# Through UCX (pml ucx; where the UCT transport is built and Open MPI has
# pml ucx; not with --single-node), docs/ucx.md:
#   ucx-ivshmem  2 VMs, the UCT transport ivshmem (UCX_TLS=self,ivshmem,
#                libuct_ivshmem.so preloaded, UCX_RNDV_THRESH=inf: the
#                benchmark's buffers are private memory, which no peer can
#                reach, so UCP's rendezvous would move them by its active-
#                message pipeline all the same; ucx-heap measures UCX's
#                rendezvous by get zcopy). No tcp: UCP would give it a lane of
#                the pair and then poll its sockets (one epoll_wait system
#                call) on every progress call, ~0.4 us a round trip that
#                ucx-sm does not pay (docs/ucx.md, Latency);
#                UCX_IVS_TLS=self,ivshmem,tcp measures that cost
#   ucx-heap     the same with the region heap preloaded too, and the BTL
#                ivshmem open (the heap's backend, which names the owner
#                of its blocks): UCX's own rendezvous, by get zcopy
#                between malloc'd buffers
#   ucx-sm       2 ranks in one VM, UCX's own shared memory (UCX_TLS=
#                self,posix,cma): the native reference of the UCX set-ups
# They get their own table, every one (and ivshmem, our BTL under ob1)
# against ucx-sm measured in the same run, medians and means; pinned as
# the others. Not under MPI_THREAD_MULTIPLE (the transport refuses
# multi-threaded workers).
# UCX_BENCH_ENV="VAR=value ..." adds settings to the UCX set-ups (-x).
#
#   compare.sh [--quick] [--benches "latency bw ..."] [--osu DIR] [--out DIR]
#              [--single-node] [--pairs N] [--rounds N] [--setups "LIST"]
#
# --setups picks set-ups from the lists above (default: every one that can
# run here).
#
# --rounds N runs every set-up N times, interleaved (round 1 of each, then
# round 2 ...), and reports per size the median over the rounds of each
# run's median (and of its mean). One job can land well or badly (which
# cache lines the region's cells share, where the kernel puts the
# threads): 8-byte latency under MPI_THREAD_MULTIPLE was 0.20 or 0.26 us
# from one job to the next on the 2-CPU machine, in every set-up.
#
# mlat (multi-pair latency) runs N pairs (default 7) at once: ranks 0..N-1
# in one VM, N..2N-1 in the other (vader: all 2N in one VM), rank k with
# rank k+N; the other benchmarks run one pair. mbwmr (multi-pair message
# rate, as osu_mbw_mr: window 64, M messages/s of all pairs) runs the same
# N pairs, rank k sending to rank k+N.
#
# Under MPI_THREAD_MULTIPLE (ivshm-osu only, set-ups ivshmem,
# ivshmem-heap and vader):
#   latmt   one-thread latency, the job initialised with THREAD_MULTIPLE
#   mtrate  4 threads per rank, thread k of rank 0 ping-pongs with thread
#           k of rank 1 on its own tag: the aggregate message rate
#           (millions of messages a second)
#
# --single-node: no namespaces (machines without iproute2): both ranks in
# one OS, pinned to two cores; ivshmem is forced with btl_ivshmem_same_vm,
# tcp goes over loopback. Same four set-ups, same ratios.
#
# Pinning: the same CPUs in every set-up. Between simulated VMs Open MPI
# sees separate nodes and cannot bind alike, so a wrapper does: one pair on
# CPUs 2 and 4, N pairs with rank r on CPU r + 1,
# mtrate's two ranks on CPUs 2-5 and 6-9 (ivshm-osu puts thread k on the
# k-th); a job needing more CPUs than the machine has is not pinned at all.
# --single-node binds rank r to core r (--bind-to core; mtrate: to cores
# 4r..4r+3).
#
# Benchmarks come from ivshm-osu (this tree) or, with --osu DIR, from a
# user's OSU Micro-Benchmarks install (osu_latency, osu_bw, ...).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/simvm/lib.sh"
. "$here/bench-lib.sh"
SIMVM_TIMEOUT=${RUN_LIMIT:-600} # bound of one benchmark run
quick=0 osu="" out="" single=0 only="" pairs=7 rounds=1 benches="latency bw bibw mlat put get allreduce bcast alltoall"
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1; benches="latency bw" ;;
    --benches) benches=$2; shift ;;
    --osu) osu=$2; shift ;;
    --out) out=$2; shift ;;
    --single-node) single=1 ;;
    --pairs) pairs=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --setups) only=$2; shift ;;
    -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
work=$(mktemp -d)
bench_pin_wrapper "$work/pin"
pin=""
[ $single = 0 ] && pin=$work/pin
if [ -z "$osu" ]; then
    mpicc -O2 "$here/ivshm_osu.c" -o "$work/ivshm-osu"
fi
if [ $single = 1 ]; then
    trap 'rm -rf "$work" /dev/shm/ivshm-compare-$$' EXIT
    trap 'exit 1' INT TERM
    single_node_region /dev/shm/ivshm-compare-$$ 512M
    # one OS, cores pinned
    simvm_mpirun() {
        np=$2
        shift 2
        single_node_mpirun "$np" --bind-to core --map-by "$map" "$@"
    }
else
    [ "$(id -u)" = 0 ] || { echo "compare.sh: needs root (network namespaces)" >&2; exit 1; }
    trap '"$SIMVM" down; rm -rf "$work"' EXIT
    trap 'exit 1' INT TERM
    "$SIMVM" up a:0 a:1
    simvm_format 512M
fi

# the UCX set-ups: pml ucx as tests/simvm/test_ucx.sh runs it
UCT_LIB=$top_builddir/mpi-plugin/ucx/.libs/libuct_ivshmem.so
UCX_PML="--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca osc ucx"
UCX_IVS_TLS=${UCX_IVS_TLS:-self,ivshmem}
have_ucx=0
if [ $single = 0 ] && [ -f "$UCT_LIB" ] && ompi_info 2>/dev/null | grep -q "MCA pml: ucx"; then
    have_ucx=1
fi

osu_prog() {
    case $1 in
    latency) echo osu_latency ;; bw) echo osu_bw ;; bibw) echo osu_bibw ;;
    mlat) echo osu_multi_lat ;; mbwmr) echo osu_mbw_mr ;; put) echo osu_put_latency ;; get) echo osu_get_latency ;;
    *) echo "osu_$1" ;;
    esac
}

run() { # setup bench -> $work/setup.bench (lines "size value")
    setup=$1 prog=$2 tag=$2 map=core
    per=1
    case $prog in mlat|mbwmr) per=$pairs ;; esac
    np=$((2 * per))
    case $setup in
    ivshmem|ivshmem-am|ivshmem-heap) hosts=10.200.0.1:$per,10.200.0.2:$per
        if [ $single = 1 ]; then set -- --mca btl self,ivshmem; else set -- --mca btl self,vader,ivshmem,tcp; fi
        [ "$setup" = ivshmem-heap ] && set -- "$@" -x LD_PRELOAD="$top_builddir/libivshm/.libs/libivshm-heap.so" ;;
    vader) hosts=10.200.0.1:$np; set -- --mca btl self,vader ;;
    vader-nocma) hosts=10.200.0.1:$np
        if [ "${SIMVM_OMPI_MAJOR:-4}" -ge 5 ]; then
            set -- --mca btl self,vader --mca smsc ^cma
        else
            set -- --mca btl self,vader --mca btl_vader_single_copy_mechanism none
        fi ;;
    tcp) hosts=10.200.0.1:$per,10.200.0.2:$per; set -- --mca btl self,tcp ;;
    ucx-ivshmem|ucx-heap) hosts=10.200.0.1:$per,10.200.0.2:$per
        if [ "$setup" = ucx-heap ]; then
            # the heap's blocks go by get/put zcopy (the BTL ivshmem is
            # their backend and names their owner, ivshm/locate.h): UCX's
            # own rendezvous, as --tune ivshmem-ucx-heap runs it
            set -- -x LD_PRELOAD="$UCT_LIB $top_builddir/libivshm/.libs/libivshm-heap.so" \
                -x UCX_TLS="$UCX_IVS_TLS" --mca btl self,ivshmem,tcp
        else
            set -- -x LD_PRELOAD="$UCT_LIB" -x UCX_TLS="$UCX_IVS_TLS" -x UCX_RNDV_THRESH=inf \
                --mca btl self,tcp
        fi ;;
    ucx-sm) hosts=10.200.0.1:$np; set -- -x UCX_TLS=self,posix,cma ;;
    esac
    case $setup in
    ucx-*) SIMVM_PML=$UCX_PML
        # everything through UCX: no region collectives (as
        # tests/simvm/test_ucx.sh); the BTLs as set above (ucx-sm: tcp)
        set -- "$@" --mca coll ^ivshmem
        [ "$setup" = ucx-sm ] && set -- "$@" --mca btl self,tcp
        # a UCX other than the system's (LD_LIBRARY_PATH) reaches the ranks
        [ -z "${LD_LIBRARY_PATH:-}" ] || set -- "$@" -x LD_LIBRARY_PATH
        for v in ${UCX_BENCH_ENV:-}; do set -- "$@" -x "$v"; done ;;
    *) SIMVM_PML="" ;;
    esac
    export SIMVM_PML
    threads=1 args=""
    case $prog in
    latmt) prog=latency args="-T" ;;
    mtrate) threads=4 args="-t 4" map=slot:PE=4 ;;
    esac
    # the pin wrapper learns the threads per rank through the job's
    # environment (between simulated VMs only what -x names arrives)
    set -- "$@" -x PIN_THREADS=$threads
    if [ -n "$osu" ]; then
        [ -z "$args" ] || return 0 # ivshm-osu's thread benchmarks only
        p=$(find "$osu" -name "$(osu_prog "$prog")" -type f | head -1)
        [ -n "$p" ] || { echo "compare.sh: $(osu_prog "$prog") not under $osu" >&2; return 0; }
        set -- "$@" $pin "$p" -m "$MAXB"
    else
        set -- "$@" $pin "$work/ivshm-osu" "$prog" -m "$MAXB" -r "$REPS" $args
        [ "$setup" = ivshmem-am ] && set -- "$@" -a
    fi
    # "bytes median mean" (the OSU suite prints averages only: both)
    simvm_mpirun "$hosts" "$np" "$@" 2>"$work/$setup.$tag.err" |
        awk '/^[0-9]/ {print $1, $2, (NF >= 3 ? $3 : $2)}' >"$work/$setup.$tag" || true
    [ -s "$work/$setup.$tag" ] || { echo "  ($setup $tag failed: $(tail -2 "$work/$setup.$tag.err" | tr '\n' ' '))" >&2; }
}

summary=""
bench_machine_note
if [ $single = 1 ]; then echo "# one OS, rank r bound to core r (mtrate: cores 4r..4r+3)"
else bench_pinning_note; fi
if [ $have_ucx = 1 ]; then
    echo "# UCX set-ups: $(ucx_info -v 2>/dev/null | sed -n 's/^# *//p' | head -1)${LD_LIBRARY_PATH:+ (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)}${UCX_BENCH_ENV:+, $UCX_BENCH_ENV}"
elif [ $single = 0 ]; then
    echo "# no UCX set-ups: $([ -f "$UCT_LIB" ] || echo "$UCT_LIB not built; ")$(ompi_info 2>/dev/null | grep -q "MCA pml: ucx" || echo "Open MPI without pml ucx")"
fi
for bench in $benches; do
    # 8 threads that wait on each other, with fewer CPUs than threads, take
    # milliseconds a message (measured on 2 CPUs): nothing to compare
    if [ "$bench" = mtrate ] && [ "$(nproc)" -lt 10 ]; then
        printf '\n=== mtrate: skipped, needs 10 CPUs (2 ranks of 4 threads on CPUs 2-9), this machine has %s\n' "$(nproc)"
        continue
    fi
    case $bench in
    latency|latmt|mlat|put|get) MAXB=$([ $quick = 1 ] && echo 65536 || echo 4194304); unit=us ;;
    bw|bibw) MAXB=4194304; unit=MB/s ;;
    mtrate) MAXB=$([ $quick = 1 ] && echo 65536 || echo 1048576); unit="M msg/s" ;;
    mbwmr) MAXB=$([ $quick = 1 ] && echo 65536 || echo 1048576); unit="M msg/s (osu_mbw_mr: MB/s)" ;;
    *) MAXB=$([ $quick = 1 ] && echo 65536 || echo 1048576); unit=us ;;
    esac
    REPS=$([ $quick = 1 ] && echo 5 || echo 11)
    printf '\n=== %s (%s, median of %s runs%s)\n' "$bench" "$unit" "$REPS" \
        "$([ "$rounds" = 1 ] || echo "; of $rounds rounds, the median")"
    setups="ivshmem ivshmem-heap ivshmem-am vader vader-nocma tcp"
    [ -n "$osu" ] && setups="ivshmem ivshmem-heap vader vader-nocma tcp"
    case $bench in
    latmt|mtrate) setups="ivshmem ivshmem-heap vader" ;;
    put|get) ;;
    *) [ $have_ucx = 0 ] || setups="$setups ucx-ivshmem ucx-heap ucx-sm" ;;
    esac
    if [ -n "$only" ]; then
        keep=""
        for s in $setups; do case " $only " in *" $s "*) keep="$keep $s" ;; esac; done
        setups=$keep
    fi
    for s in ivshmem ivshmem-heap ivshmem-am vader vader-nocma tcp ucx-ivshmem ucx-heap ucx-sm; do
        : >"$work/$s.$bench"
    done
    for round in $(seq 1 "$rounds"); do
        for s in $setups; do
            printf '  running %-12s round %s\r' "$s" "$round" >&2
            run "$s" "$bench"
            [ ! -f "$work/$s.$bench" ] || mv "$work/$s.$bench" "$work/$s.$bench.r$round"
        done
    done
    for s in $setups; do # per size: medians over the rounds of both columns
        [ -f "$work/$s.$bench.r1" ] || continue
        bench_median_rounds "$work/$s.$bench".r* >"$work/$s.$bench"
    done
    printf '%-9s %10s %10s %10s %10s %10s %10s %9s %9s %9s %9s %9s %9s\n' bytes ivshmem heap am vader nocma tcp \
        "ivs/vader" "heap/vad" "heap/vad~" "am/vader" "ivs/tcp" "ivs/vad~"
    # heap/vad: medians; heap/vad~, ivs/vad~: means (OSU's averages)
    awk '
        FILENAME ~ /\/ivshmem\./ {a[$1] = $2; am_[$1] = $3; if (!($1 in seen)) {seen[$1] = 1; order[n++] = $1}}
        FILENAME ~ /ivshmem-heap/ {h[$1] = $2; hm[$1] = $3}
        FILENAME ~ /ivshmem-am/ {m[$1] = $2}
        FILENAME ~ /\/vader\./ {b[$1] = $2; bm[$1] = $3}
        FILENAME ~ /nocma/ {c[$1] = $2}
        FILENAME ~ /tcp/ {d[$1] = $2}
        function r(x, y) { return (y > 0 && x != "") ? sprintf("%.2f", x / y) : "-" }
        END {
            for (i = 0; i < n; i++) { k = order[i]
                printf "%-9s %10s %10s %10s %10s %10s %10s %9s %9s %9s %9s %9s %9s\n", k, a[k], (k in h ? h[k] : "-"),
                    (k in m ? m[k] : "-"), b[k], (k in c ? c[k] : "-"), (k in d ? d[k] : "-"), r(a[k], b[k]), r(h[k], b[k]), r(hm[k], bm[k]),
                    r(m[k], b[k]), (d[k] > 0 ? sprintf("%.3f", a[k] / d[k]) : "-"), r(am_[k], bm[k]) }
        }' "$work/ivshmem.$bench" "$work/ivshmem-heap.$bench" "$work/ivshmem-am.$bench" "$work/vader.$bench" \
        "$work/vader-nocma.$bench" "$work/tcp.$bench" | tee "$work/table.$bench"
    if [ -n "$out" ]; then
        mkdir -p "$out"
        sed 's/  */,/g' "$work/table.$bench" >"$out/$bench.csv"
    fi
    # through UCX: every set-up against UCX's own shared memory in one VM
    if [ -s "$work/ucx-sm.$bench" ]; then
        printf '\n--- through UCX, against ucx-sm (UCX posix+cma in one VM); ~ = means\n'
        printf '%-9s %10s %10s %10s %10s %9s %9s %9s %9s %9s %9s\n' bytes ucx-ivs ucx-heap ucx-sm ob1-ivs \
            "ivs/sm" "ivs/sm~" "heap/sm" "heap/sm~" "ob1/sm" "ob1/sm~"
        awk '
            FILENAME ~ /\/ucx-sm\./ {s[$1] = $2; sm[$1] = $3; if (!($1 in seen)) {seen[$1] = 1; order[n++] = $1}}
            FILENAME ~ /\/ucx-ivshmem\./ {a[$1] = $2; am[$1] = $3}
            FILENAME ~ /\/ucx-heap\./ {h[$1] = $2; hm[$1] = $3}
            FILENAME ~ /\/ivshmem\./ {o[$1] = $2; om[$1] = $3}
            function v(arr, k) { return (k in arr) ? arr[k] : "-" }
            function r(x, y) { return (y > 0 && x != "") ? sprintf("%.2f", x / y) : "-" }
            END {
                for (i = 0; i < n; i++) { k = order[i]
                    printf "%-9s %10s %10s %10s %10s %9s %9s %9s %9s %9s %9s\n", k, v(a, k), v(h, k), s[k], v(o, k),
                        r(a[k], s[k]), r(am[k], sm[k]), r(h[k], s[k]), r(hm[k], sm[k]), r(o[k], s[k]), r(om[k], sm[k]) }
            }' "$work/ucx-sm.$bench" "$work/ucx-ivshmem.$bench" "$work/ucx-heap.$bench" "$work/ivshmem.$bench" |
            tee "$work/ucxtable.$bench"
        [ -z "$out" ] || sed 's/  */,/g' "$work/ucxtable.$bench" >"$out/$bench-ucx.csv"
        # the targets of the UCX transport (issue 33): with the heap,
        # latency <= 1.05 x ucx-sm at 8 B-4 KiB, bandwidth >= 1.00 x from
        # 8 KiB; every size, medians and means apart; the transport without
        # the heap is reported alike
        case $bench in
        latency|mlat|bw|bibw)
            summary="$summary$(awk -v bench="$bench" '
                {
                    lat = (bench == "latency" || bench == "mlat")
                    if ($1 < 8 || (lat && $1 > 4096) || (!lat && $1 < 8192)) next
                    for (col = 6; col <= 9; col++) {
                        if ($col == "-") continue
                        x = $col + 0; ok = lat ? (x <= 1.05) : (x >= 1.00)
                        tot[col]++; if (ok) met[col]++; else miss[col] = miss[col] " " $1 ":" $col
                    }
                }
                END {
                    split("ucx-ivshmem / ucx-sm, medians|ucx-ivshmem / ucx-sm, means|ucx-heap / ucx-sm, medians|ucx-heap / ucx-sm, means", name, "|")
                    for (col = 6; col <= 9; col++) if (tot[col])
                        printf "%s through UCX, %s (target %s): met at %d of %d sizes%s\n", bench, name[col - 5],
                            ((bench == "latency" || bench == "mlat") ? "<= 1.05 at 8 B-4 KiB" : ">= 1.00 from 8 KiB"),
                            met[col], tot[col], (met[col] == tot[col] ? ": met" : "; MISSED at" miss[col])
                }' "$work/ucxtable.$bench")
" ;;
        esac
    fi
    # the point-to-point targets, with the one switch (ivshmem-heap) against
    # vader, every size, medians and means apart
    case $bench in
    latency|mlat|bw|bibw)
        summary="$summary$(awk -v bench="$bench" '
            $3 != "-" && $5 > 0 {
                lat = (bench == "latency" || bench == "mlat")
                if (lat && $1 < 8) next
                if (!lat && $1 < 8192) next
                bound = lat ? ($1 <= 4096 ? 1.05 : 1.00) : 1.00
                for (col = 9; col <= 10; col++) {
                    x = $col + 0; ok = lat ? (x <= bound) : (x >= bound)
                    tot[col]++; if (ok) met[col]++; else miss[col] = miss[col] " " $1 ":" $col
                }
            }
            END {
                for (col = 9; col <= 10; col++) if (tot[col])
                    printf "%s, region heap against vader, %s (target %s): met at %d of %d sizes%s\n", bench,
                        (col == 9 ? "medians" : "means"),
                        ((bench == "latency" || bench == "mlat") ? "<= 1.05 at 8 B-4 KiB, <= 1.00 from 8 KiB" : ">= 1.00 from 8 KiB"),
                        met[col], tot[col], (met[col] == tot[col] ? ": met" : "; MISSED at" miss[col])
            }' "$work/table.$bench")
" ;;
    esac
    # the targets under MPI_THREAD_MULTIPLE: one thread's latency
    # within 1.10x vader's, 4 threads' message rate at least 0.90x; plain
    # and with the switch, every size, medians and means apart
    case $bench in
    latmt|mtrate)
        summary="$summary$(awk -v bench="$bench" '
            function chk(name, q) {
                if (q == "-" || q == "") return
                ok = bench == "latmt" ? q + 0 <= 1.10 : q + 0 >= 0.90
                tot[name]++; if (ok) met[name]++; else miss[name] = miss[name] " " $1 ":" q
            }
            {
                chk("ivshmem / vader medians", $8); chk("ivshmem / vader means", $13)
                chk("ivshmem-heap / vader medians", $9); chk("ivshmem-heap / vader means", $10)
            }
            END {
                split("ivshmem / vader medians|ivshmem / vader means|ivshmem-heap / vader medians|ivshmem-heap / vader means", k, "|")
                for (i = 1; i <= 4; i++) if (tot[k[i]])
                    printf "%s under MPI_THREAD_MULTIPLE, %s (target %s): met at %d of %d sizes%s\n", bench, k[i],
                        (bench == "latmt" ? "<= 1.10" : ">= 0.90"), met[k[i]], tot[k[i]],
                        (met[k[i]] == tot[k[i]] ? ": met" : "; MISSED at" miss[k[i]])
            }' "$work/table.$bench")
" ;;
    esac
    # the small-message targets (issue 31): at 1 B-2 KiB, bandwidth,
    # bidirectional bandwidth and the N-pair message rate >= 1.00 x vader,
    # one- and N-pair latency <= 1.00 x; plain and with the region heap,
    # medians and means apart
    case $bench in
    latency|mlat|bw|bibw|mbwmr)
        summary="$summary$(awk -v bench="$bench" '
            function chk(name, q) {
                if (q == "-" || q == "") return
                ok = lat ? q + 0 <= 1.00 : q + 0 >= 1.00
                tot[name]++; if (ok) met[name]++; else miss[name] = miss[name] " " $1 ":" q
            }
            $1 >= 1 && $1 <= 2048 && $5 > 0 {
                lat = (bench == "latency" || bench == "mlat")
                chk("ivshmem / vader medians", $8); chk("ivshmem / vader means", $13)
                chk("ivshmem-heap / vader medians", $9); chk("ivshmem-heap / vader means", $10)
            }
            END {
                lat = (bench == "latency" || bench == "mlat")
                split("ivshmem / vader medians|ivshmem / vader means|ivshmem-heap / vader medians|ivshmem-heap / vader means", k, "|")
                for (i = 1; i <= 4; i++) if (tot[k[i]])
                    printf "%s at 1 B-2 KiB, %s (target %s): met at %d of %d sizes%s\n", bench, k[i],
                        (lat ? "<= 1.00" : ">= 1.00"), met[k[i]], tot[k[i]],
                        (met[k[i]] == tot[k[i]] ? ": met" : "; MISSED at" miss[k[i]])
            }' "$work/table.$bench")
" ;;
    esac
    case $bench in
    latency)
        summary="$summary$(awk '$1 == 8 && $5 > 0 && $7 > 0 {
            printf "8-byte latency: ivshmem %s us = %.2f x vader (target <= 1.10: %s), %.3f x tcp (target <= 0.10: %s)\n",
                $2, $2 / $5, ($2 / $5 <= 1.10 ? "met" : "MISSED"), $2 / $7, ($2 / $7 <= 0.10 ? "met" : "MISSED") }' "$work/table.$bench")
" ;;
    bw)
        summary="$summary$(awk '{ if ($2 > a) a = $2; if ($4 + 0 > m) m = $4; if ($5 > b) b = $5; if ($7 > d) d = $7; if ($3 + 0 > h) h = $3 }
            END { if (b > 0) printf "peak bandwidth: ivshmem %.0f MB/s = %.2f x vader (target >= 0.70: %s), %.1f x tcp\n",
                a, a / b, (a / b >= 0.70 ? "met" : "MISSED"), (d > 0 ? a / d : 0)
                  if (b > 0 && m > 0) printf "peak bandwidth, MPI_Alloc_mem buffers: ivshmem %.0f MB/s = %.2f x vader (target >= 1.00: %s)\n",
                m, m / b, (m / b >= 1.00 ? "met" : "MISSED")
                  if (b > 0 && h > 0) printf "peak bandwidth, malloc buffers with the region heap: ivshmem %.0f MB/s = %.2f x vader (target >= 1.00: %s)\n",
                h, h / b, (h / b >= 1.00 ? "met" : "MISSED") }' "$work/table.$bench")
" ;;
    esac
done
printf '\n=== summary\n%s' "$summary"
