#!/bin/sh
# On a device machine (run tool), from the repository root: builds the
# trees _build-dev2/TREE (generated build system carried), then runs their
# ivshm-lat in turn, ROUNDS rounds (default 8), on CPUs 2 and 4 (CPUS=A,B
# for others): per run the raw ping-pong and 1, 8, 16 B. ROUNDS=0 builds only.
#   [ROUNDS=N] sh device-ab-lat.sh TREE...
set -eu
n=${ROUNDS:-8} cpus=${CPUS:-2,4}
for t in "$@"; do
    d=$PWD/_build-dev2/$t
    (mkdir -p "$d/_b" && cd "$d/_b" && { [ -f libivshm/.libs/libivshm.so ] ||
        { ../configure CC=/usr/bin/gcc CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 &&
          make -j8 >make.out 2>&1; }; } || { tail -20 make.out; exit 1; }) &
done
wait
lat() { # TREE
    d=$PWD/_build-dev2/$1/_b
    LD_LIBRARY_PATH=$d/libivshm/.libs "$d/benchmarks/.libs/ivshm-lat" --max 64 --cpus "$cpus" 2>&1 |
        awk -v t="$1" '/raw cache-line/{r=$6} /^ +(1|8|16) /{x = x " " $1 "B " $2 " (" $6 "x)"} END{print t ": raw " r x}'
}
i=0
while [ $i -lt "$n" ]; do
    for t in "$@"; do lat "$t"; done
    i=$((i + 1))
done
