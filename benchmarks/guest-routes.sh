#!/bin/sh
# The component's two routes measured in real guests, in one run: four QEMU
# guests (TCG, soft-RoCE) as two "hosts" of two VMs each, as in
# tests/qemu/test_qemu_mpi.sh. Each figure is ivshm-osu (latency, bw;
# median of 3) between one pair of ranks of a 4-rank job (-P):
#   same host   (vm1-vm2): region  vs  verbs loopback (btl_ivshmem_region none)
#                          vs tcp
#   other host  (vm1-vm3): verbs   vs  tcp
# This is the paper's comparison (IVShmem vs SR-IOV) with soft-RoCE in the
# place of SR-IOV. TCG makes absolute times meaningless: read the ratios.
# Needs root and what the guest test needs (~10 min on 2 cores).
# Usage: benchmarks/guest-routes.sh BUILD_DIR [OUT_DIR]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
b=$(cd "${1:?usage: guest-routes.sh BUILD_DIR [OUT_DIR]}" && pwd)
out=${2:-guest-routes-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
echo "guest-routes: booting four guests (log: $out/run.log)"
if ! IVSHM_GUEST_ROLE=bench IVSHM_BENCH_LOG="$out/console.log" top_builddir="$b" \
        top_srcdir="$top" sh "$top/tests/qemu/test_qemu_mpi.sh" >"$out/run.log" 2>&1; then
    tail -30 "$out/run.log"
    echo "guest-routes: the guest run failed"
    exit 1
fi
grep '^BENCH' "$out/console.log" >"$out/bench.txt"
awk '
{ v[$2 " " $3 " " $4 " " $5] = $6; if (!($4 " " $5 in seen)) { seen[$4 " " $5] = 1; order[n++] = $4 " " $5 } }
function r(a, b) { return (a > 0 && b > 0) ? sprintf("%.2f", a / b) : "-" }
function g(k) { return (k in v) ? v[k] : "-" }
END {
    last = ""
    for (i = 0; i < n; i++) {
        split(order[i], kb, " "); bench = kb[1]; bytes = kb[2]
        if (bench != last) {
            unit = bench == "latency" ? "us" : "MB/s"
            printf "\n%s (%s)\n", bench, unit
            printf "%9s | %9s %9s %9s | %9s %9s | %12s %12s\n", "bytes", "region", "verbs-lb", "tcp", "verbs", "tcp", "region/vlb", "verbs/tcp"
            printf "%9s | %29s | %19s |\n", "", "same host (vm1-vm2)", "other host (vm1-vm3)"
            last = bench
        }
        rg = g("routes 0,1 " bench " " bytes); vl = g("verbs-only 0,1 " bench " " bytes)
        t1 = g("tcp 0,1 " bench " " bytes); vb = g("routes 0,2 " bench " " bytes)
        t2 = g("tcp 0,2 " bench " " bytes)
        printf "%9s | %9s %9s %9s | %9s %9s | %12s %12s\n", bytes, rg, vl, t1, vb, t2, r(rg, vl), r(vb, t2)
    }
    print "\nratios: latency below 1 and bandwidth above 1 favour region (over verbs loopback) and verbs (over tcp)"
}' "$out/bench.txt" | tee "$out/table.txt"
