#!/bin/sh
# Builds the tree and takes the figures reported in the closing notes on a
# larger machine: primitive channel latency/bandwidth with their physical
# limits, then the MPI comparison between simulated VMs, and the simulated-
# VM test bed as a check of that machine's Open MPI. Writes into $OUT (or
# ./device-out).
set -u
. "$(dirname "$0")/device-build.sh"
{ uname -a; nproc; lscpu | grep -E 'Model name|Socket|Core|Thread|NUMA node\(s\)'; ompi_info | grep -E 'Open MPI:' ; } >"$OUT/machine.txt" 2>&1
tail -8 configure.out >>"$OUT/machine.txt"
./benchmarks/ivshm-lat --max 4194304 --csv "$OUT/ivshm-lat.csv" >"$OUT/ivshm-lat.txt" 2>&1
./benchmarks/ivshm-bw --max 4194304 --csv "$OUT/ivshm-bw.csv" >"$OUT/ivshm-bw.txt" 2>&1
top_builddir=$PWD top_srcdir=$top sh "$top/tests/simvm/test_simvm.sh" >"$OUT/simvm.txt" 2>&1
if command -v ip >/dev/null; then
    top_builddir=$PWD top_srcdir=$top sh "$top/benchmarks/compare.sh" --benches "latency bw" >"$OUT/compare.txt" 2>&1
else
    top_builddir=$PWD top_srcdir=$top sh "$top/benchmarks/compare.sh" --single-node \
        --benches "${BENCHES:-latency bw bibw}" >"$OUT/compare.txt" 2>&1
fi
tail -n 5 "$OUT"/*.txt
