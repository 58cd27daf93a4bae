#!/bin/sh
# The whole test suite, from a fresh Debian 12 machine (as root):
# installs the packages, builds with -Werror, runs `make check`, compiles
# the Open MPI components against Open MPI 5.x, runs the tests again under
# ASan+UBSan (and the threaded ones under TSan, the region heap under
# UBSan), and `make distcheck`.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
sh scripts/install-deps.sh
autoreconf -fi >/dev/null 2>&1 || autoreconf -fi
jobs=$(nproc 2>/dev/null || echo 2)

run_build() {
    name=$1; shift
    echo "=== build: $name"
    rm -rf "$top/_build-$name"
    mkdir -p "$top/_build-$name"
    cd "$top/_build-$name"
    "$top/configure" --enable-werror "$@" >configure.out 2>&1 || { cat configure.out; exit 1; }
    tail -8 configure.out
    make -j"$jobs" >make.out 2>&1 || { cat make.out; exit 1; }
    if ! make -j"$jobs" check; then
        for f in $(find . -name '*.log' -path '*tests*'); do echo "--- $f"; tail -50 "$f"; done
        exit 1
    fi
    cd "$top"
}

# the QEMU guest tests must run here, not skip
IVSHM_REQUIRE_GUESTS=1 run_build release CFLAGS="-O2 -g"
# the components also compile against Open MPI 5.x (Debian 13's headers)
echo "=== Open MPI 5.x compile check"
rc=0
sh scripts/check-ompi5.sh || rc=$?
[ $rc = 0 ] || [ $rc = 77 ] || exit 1
# The sanitizer builds leave out the MPI component: an instrumented
# component cannot be loaded into uninstrumented MPI processes.
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_build asan --disable-shared --without-ompi --disable-guest-tests CFLAGS="-O1 -g $SAN" LDFLAGS="$SAN"
# ThreadSanitizer: the threaded channel tests (one mapping shared by
# threads, so every access is visible to the sanitizer) and the BTL's lock
echo "=== build: tsan"
rm -rf "$top/_build-tsan" && mkdir -p "$top/_build-tsan" && cd "$top/_build-tsan"
"$top/configure" --enable-werror --disable-shared --without-ompi --disable-guest-tests CFLAGS="-O1 -g -fsanitize=thread" \
    LDFLAGS="-fsanitize=thread" >configure.out 2>&1 || { cat configure.out; exit 1; }
make -j"$jobs" tests/unit/test_chan tests/unit/test_btl_lock >make.out 2>&1 || { cat make.out; exit 1; }
TSAN_OPTIONS="halt_on_error=1" ./tests/unit/test_chan
TSAN_OPTIONS="halt_on_error=1" ./tests/unit/test_btl_lock
cd "$top"
# UBSan over the region heap (libivshm-heap.so, a shared object that
# replaces malloc): ASan and TSan bring a malloc of their own, so the heap
# and its test get a shared build with UBSan alone
echo "=== build: ubsan (region heap)"
rm -rf "$top/_build-ubsan" && mkdir -p "$top/_build-ubsan" && cd "$top/_build-ubsan"
"$top/configure" --enable-werror --without-ompi --disable-guest-tests \
    CFLAGS="-O1 -g -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
    LDFLAGS="-fsanitize=undefined" >configure.out 2>&1 || { cat configure.out; exit 1; }
make -j"$jobs" tests/mp/test_heap >make.out 2>&1 || { cat make.out; exit 1; }
UBSAN_OPTIONS=print_stacktrace=1 ./tests/mp/test_heap
cd "$top"
if [ "${IVSHM_SKIP_DISTCHECK:-0}" != 1 ]; then
    echo "=== make distcheck"
    (cd "$top/_build-release" && make -j"$jobs" distcheck >distcheck.out 2>&1) || {
        tail -60 "$top/_build-release/distcheck.out"; exit 1; }
    grep -E "archives ready|^libivshm-.*tar.gz" "$top/_build-release/distcheck.out" || true
fi
total_pass=0 total_fail=0
for d in "$top"/_build-release "$top"/_build-asan; do
    p=$(sed -n 's/^# PASS: *//p' "$d/test-suite.log" | head -1)
    f=$(sed -n 's/^# FAIL: *//p' "$d/test-suite.log" | head -1)
    total_pass=$((total_pass + ${p:-0})); total_fail=$((total_fail + ${f:-0}))
done
echo "=== all test builds passed"
echo "$total_pass passed, $total_fail failed"
