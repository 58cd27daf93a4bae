#!/bin/sh
# The main job: installs the packages, builds libivshm and runs the demo.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
sh scripts/install-deps.sh
# configured once; every run brings the build up to date (a stale build
# would demonstrate old code)
mkdir -p _build-demo
if [ ! -f _build-demo/Makefile ] || [ "${IVSHM_REBUILD:-0}" = 1 ]; then
    autoreconf -fi >/dev/null 2>&1
    (cd _build-demo && "$top/configure" CFLAGS="-O2 -g" >configure.out 2>&1) || {
        tail -30 _build-demo/configure.out; exit 1; }
fi
(cd _build-demo && make -j"$(nproc)" >make.out 2>&1) || { tail -30 _build-demo/make.out; exit 1; }
B=$top/_build-demo
R=/dev/shm/ivshm-demo
trap 'rm -f "$R"' EXIT
trap 'exit 1' INT TERM
echo "=== primitive channel latency between two processes (as two VMs)"
"$B/libivshm/tools/ivshm" format "file:$R" --size 64M --force
"$B/benchmarks/ivshm-lat" --region "file:$R" --max 4096 | grep -E '^#|^ +(8|64|4096) '
echo "=== MPI between simulated VMs: ivshmem vs vader (native) vs tcp (network)"
top_builddir=$B top_srcdir=$top sh "$top/benchmarks/compare.sh" --quick
