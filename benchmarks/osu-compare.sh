#!/bin/sh
# Runs a user's OSU Micro-Benchmarks install over ivshmem, vader, vader
# without single copy, and tcp between simulated VMs, in one run:
#   benchmarks/osu-compare.sh (as root) /path/to/osu-micro-benchmarks [--quick]
# (the directory is searched for osu_latency, osu_bw, ...).
set -eu
[ $# -ge 1 ] || { sed -n '2,5p' "$0" >&2; exit 2; }
dir=$1
shift
exec sh "$(dirname "$0")/compare.sh" --osu "$dir" "$@"
