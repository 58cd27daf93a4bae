#!/bin/sh
# On a device machine (run tool), from the repository root, with a tree of
# the code in _build-dev2/new (git archive, autoreconf -fi): builds it,
# then ivshm-lat with ivshm-lat-tsc.patch (time stamps from the handler's
# entry to the return of progress and of the reply's send) and minpp.c,
# and runs both on CPUs 2 and 4 (CPUS=A,B for others). Output on stdout.
set -eu
cpus=${CPUS:-2,4}
here=$(cd "$(dirname "$0")" && pwd)
ROUNDS=0 sh "$here/device-ab-lat.sh" new # builds _build-dev2/new
cd "$PWD/_build-dev2/new/_b"
w=$(mktemp -d)
cp ../benchmarks/ivshm_perf.c "$w/lat.c"
patch -s "$w/lat.c" <"$here/ivshm-lat-tsc.patch"
gcc -O2 -I. -I../libivshm/include -DHAVE_CONFIG_H "$w/lat.c" -o "$w/lat" -Llibivshm/.libs -livshm $(grep -q 'define HAVE_HWLOC 1' config.h && echo -lhwloc)
lscpu | grep -E 'Model name|MHz' || true
for i in 1 2 3 4 5; do
    LD_LIBRARY_PATH=libivshm/.libs "$w/lat" --max 64 --cpus "$cpus" 2>&1 | grep -E 'handler|raw cache|^ +(1|8|16) '
done
for d in "" "-DTERM" "-DTERM -DZA" "-DTERM -DZA -DTAIL"; do
    gcc -O2 $d "$here/minpp.c" -o "$w/mp"
    for i in 1 2 3; do echo "$d: $("$w/mp" "${cpus%,*}" "${cpus#*,}")"; done
done
