#!/bin/sh
# Collectives at N ranks, every set-up in one run, as ratios against native:
#   ivshmem      one rank per simulated VM, all VMs on one host: coll
#                ivshmem (algorithms in the region)
#   ivshmem-heap the same with the region heap preloaded (docs/heap.md):
#                malloc'd buffers from 64 KiB are region memory, and large
#                alltoalls are read from the peers' send buffers in place
#   ivshmem-p2p  the same with coll ivshmem off: coll tuned over the BTL's
#                point-to-point messages (what jobs had before)
#   native       all N ranks in one VM: coll tuned over vader
#   tcp          one rank per VM over the network path
# The collective targets, per size: ivshmem <= 0.8 x native for barrier, bcast,
# reduce, allreduce and allgather, <= 1.0 x native for alltoall, printed
# met/missed for medians and for means (OSU reports means), for ivshmem and
# for ivshmem-heap.
#
#   coll-compare.sh [--np N] [--benches "barrier bcast ..."] [--max BYTES]
#                   [--reps R] [--setups "ivshmem native ..."]
#                   [--single-node] [--osu DIR] [--out DIR]
#
# Pinning: rank r runs on CPU r in every set-up (taskset in a wrapper, as
# the simulated VMs are separate "nodes" to Open MPI); with more ranks than
# CPUs nothing is pinned and ranks yield when idle.
# --single-node: no namespaces (machines without iproute2): every set-up in
# one OS, ivshmem's point-to-point forced with btl_ivshmem_same_vm and vader
# left out of the ivshmem set-ups (between VMs it reaches nobody).
# --osu DIR: the real OSU collectives (osu_allreduce, ...) instead of
# ivshm-osu; they print averages only (median and mean columns equal).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/simvm/lib.sh"
np=15 benches="barrier bcast reduce allreduce allgather alltoall" maxb=65536
reps=5 single=0 osu="" out="" setups="ivshmem ivshmem-heap ivshmem-p2p native tcp"
while [ $# -gt 0 ]; do
    case $1 in
    --np) np=$2; shift ;;
    --benches) benches=$2; shift ;;
    --max) maxb=$2; shift ;;
    --reps) reps=$2; shift ;;
    --setups) setups=$2; shift ;;
    --single-node) single=1 ;;
    --osu) osu=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "coll-compare.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
work=$(mktemp -d)
[ -n "$osu" ] || mpicc -O2 "$here/ivshm_osu.c" -o "$work/ivshm-osu"
ncpu=$(nproc)
pin=yes
[ "$np" -gt "$ncpu" ] && pin=no
# rank r on CPU r, whichever "node" Open MPI thinks it is on
cat >"$work/pin" <<'EOF'
#!/bin/sh
exec taskset -c "$OMPI_COMM_WORLD_RANK" "$@"
EOF
chmod +x "$work/pin"

region=/dev/shm/ivshm-coll-$$
if [ $single = 1 ]; then
    trap 'rm -rf "$work" "$region"' EXIT
    trap 'exit 1' INT TERM
    single_node_region "$region" 1G
    # one OS; the pin wrapper places the ranks
    simvm_mpirun() {
        n=$2
        shift 2
        single_node_mpirun "$n" --oversubscribe --bind-to none "$@"
    }
else
    [ "$(id -u)" = 0 ] || { echo "coll-compare.sh: needs root (network namespaces)" >&2; exit 1; }
    trap '"$SIMVM" down >/dev/null 2>&1; rm -rf "$work"' EXIT
    trap 'exit 1' INT TERM
    specs="" i=0
    while [ $i -lt "$np" ]; do specs="$specs a:$i"; i=$((i + 1)); done
    # shellcheck disable=SC2086
    "$SIMVM" up $specs >/dev/null
    simvm_format 1G
fi
one_per_vm="" i=1
while [ $i -le "$np" ]; do one_per_vm="$one_per_vm${one_per_vm:+,}10.200.0.$i:1"; i=$((i + 1)); done

run() { # setup bench -> $work/setup.bench ("bytes median mean")
    setup=$1 bench=$2 hosts=$one_per_vm
    # one rank per VM: vader reaches none of the others (in one OS it
    # would, so --single-node leaves it out, as compare.sh does)
    btls=self,vader,ivshmem,tcp
    [ $single = 1 ] && btls=self,ivshmem
    case $setup in
    ivshmem) set -- --mca btl $btls ;;
    ivshmem-heap) set -- --mca btl $btls -x LD_PRELOAD="$top_builddir/libivshm/.libs/libivshm-heap.so" ;;
    ivshmem-p2p) set -- --mca btl $btls --mca coll ^ivshmem ;;
    native) hosts=10.200.0.1:$np; set -- --mca btl self,vader --mca coll ^ivshmem ;;
    tcp) set -- --mca btl self,tcp --mca coll ^ivshmem ;;
    esac
    [ $pin = no ] && set -- "$@" --mca mpi_yield_when_idle 1
    [ $pin = yes ] && set -- "$@" "$work/pin"
    if [ -n "$osu" ]; then
        p=$(find "$osu" -name "osu_$bench" -type f | head -1)
        [ -n "$p" ] || { echo "coll-compare.sh: osu_$bench not under $osu" >&2; return 0; }
        set -- "$@" "$p"
        [ "$bench" != barrier ] && set -- "$@" -m "1:$maxb"
    else
        set -- "$@" "$work/ivshm-osu" "$bench" -m "$maxb" -r "$reps"
    fi
    SIMVM_TIMEOUT=${RUN_LIMIT:-300} simvm_mpirun "$hosts" "$np" "$@" 2>"$work/$setup.$bench.err" |
        awk '/^[0-9]/ {print $1, $2, (NF >= 3 ? $3 : $2)}' >"$work/$setup.$bench" || true
    # osu_barrier prints the latency alone: size 0
    [ "$bench" = barrier ] && [ -n "$osu" ] && awk 'NF == 2 || NF == 3 {print 0, $NF, $NF; exit}' \
        "$work/$setup.$bench" >"$work/t" && mv "$work/t" "$work/$setup.$bench"
    [ -s "$work/$setup.$bench" ] || echo "  ($setup $bench failed: $(tail -2 "$work/$setup.$bench.err" | tr '\n' ' '))" >&2
}

{
    echo "# coll-compare.sh --np $np --max $maxb --reps $reps$([ $single = 1 ] && echo " --single-node")${osu:+ --osu $osu}"
    echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
    echo "# $(ompi_info 2>/dev/null | sed -n 's/^ *Open MPI: */Open MPI /p' | head -1); pinning: $([ $pin = yes ] && echo "rank r on CPU r" || echo "none (more ranks than CPUs; ranks yield)")"
    echo "# times in us: median of $reps runs (med) and mean of all (mean); ratios against native"
} | tee "$work/head"
for bench in $benches; do
    for s in ivshmem ivshmem-heap ivshmem-p2p native tcp; do
        : >"$work/$s.$bench"
        case " $setups " in *" $s "*) ;; *) continue ;; esac
        printf '  %s %s\r' "$bench" "$s" >&2
        run "$s" "$bench"
    done
    target=0.8
    [ "$bench" = alltoall ] && target=1.0
    printf '\n=== %s, %d ranks (target: ivshmem <= %s x native at every size)\n' "$bench" "$np" "$target"
    awk -v target="$target" -v bench="$bench" '
        FILENAME ~ /\/ivshmem\./ {a[$1] = $2; am[$1] = $3; order[n++] = $1}
        FILENAME ~ /ivshmem-p2p/ {p[$1] = $2}
        FILENAME ~ /ivshmem-heap/ {h[$1] = $2; hm[$1] = $3}
        FILENAME ~ /native/ {b[$1] = $2; bm[$1] = $3}
        FILENAME ~ /tcp/ {d[$1] = $2}
        function r(x, y) { return (y > 0 && x != "") ? x / y : -1 }
        function f(v) { return v < 0 ? "-" : sprintf("%.2f", v) }
        END {
            printf "%-8s %9s %9s %9s %9s %9s %9s %8s %8s %8s %8s %8s %8s\n", "bytes", "ivshmem", "heap",
                "p2p", "native", "tcp", "ivs~mean", "ivs/nat", "mean", "heap/nat", "mean", "p2p/nat", "tcp/nat"
            for (i = 0; i < n; i++) { k = order[i]
                x = r(a[k], b[k]); y = r(am[k], bm[k]); u = r(h[k], b[k]); v = r(hm[k], bm[k])
                printf "%-8s %9s %9s %9s %9s %9s %9s %8s %8s %8s %8s %8s %8s\n", k, a[k], h[k], p[k], b[k], d[k],
                    am[k], f(x), f(y), f(u), f(v), f(r(p[k], b[k])), f(r(d[k], b[k]))
                if (x >= 0) { tot++; if (x <= target) met++; else miss = miss " " k ":" f(x) }
                if (y >= 0) { totm++; if (y <= target) metm++; else missm = missm " " k ":" f(y) }
                if (u >= 0) { toth++; if (u <= target) meth++; else missh = missh " " k ":" f(u) }
                if (v >= 0) { tothm++; if (v <= target) methm++; else misshm = misshm " " k ":" f(v) }
            }
            printf "%s, ivshmem against native, medians: met at %d of %d sizes%s\n", bench, met, tot, (met == tot ? ": met" : "; MISSED at" miss)
            printf "%s, ivshmem against native, means: met at %d of %d sizes%s\n", bench, metm, totm, (metm == totm ? ": met" : "; MISSED at" missm)
            if (toth) {
                printf "%s with the region heap against native, medians: met at %d of %d sizes%s\n", bench, meth, toth, (meth == toth ? ": met" : "; MISSED at" missh)
                printf "%s with the region heap against native, means: met at %d of %d sizes%s\n", bench, methm, tothm, (methm == tothm ? ": met" : "; MISSED at" misshm)
            }
        }' "$work/ivshmem.$bench" "$work/ivshmem-heap.$bench" "$work/ivshmem-p2p.$bench" "$work/native.$bench" "$work/tcp.$bench" |
        tee "$work/table.$bench"
done
if [ -n "$out" ]; then
    mkdir -p "$out"
    cat "$work/head" "$work"/table.* >"$out/coll-compare-$np.txt"
    for b in $benches; do cp "$work/table.$b" "$out/$b-$np.txt"; done
fi
