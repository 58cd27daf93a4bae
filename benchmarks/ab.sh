#!/bin/sh
# A/B of builds or settings between two simulated VMs, interleaved rounds:
# round 1 of every set-up, then round 2, ... so that a machine that drifts
# bends every set-up alike; round r starts with set-up r (their order
# rotates), so that no set-up always runs in the same place of a round.
# Prints one line per measurement
#   bench set-up rN bytes median mean
# and then, per benchmark and size, the median over the rounds of every
# set-up and its ratio to the reference set-up (the last one, or --ref),
# and the share of job pairs (one of the set-up, one of the reference) in
# which the set-up's figure was the higher: jobs fall into fast and slow
# modes on some machines, and this share tells a difference from them.
#
#   ab.sh [--rounds N] [--benches "latency bw ..."] [--max BYTES] [--reps R]
#         [--pairs N] [--ref NAME] [--region-size SIZE]
#         --setup NAME 'WORDS' [--setup NAME 'WORDS' ...]
#
# WORDS, split on blanks, say what a set-up is; any other word goes to
# mpirun as it stands (e.g. --mca btl_ivshmem_eager_limit 16384, -x VAR=1):
#   build=DIR   the build tree whose component, heap and ivshm-lat it runs
#               (default $top_builddir; build an older revision with
#               git worktree add /tmp/old REV, then configure and make there)
#   vader       both ranks (all pairs) in one VM: native shared memory
#   notcp       btl self,vader,ivshmem (default self,vader,ivshmem,tcp)
#   heap        the region heap preloaded (malloc'd buffers in the region)
#
# Benchmarks: latency, latmt (latency under MPI_THREAD_MULTIPLE), bw, bibw,
# mlat (N pairs), mbwmr (N pairs, window 64), put, get, mtrate (4 threads per rank: needs 10 CPUs), from
# ivshm-osu; prim is the channel primitive (the build's ivshm-lat, two
# processes on CPUs 2 and 4, no MPI; it reports medians of batches, so its
# mean column repeats the median; with it come four more tables: the raw
# cache-line ping-pong of the same runs, in ns, over 64 line pairs in turn
# and on one pair, and each size's ratio to each, "prim-x-raw" and
# "prim-x-1pair").
#
# Example (two eager limits and vader, three rounds):
#   top_builddir=$PWD/_build-release benchmarks/ab.sh --rounds 3 \
#       --setup e4k '--mca btl_ivshmem_eager_limit 4096' \
#       --setup e32k '--mca btl_ivshmem_eager_limit 32768' --setup vader vader
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/simvm/lib.sh"
. "$here/bench-lib.sh"
SIMVM_TIMEOUT=${RUN_LIMIT:-600} # bound of one benchmark run
rounds=3 benches=latency maxb=65536 reps=7 pairs=7 ref="" rsize=512M
names="" nsetups=0
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift ;;
    --benches) benches=$2; shift ;;
    --max) maxb=$2; shift ;;
    --reps) reps=$2; shift ;;
    --pairs) pairs=$2; shift ;;
    --ref) ref=$2; shift ;;
    --region-size) rsize=$2; shift ;;
    --setup)
        [ $# -ge 3 ] || { echo "ab.sh: --setup NAME 'WORDS'" >&2; exit 2; }
        nsetups=$((nsetups + 1))
        names="$names $2"
        eval "setup_$nsetups=\$3"
        shift 2 ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) echo "ab.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[ "$nsetups" -ge 1 ] || { echo "ab.sh: no --setup given" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "ab.sh: needs root (network namespaces)" >&2; exit 1; }
[ -n "$ref" ] || ref=${names##* }
work=$(mktemp -d)
trap '"$SIMVM" down >/dev/null 2>&1; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
bench_pin_wrapper "$work/pin"
mpicc -O2 -pthread "$here/ivshm_osu.c" -o "$work/ivshm-osu"
"$SIMVM" up a:0 a:1 >/dev/null
simvm_format "$rsize"

run() { # INDEX NAME BENCH ROUND -> lines on stdout
    i=$1 name=$2 bench=$3 round=$4
    eval "words=\$setup_$i"
    build=$top_builddir one_vm=0 btl=self,vader,ivshmem,tcp heap=0 extra=""
    for w in $words; do
        case $w in
        build=*) build=${w#build=} ;;
        vader) one_vm=1 ;;
        notcp) btl=self,vader,ivshmem ;;
        heap) heap=1 ;;
        *) extra="$extra $w" ;;
        esac
    done
    if [ "$bench" = prim ]; then
        r=$("$SIMVM" regions | head -1)
        "$build/libivshm/tools/ivshm" format "file:$r" --size "$rsize" --force >/dev/null
        cpus=""
        [ "$(nproc)" -le 4 ] || cpus="--cpus 2,4"
        # shellcheck disable=SC2086
        "$build/benchmarks/ivshm-lat" --region "file:$r" $cpus --max "$maxb" 2>"$work/err" |
            awk -v b="$bench" -v s="$name" -v r="$round" '
                # a build before the walk (its raw line without "line
                # pairs") measured one pair only: its ratio is x 1 pair
                /^# raw cache-line ping-pong/ {
                    if (/line pairs/) print "raw-pingpong", s, "r" r, 8, $6, $6
                    else { one = 1; print "raw-1pair", s, "r" r, 8, $6, $6 } }
                /^# raw ping-pong, one pair/ {print "raw-1pair", s, "r" r, 8, $7, $7}
                /^ *[0-9]/ {print b, s, "r" r, $1, $2, $2
                            if (one) print "prim-x-1pair", s, "r" r, $1, $6, $6
                            else { print "prim-x-raw", s, "r" r, $1, $6, $6
                                   print "prim-x-1pair", s, "r" r, $1, $7, $7 } }'
        return 0
    fi
    per=1 threads=1 args=""
    case $bench in
    mlat|mbwmr) per=$pairs ;;
    latmt) args="latency -T" ;;
    mtrate) threads=4 args="mtrate -t 4" ;;
    esac
    [ -n "$args" ] || args=$bench
    np=$((2 * per))
    if [ $one_vm = 1 ]; then
        set -- 10.200.0.1:$np "$np" --mca btl self,vader
    else
        set -- 10.200.0.1:$per,10.200.0.2:$per "$np" --mca btl "$btl"
    fi
    [ $heap = 0 ] || set -- "$@" -x LD_PRELOAD="$build/libivshm/.libs/libivshm-heap.so"
    saved_builddir=$top_builddir
    top_builddir=$build # simvm_mpirun loads the component from there
    # each set-up's region is formatted by its own build's tool: builds of
    # two layout versions refuse each other's regions (and would measure tcp)
    [ $one_vm = 1 ] || simvm_format "$rsize"
    # shellcheck disable=SC2086
    simvm_mpirun "$@" $extra -x PIN_THREADS=$threads "$work/pin" \
        "$work/ivshm-osu" $args -m "$maxb" -r "$reps" >"$work/out" 2>&1 || true
    top_builddir=$saved_builddir
    grep -q '^[0-9]' "$work/out" || { echo "# FAILED: $bench $name round $round: $(tail -3 "$work/out" | tr '\n' ' ')" >&2; return 0; }
    awk -v b="$bench" -v s="$name" -v r="$round" '/^[0-9]/ {print b, s, "r" r, $1, $2, (NF >= 3 ? $3 : $2)}' "$work/out"
}

bench_machine_note
bench_pinning_note
echo "# ab.sh --rounds $rounds --benches \"$benches\" --max $maxb --reps $reps, reference $ref"
i=0
for name in $names; do
    i=$((i + 1)); eval "echo \"# set-up $name: \$setup_$i\""
done
nth() { _n=$1; shift; eval "echo \${$_n}"; } # nth N WORDS...
for round in $(seq 1 "$rounds"); do
    for bench in $benches; do
        # round r starts at set-up r (mod their number): no set-up always
        # runs first or right after another one
        k=0
        while [ $k -lt $nsetups ]; do
            i=$(( (round - 1 + k) % nsetups + 1 ))
            # shellcheck disable=SC2086
            run $i "$(nth $i $names)" "$bench" "$round" | tee -a "$work/all"
            k=$((k + 1))
        done
    done
done
# per bench and size: the median over rounds of each set-up's median and
# mean, and the ratios to the reference
# prim also gives the raw cache-line ping-pong of that run (over 64 line
# pairs in turn) and each size's ratio to it (the issue's "x raw
# ping-pong"), and the same for the ping-pong on one pair (raw-1pair)
case " $benches " in *" prim "*) benches="$benches raw-pingpong prim-x-raw raw-1pair prim-x-1pair" ;; esac
for bench in $benches; do
    echo
    echo "=== $bench: median over $rounds rounds (median / mean), then / $ref"
    for name in $names; do
        awk -v b="$bench" -v s="$name" '$1 == b && $2 == s {print $4, $5, $6}' "$work/all" >"$work/$name.$bench.rounds"
        bench_median_rounds "$work/$name.$bench.rounds" >"$work/$name.$bench"
    done
    awk -v names="$names" -v ref="$ref" -v dir="$work" -v bench="$bench" '
        BEGIN {
            n = split(names, s, " ")
            for (i = 1; i <= n; i++) {
                f = dir "/" s[i] "." bench
                while ((getline line < f) > 0) {
                    split(line, x, " ")
                    if (!(x[1] in seen)) { seen[x[1]] = 1; order[k++] = x[1] }
                    med[s[i], x[1]] = x[2]; mean[s[i], x[1]] = x[3]
                }
            }
            printf "%-9s", "bytes"
            for (i = 1; i <= n; i++) printf " %17s", s[i]
            for (i = 1; i <= n; i++) if (s[i] != ref) printf " %15s", s[i] "/" ref
            printf "\n"
            for (j = 0; j < k; j++) {
                z = order[j]; printf "%-9s", z
                for (i = 1; i <= n; i++)
                    printf " %17s", ((s[i], z) in med) ? med[s[i], z] "/" mean[s[i], z] : "-"
                for (i = 1; i <= n; i++) if (s[i] != ref) {
                    a = med[s[i], z]; r = med[ref, z]; am = mean[s[i], z]; rm = mean[ref, z]
                    printf " %15s", (a != "" && r > 0 && rm > 0) ? sprintf("%.2f/%.2f", a / r, am / rm) : "-"
                }
                printf "\n"
            }
        }'
    # the jobs of a machine fall into modes (a job is fast or slow as a
    # whole, every set-up alike), which medians of a few rounds hide: per
    # size, the share of (set-up job, reference job) pairs in which the
    # set-up's figure is the higher one (ties count half); for rates above
    # 0.50 is faster, for times below 0.50
    echo "--- $bench: share of job pairs above $ref (rounds x rounds pairs)"
    awk -v names="$names" -v ref="$ref" -v bench="$bench" '
        $1 == bench { k = $2 SUBSEP $4; n[k]++; v[k, n[k]] = $5
                      if (!($4 in seen)) { seen[$4] = 1; order[m++] = $4 } }
        END {
            ns = split(names, s, " ")
            printf "%-9s", "bytes"
            for (i = 1; i <= ns; i++) if (s[i] != ref) printf " %15s", s[i] ">" ref
            printf "\n"
            for (j = 0; j < m; j++) {
                z = order[j]; printf "%-9s", z; r = ref SUBSEP z
                for (i = 1; i <= ns; i++) if (s[i] != ref) {
                    a = s[i] SUBSEP z; w = 0
                    for (x = 1; x <= n[a]; x++) for (y = 1; y <= n[r]; y++)
                        w += v[a, x] > v[r, y] ? 1 : (v[a, x] == v[r, y] ? 0.5 : 0)
                    printf " %15s", n[a] && n[r] ? sprintf("%.2f", w / (n[a] * n[r])) : "-"
                }
                printf "\n"
            }
        }' "$work/all"
done
