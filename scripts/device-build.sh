# Sourced by the device runners: builds the tree into ./_dev from scratch
# (the generated build system is carried along where the machine has no
# libtool: SKIP_AUTORECONF=1), puts a carried .devtools/bin (iproute2,
# built by scripts/devtools.sh) on PATH, and leaves the shell in _dev with $top the source tree and $OUT
# (default ./device-out) created. DEVCC=compiler configures with
# CC=compiler: the lent machine's default gcc is a wrapper whose link
# cannot run lto-wrapper, so configure leaves link-time optimisation out
# there unless DEVCC=/usr/bin/gcc (benchmarks/results/2026-12-02c-lto).
OUT=${OUT:-$(pwd)/device-out}
mkdir -p "$OUT"
top=$(pwd)
[ -d "$top/.devtools/bin" ] && PATH=$top/.devtools/bin:$PATH && export PATH
[ -x configure ] && [ "${SKIP_AUTORECONF:-0}" = 1 ] || autoreconf -fi >/dev/null 2>&1
rm -rf _dev && mkdir -p _dev && cd _dev
"$top/configure" ${DEVCC:+"CC=$DEVCC"} CFLAGS="-O2 -g" --disable-guest-tests >configure.out 2>&1 ||
    { tail -40 configure.out; exit 1; }
make -j"$(nproc)" >make.out 2>&1 || { tail -40 make.out; exit 1; }
