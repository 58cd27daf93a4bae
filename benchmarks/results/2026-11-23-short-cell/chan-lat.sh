#!/bin/sh
# one-off (results/2026-11-23-short-cell): the channel alone (ivshm-lat,
# one-way latency, batch medians, cores 0 and 1), before (_old, 56-byte
# header in every cell) and after (_new, short cells), 3 rounds
# interleaved. Run from the repository root like ab-short.sh.
set -u
. benchmarks/results/2026-11-23-short-cell/ab-build.sh
for r in 1 2 3; do
    for v in _old _new; do
        echo "== $r $v"
        "./$v/benchmarks/ivshm-lat" --max 256 --iters 200000 --cpus 0,1 2>&1 | tail -n 11
    done
done
