#!/bin/sh
# Reproduces the evaluation of Zhang et al., "Can Inter-VM Shmem Benefit MPI
# Applications on SR-IOV Based Virtualized InfiniBand Clusters?" (Euro-Par
# 2014) on this stack, every transport measured in the same run:
#   ivshmem   one rank per simulated VM, VMs on one host (btl ivshmem;
#             collectives through the region with coll ivshmem)
#   native    all ranks in one VM (Open MPI's vader shared memory)
#   tcp       one rank per simulated VM over the network path (btl tcp)
# Dimensions: two-sided latency and bandwidth (1 B - 4 MiB), multi-pair
# latency (7 pairs), one-sided put/get latency and bandwidth, Barrier, Bcast,
# Reduce, Allreduce, Allgather and Alltoall across 2, 4, 8 and 15 VMs, and an
# application kernel (3-D FFT transpose, 7-point stencil) split into compute
# and communication, at every VM count (VM scalability).
#
#   paper-eval.sh [--quick] [--single-node] [--parts "pt2pt coll app"]
#                 [--vms "2 4 8 15"] [--out DIR] [--ivshmem-only]
#
# Writes DIR/results-PART.csv (bench,setup,vms,size,value,unit), then
# paper-report.py turns all of them into DIR/report.md and DIR/*.png.
# --quick: the short mode CI runs on 2 cores (2 VMs, small sizes).
# --single-node: no network namespaces (machines without iproute2): all
# ranks in one OS, pinned to cores; ivshmem forced with btl_ivshmem_same_vm,
# tcp over loopback.
# --ivshmem-only: the ivshmem set-up gets no tcp to fall back on, so a run
# that the region route does not carry fails rather than measuring tcp
# (tests/simvm/test_paper_quick.sh).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/simvm/lib.sh"
quick=0 single=0 only=0 parts="pt2pt coll app" vms="2 4 8 15" out=""
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 ;;
    --single-node) single=1 ;;
    --ivshmem-only) only=1 ;;
    --parts) parts=$2; shift ;;
    --vms) vms=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "paper-eval.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[ $quick = 1 ] && [ "$vms" = "2 4 8 15" ] && vms="2"
out=${out:-$(pwd)/paper-eval-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
ncores=$(nproc)
maxvms=0
for n in $vms; do [ "$n" -gt "$maxvms" ] && maxvms=$n; done
[ $quick = 0 ] && [ "$maxvms" -lt 14 ] && echo "note: multi-pair latency needs 14 VMs; it runs with what --vms allows" >&2

echo "== building the benchmarks" >&2
mpicc -O2 "$here/ivshm_osu.c" -o "$work/ivshm-osu"
mpicc -O2 "$here/ivshm_app.c" -o "$work/ivshm-app" -lm

region=/dev/shm/ivshm-paper-$$
if [ $single = 1 ]; then
    trap 'rm -rf "$work" "$region"' EXIT
    trap 'exit 1' INT TERM
    single_node_region "$region" 1G
else
    [ "$(id -u)" = 0 ] || { echo "paper-eval.sh: needs root (network namespaces)" >&2; exit 1; }
    trap '"$SIMVM" down >/dev/null 2>&1; rm -rf "$work"' EXIT
    trap 'exit 1' INT TERM
    specs=""
    i=0; while [ $i -lt "$maxvms" ]; do specs="$specs a:$i"; i=$((i + 1)); done
    # shellcheck disable=SC2086
    "$SIMVM" up $specs >/dev/null
    simvm_format 1G
fi

# a run that hangs is reported and skipped, never stalls the whole runner
SIMVM_TIMEOUT=${RUN_LIMIT:-240}

# more busy-polling ranks than cores: they must yield
yield_for() { [ "$1" -gt "$ncores" ] && echo "--mca mpi_yield_when_idle 1" || true; }

# mpi SETUP NP PROGRAM ARGS...: one run with SETUP's transports
mpi() {
    setup=$1 np=$2
    shift 2
    case $setup in
    ivshmem) btl="--mca btl self,vader,ivshmem$([ $only = 1 ] || echo ,tcp)" ;;
    native) btl="--mca btl self,vader --mca coll ^ivshmem" ;;
    tcp) btl="--mca btl self,tcp --mca coll ^ivshmem" ;;
    esac
    if [ $single = 1 ]; then
        [ $setup = ivshmem ] && btl="--mca btl self,ivshmem"
        bind="--bind-to core --map-by core"
        [ "$np" -gt "$ncores" ] && bind="--bind-to none --oversubscribe"
        # shellcheck disable=SC2046,SC2086
        single_node_mpirun "$np" $bind $(yield_for "$np") $btl "$@"
    else
        if [ $setup = native ]; then
            hosts=10.200.0.1:$np
        else
            hosts=""; i=1
            while [ $i -le "$np" ]; do hosts="$hosts${hosts:+,}10.200.0.$i:1"; i=$((i + 1)); done
        fi
        # shellcheck disable=SC2046,SC2086
        simvm_mpirun "$hosts" "$np" $(yield_for "$np") $btl "$@"
    fi
}

# ---- the plan: one line per run ("part bench np maxbytes") ----
plan=$work/plan
: >"$plan"
for p in $parts; do
    case $p in
    pt2pt)
        m=$([ $quick = 1 ] && echo 65536 || echo 4194304)
        for b in latency bw; do echo "pt2pt $b 2 $m" >>"$plan"; done
        if [ $quick = 0 ]; then
            for b in put get putbw getbw; do echo "pt2pt $b 2 $m" >>"$plan"; done
            pairs=$([ "$maxvms" -ge 14 ] && echo 14 || echo $((maxvms / 2 * 2)))
            [ "$pairs" -ge 2 ] && echo "pt2pt mlat $pairs 65536" >>"$plan"
        fi ;;
    coll)
        m=$([ $quick = 1 ] && echo 4096 || echo 65536)
        for n in $vms; do
            for b in barrier bcast reduce allreduce allgather alltoall; do echo "coll $b $n $m" >>"$plan"; done
        done ;;
    app)
        for n in $vms; do
            for k in fft stencil; do echo "app $k $n 0" >>"$plan"; done
        done ;;
    *) echo "paper-eval.sh: unknown part $p" >&2; exit 2 ;;
    esac
done
total=$(($(wc -l <"$plan") * 3))
reps=$([ $quick = 1 ] && echo 3 || echo 5)

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "command: paper-eval.sh $([ $quick = 1 ] && echo --quick) $([ $single = 1 ] && echo --single-node) --parts \"$parts\" --vms \"$vms\""
    echo "mode: $([ $single = 1 ] && echo "single node (ranks pinned to cores, ivshmem forced with btl_ivshmem_same_vm, tcp over loopback)" || echo "simulated VMs (network + UTS namespaces, tcp over veth)")"
    echo "cores: $ncores"
    [ -n "$SIMVM_ENV_NOTES" ] && echo "unset for the runs (set by the machine's environment):$SIMVM_ENV_NOTES"
    lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1 | sed 's/^/cpu: /'
    ompi_info 2>/dev/null | sed -n 's/^ *Open MPI: */open mpi: /p' | head -1
    uname -sr | sed 's/^/kernel: /'
} >"$out/machine-$(echo "$parts" | tr ' ' '-').txt"
# rows are appended as they come: an interrupted run keeps what it measured
for p in $parts; do echo "bench,setup,vms,size,value,unit" >"$out/results-$p.csv"; done
done_runs=0 t_start=$(date +%s)
while read -r part bench np maxb; do
    for setup in ivshmem native tcp; do
        done_runs=$((done_runs + 1))
        el=$(($(date +%s) - t_start))
        eta=$([ $done_runs -gt 1 ] && echo "$((el * (total - done_runs + 1) / (done_runs - 1)))s left" || echo "")
        printf '\r[%3d/%3d] %-5s %-9s %-8s %2s VMs  %4ds %-14s' "$done_runs" "$total" "$part" "$bench" "$setup" "$np" "$el" "$eta" >&2
        csv=$out/results-$part.csv
        err=$work/err
        if [ "$part" = app ]; then
            n=$([ $quick = 1 ] && { [ "$bench" = fft ] && echo 32 || echo 24; } || echo 0)
            args="$bench -r $reps"
            [ "$n" -gt 0 ] && args="$args -n $n"
            # shellcheck disable=SC2086
            if mpi "$setup" "$np" "$work/ivshm-app" $args </dev/null >"$work/o" 2>"$err"; then
                awk -v s="$setup" -v v="$np" '/^(fft|stencil) / {
                    printf "app-%s-total,%s,%s,0,%s,s\napp-%s-compute,%s,%s,0,%s,s\napp-%s-comm,%s,%s,0,%s,s\n",
                        $1, s, v, $3, $1, s, v, $4, $1, s, v, $5 }' "$work/o" >>"$csv"
            else
                printf '\n  (%s %s %s VMs failed: %s)\n' "$bench" "$setup" "$np" "$(tail -2 "$err" | tr '\n' ' ')" >&2
            fi
        else
            unit=us
            case $bench in bw|bibw|putbw|getbw) unit=MB/s ;; esac
            if mpi "$setup" "$np" "$work/ivshm-osu" "$bench" -m "$maxb" -r "$reps" </dev/null >"$work/o" 2>"$err"; then
                awk -v b="$bench" -v s="$setup" -v v="$np" -v u="$unit" \
                    '/^[0-9]/ { printf "%s,%s,%s,%s,%s,%s\n", b, s, v, $1, $2, u }' "$work/o" >>"$csv"
            else
                printf '\n  (%s %s %s VMs failed: %s)\n' "$bench" "$setup" "$np" "$(tail -2 "$err" | tr '\n' ' ')" >&2
            fi
        fi
    done
done <"$plan"
printf '\n' >&2
echo "paper-eval: $(cat "$out"/results-*.csv | grep -vc '^bench') measurements in $out" >&2
if command -v python3 >/dev/null; then
    python3 "$here/paper-report.py" "$out"
fi
