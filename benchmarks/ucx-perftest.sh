#!/bin/sh
# UCX's own figures for the transports UCP weighs against each other when
# it picks lanes (the estimates of mpi-plugin/ucx's iface_query, docs/ucx.md
# "Performance estimates"), measured with ucx_perftest (ucx-utils):
#   ivshmem  between two simulated VMs of one host (the region)
#   tcp      between the same two VMs (the network they also have)
#   posix    two processes in one VM (UCX's shared-memory FIFO)
#   cma      the same, UCX's single copy (put zcopy only: no messages)
# UCT level: am_lat (one-way latency of an active-message ping-pong, short
# and bcopy), am_bw (bcopy messages streamed, bandwidth and message rate);
# cma put_bw zcopy. UCP level: tag_lat and tag_bw with UCX_TLS
# self,ivshmem (two VMs), self,posix,cma (one VM) and self,tcp (two VMs);
# tag_lat also with self,ivshmem,tcp (ucp-ivs+tcp: what a tcp lane's
# progress, one epoll_wait a call, adds; docs/ucx.md, Latency).
# Server on CPU 2, client on CPU 4 in every set-up (compare.sh's pinning).
#
#   ucx-perftest.sh [--iters N] [--rounds N] [--uct-only | --ucp-only]
#
# Output: one line per test and size, "set-up test layout bytes
# median-latency-us mean-latency-us bandwidth-MB/s msg-rate", each the
# median over --rounds runs (default 3) of ucx_perftest's own figures
# (its 50th percentile and average latency, its average bandwidth).
# The UCT tests of ivshmem need memory the transport's memory domain
# allocates or registers (ucx_perftest takes its buffers from the MD):
# without that they fail ("failed to allocate memory") and are left out.
# Needs root (network namespaces) and the transport built
# ($top_builddir/mpi-plugin/ucx/.libs/libuct_ivshmem.so).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/simvm/lib.sh"
. "$here/bench-lib.sh"
iters=20000 rounds=3 levels="uct ucp"
while [ $# -gt 0 ]; do
    case $1 in
    --iters) iters=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --uct-only) levels=uct ;;
    --ucp-only) levels=ucp ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "ucx-perftest.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "ucx-perftest.sh: needs root (network namespaces)" >&2; exit 1; }
command -v ucx_perftest >/dev/null || { echo "ucx-perftest.sh: no ucx_perftest (ucx-utils)" >&2; exit 1; }
UCT_LIB=$top_builddir/mpi-plugin/ucx/.libs/libuct_ivshmem.so
[ -f "$UCT_LIB" ] || { echo "ucx-perftest.sh: $UCT_LIB not built" >&2; exit 1; }
work=$(mktemp -d)
trap '"$SIMVM" down; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
"$SIMVM" up a:0 a:1
simvm_format 512M
AGENT=$top_srcdir/tests/simvm/agent
uuid8=$("$top_builddir/libivshm/tools/ivshm" info file:/dev/shm/ivshm-simhost-a |
    sed -n 's/^uuid *\([0-9a-f]\{8\}\).*/\1/p')
port=13400 failed=""
# compare.sh's pinning: where the machine has more than 4 CPUs
cpu_srv="" cpu_cli=""
[ "$(nproc)" -le 4 ] || cpu_srv="-c 2" cpu_cli="-c 4"

# pt SETUP TEST LAYOUT SIZE ENV... -- ARGS...: one server/client run,
# appends "SETUP TEST LAYOUT SIZE p50 avg bw mr" to $work/SETUP.rN
pt() {
    setup=$1 test=$2 layout=$3 size=$4
    shift 4
    envs=""
    while [ "$1" != -- ]; do envs="$envs $1"; shift; done
    shift
    # a set-up that failed once is not tried again (each failure waits for
    # the server's bound)
    case " $failed " in *" $setup "*) return 0 ;; esac
    # bandwidth tests move at most 256 MiB (at least 200 messages)
    n=$iters w=2000
    case $test in *bw*) n=$((268435456 / size)); [ $n -le "$iters" ] || n=$iters; [ $n -ge 200 ] || n=200
        w=$((n / 10 + 10)) ;; esac
    case $setup in ivshmem|tcp|ucp-ivshmem|ucp-ivs+tcp|ucp-tcp) client_vm=10.200.0.2 ;; *) client_vm=10.200.0.1 ;; esac
    port=$((port + 1))
    # shellcheck disable=SC2086
    "$AGENT" 10.200.0.1 env $envs timeout 20 ucx_perftest -p $port $cpu_srv >"$work/srv.out" 2>&1 &
    spid=$!
    sleep 0.3
    # shellcheck disable=SC2086
    "$AGENT" $client_vm env $envs timeout 20 ucx_perftest 10.200.0.1 -p $port $cpu_cli \
        -t "$test" -s "$size" -n "$n" -w "$w" -f -v "$@" >"$work/cli.out" 2>&1 || true
    wait $spid || true
    line=$(grep -E '^[0-9]+,' "$work/cli.out" | tail -1)
    if [ -n "$line" ]; then
        echo "$line" | awk -F, -v s="$setup" -v t="$test" -v l="$layout" -v b="$size" \
            '{ printf "%s %s %s %s %s %s %s %s\n", s, t, l, b, $2, $3, $5, $7 }' >>"$work/$setup.r$round"
    else
        failed="$failed $setup"
        echo "  ($setup $test $layout $size failed, $setup left out: $(grep -i error "$work/cli.out" "$work/srv.out" | head -2 | tr '\n' ' '))" >&2
    fi
}

IVS="IVSHM_REGION=file:/dev/shm/ivshm-simhost-a LD_PRELOAD=$UCT_LIB"
lat_sizes="8 64 1024 4096"
bw_sizes="64 1024 8192 32768"
ucp_lat_sizes="8 64 1024 4096 16384 65536"
ucp_bw_sizes="8192 65536 1048576 4194304"

bench_machine_note
pinned="server CPU 2, client CPU 4"
[ -n "$cpu_srv" ] || pinned="not pinned (fewer than 5 CPUs)"
echo "# ucx_perftest: $pinned; -n $iters -w 2000; median over $rounds rounds; device region_$uuid8"
echo "# $(ucx_info -v 2>/dev/null | head -1)"
for round in $(seq 1 "$rounds"); do
    printf '  round %s\r' "$round" >&2
    case $levels in *uct*)
    # (the UCT tests need the device: the region's, the loopback-less
    #  veth eth0 of the VMs for tcp, "memory" for UCX's shared memory)
    for s in $lat_sizes; do
        for d in short bcopy; do
            [ $d = short ] && [ "$s" -gt 64 ] && continue # a cell's payload
            pt ivshmem am_lat $d "$s" $IVS -- -x ivshmem -d "region_$uuid8" -D $d
            pt posix am_lat $d "$s" -- -x posix -d memory -D $d
            pt tcp am_lat $d "$s" -- -x tcp -d eth0 -D $d
        done
    done
    for s in $bw_sizes; do
        pt ivshmem am_bw bcopy "$s" $IVS -- -x ivshmem -d "region_$uuid8" -D bcopy
        [ "$s" -le 8192 ] && pt posix am_bw bcopy "$s" -- -x posix -d memory -D bcopy
        [ "$s" -le 8192 ] && pt tcp am_bw bcopy "$s" -- -x tcp -d eth0 -D bcopy
        pt cma put_bw zcopy "$s" -- -x cma -d memory -D zcopy
    done ;;
    esac
    case $levels in *ucp*)
    for s in $ucp_lat_sizes; do
        pt ucp-ivshmem tag_lat - "$s" $IVS UCX_TLS=self,ivshmem UCX_RNDV_THRESH=inf --
        pt ucp-ivs+tcp tag_lat - "$s" $IVS UCX_TLS=self,ivshmem,tcp UCX_RNDV_THRESH=inf --
        pt ucp-sm tag_lat - "$s" UCX_TLS=self,posix,cma --
        pt ucp-tcp tag_lat - "$s" UCX_TLS=self,tcp --
    done
    for s in $ucp_bw_sizes; do
        pt ucp-ivshmem tag_bw - "$s" $IVS UCX_TLS=self,ivshmem UCX_RNDV_THRESH=inf --
        pt ucp-sm tag_bw - "$s" UCX_TLS=self,posix,cma --
        pt ucp-tcp tag_bw - "$s" UCX_TLS=self,tcp --
    done ;;
    esac
done
# the UCP set-ups are not alike in one setting, said with the table
printf '\nUCP set-ups: ucp-ivshmem and ucp-ivs+tcp with UCX_RNDV_THRESH=inf (eager\n'
printf 'through the region at every size), ucp-sm and ucp-tcp with UCX defaults\n'
printf '(ucp-sm: rendezvous by cma single copy above its threshold)\n'
printf '\n%-12s %-8s %-6s %8s %10s %10s %10s %12s\n' set-up test layout bytes "p50 us" "mean us" "MB/s" "msg/s"
cat "$work"/*.r* | awk '
    { k = $1 " " $2 " " $3 " " $4; if (!(k in n)) order[m++] = k
      n[k]++; p[k, n[k]] = $5; a[k, n[k]] = $6; b[k, n[k]] = $7; r[k, n[k]] = $8 }
    function med(arr, k, c,   i, j, t, x) {
        for (i = 1; i <= c; i++) x[i] = arr[k, i] + 0
        for (i = 2; i <= c; i++) for (j = i; j > 1 && x[j - 1] > x[j]; j--) { t = x[j]; x[j] = x[j - 1]; x[j - 1] = t }
        return c % 2 ? x[(c + 1) / 2] : (x[c / 2] + x[c / 2 + 1]) / 2
    }
    END { for (i = 0; i < m; i++) { k = order[i]; split(k, f, " ")
        printf "%-12s %-8s %-6s %8s %10.3f %10.3f %10.1f %12.0f\n", f[1], f[2], f[3], f[4],
            med(p, k, n[k]), med(a, k, n[k]), med(b, k, n[k]), med(r, k, n[k]) } }'
