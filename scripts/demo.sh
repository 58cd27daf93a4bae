#!/bin/sh
# The main job: installs the packages, builds libivshm and runs the demo.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
sh scripts/install-deps.sh
if [ ! -x "$top/_build-demo/libivshm/tools/ivshm" ] || [ "${IVSHM_REBUILD:-0}" = 1 ]; then
    autoreconf -fi >/dev/null 2>&1
    mkdir -p _build-demo
    (cd _build-demo && "$top/configure" CFLAGS="-O2 -g" >configure.out 2>&1 && make -j"$(nproc)" >make.out 2>&1) || {
        tail -30 _build-demo/configure.out _build-demo/make.out; exit 1; }
fi
B=$top/_build-demo
R=/dev/shm/ivshm-demo
trap 'rm -f "$R"' EXIT
echo "=== a region, as an admin formats it on the host"
"$B/libivshm/tools/ivshm" format "file:$R" --size 64M --force
echo "=== channel latency between two processes on two cores (as two VMs)"
"$B/benchmarks/ivshm-lat" --region "file:$R" --max 65536
echo "=== channel bandwidth"
"$B/benchmarks/ivshm-bw" --region "file:$R" --max 4194304
"$B/libivshm/tools/ivshm" check "file:$R"
