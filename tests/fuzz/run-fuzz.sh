#!/bin/sh
# Runs the region fuzzer briefly: the standalone driver always (seed corpus
# plus random mutations), the libFuzzer build too when clang built it.
set -eu
b=${top_builddir:-.}
s=${top_srcdir:-.}
"$b/tests/fuzz/fuzz_region" --rounds "${IVSHM_FUZZ_ROUNDS:-20000}" "$s/tests/fuzz/corpus"
if [ -x "$b/tests/fuzz/fuzz_region_lf" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cp "$s"/tests/fuzz/corpus/* "$work/"
    "$b/tests/fuzz/fuzz_region_lf" -max_total_time="${IVSHM_FUZZ_SECONDS:-10}" \
        -rss_limit_mb=2048 -print_final_stats=1 "$work" 2>"$work.log" || {
        tail -40 "$work.log"; rm -f "$work.log"; exit 1; }
    grep -E 'stat::number_of_executed_units' "$work.log" || true
    rm -f "$work.log"
fi
