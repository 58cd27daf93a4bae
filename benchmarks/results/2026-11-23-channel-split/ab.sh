#!/bin/sh
# one-off (results/2026-11-23-channel-split): channel primitives old (oldsrc = 9c30463) / new interleaved, then ab-mpi.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; top=$(pwd)
rm -rf _new
build() { [ -x "$2/benchmarks/ivshm-lat" ] && return 0; mkdir -p "$2" && cd "$2" && "$1/configure" CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 && make -j16 >make.out 2>&1; rc=$?; cd "$top"; return $rc; }
build "$top/oldsrc" "$top/_old" && build "$top" "$top/_new" || exit 1
for round in 1 2 3; do for v in old new; do
  "$top/_$v/benchmarks/ivshm-lat" --cpus 2,4 --max 65536 | awk -v v=$v '$1==8||$1==64||$1==1024||$1==4096||$1==65536{print "prim", v, $1, $2}'
done; done
sh oldsrc/bisect.sh
