#!/bin/sh
# The paper-evaluation runner's short mode (benchmarks/paper-eval.sh
# --quick), end to end on simulated VMs: every planned measurement exists
# for all three set-ups, the report holds the ratio tables and the target
# verdicts, and the plots are drawn when gnuplot is installed. The ivshmem
# set-up runs without tcp (--ivshmem-only), so a component that stepped
# aside leaves its rows missing; its small-message latency must be below
# tcp's and its bandwidth a real one. Finer timings are not judged here (2
# noisy cores); the figures come from the 16-core runs in
# benchmarks/results/.
set -u
. "$(dirname "$0")/lib.sh"
simvm_require
command -v python3 >/dev/null || simvm_skip "no python3"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
trap 'exit 1' INT TERM
pass=0 fail=0

sh "$top_srcdir/benchmarks/paper-eval.sh" --quick --ivshmem-only --out "$out" 2>"$out/progress" >"$out/stdout"
rc=$?
[ $rc -eq 0 ] && ok "runner exit 0" || { bad "runner exit $rc"; tail -20 "$out/progress"; }
grep -q '\[  1/' "$out/progress" && ok "progress display" || bad "no progress display"

# every (bench, setup) of the quick plan produced rows
for b in latency bw barrier bcast reduce allgather allreduce alltoall app-fft-comm app-stencil-comm; do
    for s in ivshmem native tcp; do
        n=$(cat "$out"/results-*.csv | grep -c "^$b,$s,2,")
        [ "$n" -gt 0 ] && ok "$b $s: $n rows" || bad "$b $s: no rows"
    done
done
# values are positive numbers
awk -F, 'NR > 1 && FNR > 1 && !($5 > 0) { bad++ } END { exit bad > 0 }' "$out"/results-*.csv &&
    ok "all values positive" || bad "a value is not a positive number"

# sane numbers: through the region, an 8-byte message is faster than
# through tcp (0.6 against 5-20 us on 2 cores), and the bandwidth at the
# largest size is a real one (2 GB/s; tcp over veth comes close at 64 KiB,
# so the two are not compared)
lat() { awk -F, -v s="$1" '$1 == "latency" && $2 == s && $4 == 8 { print $5; exit }' "$out"/results-*.csv; }
bw() { awk -F, -v s="$1" '$1 == "bw" && $2 == s { v = $5 } END { print v }' "$out"/results-*.csv; }
li=$(lat ivshmem) lt=$(lat tcp) bi=$(bw ivshmem)
if [ -n "$li" ] && [ -n "$lt" ] && awk -v a="$li" -v b="$lt" 'BEGIN { exit !(a > 0 && a < b) }'; then
    ok "8-byte latency: ivshmem $li us below tcp $lt us"
else
    bad "8-byte latency: ivshmem '$li' us, tcp '$lt' us"
fi
if [ -n "$bi" ] && awk -v a="$bi" 'BEGIN { exit !(a > 100) }'; then
    ok "ivshmem bandwidth at the largest size: $bi MB/s"
else
    bad "ivshmem bandwidth at the largest size: '$bi' MB/s, not above 100"
fi

r=$out/report.md
[ -s "$r" ] && ok "report written" || bad "no report"
for h in "## Machine and command" "## Targets" "## Two-sided, 2 VMs" "## Collectives" "## Application kernel"; do
    grep -q "^$h" "$r" && ok "report has '$h'" || bad "report lacks '$h'"
done
# the target verdicts are computed, not blank
grep -Eq '\| (met|\*\*missed\*\*) \|$' "$r" && ok "target verdicts" || bad "no target verdicts"
grep -Eq '^\| 8 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$' "$r" &&
    ok "latency ratio row for 8 bytes" || bad "no latency ratio row for 8 bytes"
if command -v gnuplot >/dev/null; then
    for p in latency bw allreduce app-fft; do
        [ -s "$out/$p.png" ] && ok "$p.png" || bad "$p.png missing"
    done
fi
echo "test_paper_quick: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
