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
"$B/libivshm/tools/ivshm" format "file:$R" --size 64M --force
"$B/libivshm/tools/ivshm" info "file:$R"
"$B/libivshm/tools/ivshm" check "file:$R"
rm -f "$R"
