#!/bin/sh
# The whole test suite, from a fresh Debian 12 machine (as root):
# installs the packages, builds with -Werror, runs `make check`, compiles
# the Open MPI components against Open MPI 5.x, runs the tests again under
# ASan+UBSan (and the threaded ones under TSan, the region heap under
# UBSan), `make distcheck`, and the mutation checks of the tests
# (scripts/mutate.py: each listed bug must be caught).
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
t0=$(date +%s)
sh scripts/install-deps.sh
autoreconf -fi >/dev/null 2>&1 || autoreconf -fi
jobs=$(nproc 2>/dev/null || echo 2)
stage() { # NAME: a stage begins; the seconds since this command began
    echo "=== $* (at $(($(date +%s) - t0)) s)"
}

# Every tier is listed at the end as ran or not run (with the reason). A
# tier this machine can run (the README's: root, Open MPI, QEMU, network
# namespaces, Debian's archive) that did not run fails the whole command:
# a SKIP is accepted only where this script expects it, for the build that
# expects it; the release build runs with IVSHM_REQUIRE_ALL=1, which turns
# every skip of a test into a FAIL with its reason.
tiers=$(mktemp)
trap 'rm -f "$tiers" "$tiers.res"' EXIT
trap 'exit 1' INT TERM
tier() { # NAME STATUS: one line of the closing summary
    printf '  %-26s %s\n' "$1" "$2" >>"$tiers"
}
total_pass=0 total_fail=0 total_skip=0
summary() {
    stage "tiers"
    cat "$tiers"
    total_skip=$(grep -c ' not run' "$tiers" || true)
    echo "$total_pass passed, $total_fail failed, $total_skip skipped"
}
die() { # WHY: ends the run as failed, with the summary so far
    echo "FAIL: $*"
    tier "failed" "$*"
    total_fail=$((total_fail + 1))
    summary
    exit 1
}

# tier_of TEST: the tier a test of `make check` belongs to (its key)
tier_of() {
    case $1 in
    tests/unit/*) echo unit ;;
    tests/mp/*) echo mp ;;
    tests/fuzz/*) echo fuzz ;;
    tests/cli/*) echo cli ;;
    tests/server/*) echo server ;;
    tests/simvm/*) echo simvm ;;
    tests/qemu/test_qemu_mpi*|tests/qemu/test_libvirt_mpi*) echo qemu-mpi ;;
    tests/qemu/test_guest_admin*) echo guest-admin ;;
    tests/qemu/*) echo qemu ;;
    tests/pkg/*) echo pkg ;;
    *) echo other ;;
    esac
}
tier_name() { # KEY
    case $1 in
    unit) echo "unit (cmocka)" ;; mp) echo "multi-process" ;; cli) echo "CLI/docs" ;;
    simvm) echo "simulated-VM MPI" ;; qemu) echo "QEMU guests" ;; qemu-mpi) echo "QEMU MPI" ;;
    guest-admin) echo "guest admin" ;; pkg) echo "Debian packages" ;; *) echo "$1" ;;
    esac
}

# check_results BUILD EXPECTED_SKIPS REQUIRED_TIERS: reads the build's
# .trs files; a SKIP not in EXPECTED_SKIPS ("test=why ...") fails, and so
# does a required tier with no test that ran
check_results() {
    build=$1 expected=$2 required=$3
    results=$(cd "$top/_build-$build" && find tests -name '*.trs' | sort | while read -r t; do
        printf '%s %s\n' "${t%.trs}" "$(sed -n 's/^:test-result: //p' "$t" | head -1)"; done)
    [ -n "$results" ] || die "$build: no test results"
    bad_skip=""
    printf '%s\n' "$results" >"$tiers.res"
    while read -r t r; do
        [ "$r" = SKIP ] || continue
        why=$(sed -n 's/^SKIP: //p' "$top/_build-$build/$t.log" | head -1)
        if printf '%s\n' $expected | grep -qx "$t"; then
            tier "$(tier_name "$(tier_of "$t")") [$build]" "not run: $t: ${why:-skipped}"
        else
            echo "FAIL: $build: $t was skipped, which this machine must run: ${why:-no reason given}"
            bad_skip="$bad_skip $t"
        fi
    done <"$tiers.res"
    for name in $required; do
        n=0
        while read -r t r; do
            [ "$(tier_of "$t")" = "$name" ] || continue
            [ "$r" = SKIP ] || n=$((n + 1))
        done <"$tiers.res"
        human=$(tier_name "$name")
        if [ "$n" -gt 0 ]; then
            tier "$human [$build]" "ran ($n tests)"
        else
            tier "$human [$build]" "not run: no test of it in this build"
            bad_skip="$bad_skip $human"
        fi
    done
    rm -f "$tiers.res"
    p=$(sed -n 's/^# PASS: *//p' "$top/_build-$build/test-suite.log" | head -1)
    f=$(sed -n 's/^# FAIL: *//p' "$top/_build-$build/test-suite.log" | head -1)
    total_pass=$((total_pass + ${p:-0})); total_fail=$((total_fail + ${f:-0}))
    [ -z "$bad_skip" ] || die "$build: not run here although this machine has what they need:$bad_skip"
}

# require_configured BUILD WHAT...: configure's summary says yes for each
require_configured() {
    build=$1; shift
    for what in "$@"; do
        line=$(grep "^  $what \.\.*" "$top/_build-$build/configure.out" || true)
        case $line in
        *" yes"*) ;;
        *) die "$build: configure left out '$what' (${line:-no summary line}), which scripts/install-deps.sh installs" ;;
        esac
    done
}

# run_build NAME REQUIRE_ALL CONFIGURE_ARGS...
run_build() {
    name=$1 require=$2; shift 2
    stage "build: $name"
    rm -rf "$top/_build-$name"
    mkdir -p "$top/_build-$name"
    cd "$top/_build-$name"
    "$top/configure" --enable-werror "$@" >configure.out 2>&1 || { cat configure.out; die "$name: configure"; }
    tail -9 configure.out
    make -j"$jobs" >make.out 2>&1 || { cat make.out; die "$name: make"; }
    if ! IVSHM_REQUIRE_ALL=$require IVSHM_REQUIRE_GUESTS=$require make -j"$jobs" check; then
        for f in $(find . -name '*.log' -path '*tests*'); do echo "--- $f"; tail -50 "$f"; done
        cd "$top"
        die "$name: make check"
    fi
    cd "$top"
}

# every tier runs here: nothing may skip
run_build release 1 CFLAGS="-O2 -g"
require_configured release "cmocka unit tests" "libFuzzer" "Open MPI component" "verbs route" "UCX transport" "QEMU guest tests" "Debian package test"
check_results release "" "unit mp fuzz cli server simvm qemu qemu-mpi guest-admin pkg"
# the components also compile against Open MPI 5.x (Debian 13's headers,
# from Debian's archive, which CI reaches)
stage "Open MPI 5.x compile check"
sh scripts/check-ompi5.sh >"$top/_build-release/ompi5.out" 2>&1 || { cat "$top/_build-release/ompi5.out"; die "Open MPI 5 compile check"; }
cat "$top/_build-release/ompi5.out"
tier "Open MPI 5 compile check" "ran ($(grep -c 'check-ompi5: ok' "$top/_build-release/ompi5.out") files)"
grep '^check-ompi5: not run: ' "$top/_build-release/ompi5.out" | sed 's/^check-ompi5: //' | while read -r l; do
    tier "Open MPI 5 compile check" "$l"; done
# Debian 13 (Open MPI 5.0): a trixie root made by debootstrap (cached in
# /var/cache/libivshm/trixie-root), the build and the launch tests in it
stage "Debian 13 (Open MPI 5.0)"
sh scripts/test-debian13.sh >"$top/_build-release/deb13.out" 2>&1 || {
    cat "$top/_build-release/deb13.out"; die "Debian 13 (Open MPI 5.0) tier"; }
cat "$top/_build-release/deb13.out"
tier "Debian 13 (Open MPI 5.0)" "ran ($(grep -c '^ok' "$top/_build-release/deb13.out") checks)"
grep '^deb13: not run: ' "$top/_build-release/deb13.out" | sed 's/^deb13: //' | while read -r l; do
    tier "Debian 13 (Open MPI 5.0)" "$l"; done
# The sanitizer builds leave out the MPI component and the guests: an
# instrumented component cannot be loaded into uninstrumented MPI
# processes, and the guests take static programs. So their MPI, guest and
# server-less tiers are not in these builds at all; test_docs checks the
# library's defaults and skips the component's.
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_build asan 0 --disable-shared --without-ompi --disable-guest-tests CFLAGS="-O1 -g $SAN" LDFLAGS="$SAN"
require_configured asan "cmocka unit tests"
check_results asan "tests/cli/test_docs" "unit mp fuzz cli server"
tier "MPI and guest tiers [asan]" "not run: not in the sanitizer builds (an instrumented component cannot load into uninstrumented MPI processes; guests take static programs)"
# ThreadSanitizer: the threaded channel tests (one mapping shared by
# threads, so every access is visible to the sanitizer) and the BTL's lock
stage "build: tsan"
rm -rf "$top/_build-tsan" && mkdir -p "$top/_build-tsan" && cd "$top/_build-tsan"
"$top/configure" --enable-werror --disable-shared --without-ompi --disable-guest-tests CFLAGS="-O1 -g -fsanitize=thread" \
    LDFLAGS="-fsanitize=thread" >configure.out 2>&1 || { cat configure.out; die "tsan: configure"; }
make -j"$jobs" tests/unit/test_chan tests/unit/test_btl_lock >make.out 2>&1 || { cat make.out; die "tsan: make"; }
TSAN_OPTIONS="halt_on_error=1" timeout 900 ./tests/unit/test_chan || die "tsan: test_chan"
TSAN_OPTIONS="halt_on_error=1" timeout 300 ./tests/unit/test_btl_lock || die "tsan: test_btl_lock"
tier "TSan" "ran (test_chan, test_btl_lock)"
cd "$top"
# UBSan over the region heap (libivshm-heap.so, a shared object that
# replaces malloc): ASan and TSan bring a malloc of their own, so the heap
# and its test get a shared build with UBSan alone
stage "build: ubsan (region heap)"
rm -rf "$top/_build-ubsan" && mkdir -p "$top/_build-ubsan" && cd "$top/_build-ubsan"
"$top/configure" --enable-werror --without-ompi --disable-guest-tests \
    CFLAGS="-O1 -g -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
    LDFLAGS="-fsanitize=undefined" >configure.out 2>&1 || { cat configure.out; die "ubsan: configure"; }
make -j"$jobs" tests/mp/test_heap >make.out 2>&1 || { cat make.out; die "ubsan: make"; }
UBSAN_OPTIONS=print_stacktrace=1 timeout 600 ./tests/mp/test_heap || die "ubsan: test_heap"
tier "UBSan heap" "ran (test_heap)"
cd "$top"
if [ "${IVSHM_SKIP_DISTCHECK:-0}" != 1 ]; then
    stage "make distcheck"
    (cd "$top/_build-release" && make -j"$jobs" distcheck >distcheck.out 2>&1) || {
        tail -60 "$top/_build-release/distcheck.out"; die "distcheck"; }
    grep -E "archives ready|^libivshm-.*tar.gz" "$top/_build-release/distcheck.out" || true
    tier "distcheck" "ran"
else
    tier "distcheck" "not run (IVSHM_SKIP_DISTCHECK=1)"
fi
# the tests themselves: every mutation listed in a MUTATIONS file must make
# its tests fail (README, Building)
if [ "${IVSHM_SKIP_MUTATE:-0}" != 1 ]; then
    stage "mutation checks (scripts/mutate.py)"
    python3 scripts/mutate.py >"$top/_build-release/mutate.out" 2>&1 || {
        cat "$top/_build-release/mutate.out"; die "mutation checks: a mutation survived or the copy failed"; }
    cat "$top/_build-release/mutate.out"
    tier "mutation checks" "ran ($(sed -n 's/^mutations: //p' "$top/_build-release/mutate.out"))"
else
    tier "mutation checks" "not run (IVSHM_SKIP_MUTATE=1)"
fi
stage "all test builds passed"
summary
