#!/bin/sh
# Builds guest-driver/ivshmem.ko against the guest kit's kernel headers
# (see guest-kit.sh), with compiler warnings as errors and no modpost
# warnings. Usage: build-module.sh KIT_DIR SRC_DIR OUT_DIR
set -u
kit=$1 src=$2 out=$3
mkdir -p "$out"
cp "$src/guest-driver/ivshmem.c" "$src/guest-driver/ivshmem_uapi.h" "$src/guest-driver/Kbuild" "$out/"
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$kit/kdir" M="$out" KCFLAGS=-Werror modules \
    >"$out/build.log" 2>&1 || { cat "$out/build.log"; echo "FAIL: module build"; exit 1; }
if grep "WARNING: modpost" "$out/build.log"; then echo "FAIL: modpost warnings"; exit 1; fi
exit 0
