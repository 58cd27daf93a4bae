#!/bin/sh
# Runs the fuzzers briefly: the region fuzzer (region metadata) and the
# channel fuzzer (directory entries, control header and grants, FIFO cells,
# fast boxes, fragment return counters, put/get handles). The standalone
# driver always (seed corpus plus random mutations), the libFuzzer builds
# too when clang built them.
set -eu
b=${top_builddir:-.}
s=${top_srcdir:-.}
"$b/tests/fuzz/fuzz_region" --rounds "${IVSHM_FUZZ_ROUNDS:-20000}" "$s/tests/fuzz/corpus"
"$b/tests/fuzz/fuzz_chan" --rounds "${IVSHM_FUZZ_CHAN_ROUNDS:-3000}" "$s/tests/fuzz/corpus-chan"
for t in region chan; do
    [ -x "$b/tests/fuzz/fuzz_${t}_lf" ] || continue
    corpus=corpus; [ $t = chan ] && corpus=corpus-chan
    work=$(mktemp -d)
    cp "$s"/tests/fuzz/$corpus/* "$work/"
    "$b/tests/fuzz/fuzz_${t}_lf" -max_total_time="${IVSHM_FUZZ_SECONDS:-10}" \
        -rss_limit_mb=2048 -print_final_stats=1 "$work" 2>"$work.log" || {
        tail -40 "$work.log"; rm -rf "$work" "$work.log"; exit 1; }
    grep -E 'stat::number_of_executed_units' "$work.log" || true
    rm -rf "$work" "$work.log"
done
