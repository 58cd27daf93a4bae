#!/bin/sh
# Runs one test of `make check` under a time bound (the LOG_COMPILER and
# SH_LOG_COMPILER of Makefile.am), so that a test that hangs fails with a
# message instead of stalling the suite: automake has no timeout of its own.
#   run-bounded.sh [INTERPRETER] TEST
# Each bound is about three times the test's time on the 2-core CI machine
# (the time is printed at the end of each log); $IVSHM_TEST_TIMEOUT (seconds)
# replaces them all. A simulated-VM test's bound counts from its turn on the
# simulated VMs' lock (tests/simvm/lib.sh), not from its wait for it.
set -u
for name; do :; done
base=$(basename "$name" .sh)
case $base in
    # guests under TCG (~4 and ~3.5 min), more on a fresh machine, where
    # each first builds its Debian root by debootstrap
    test_qemu_mpi|test_guest_admin) bound=1200 ;;
    test_qemu) bound=600 ;;           # ~40 s
    test_libvirt) bound=600 ;;        # ~1 min
    test_libvirt_mpi) bound=600 ;;    # ~1.5 min
    test_packages) bound=1200 ;;      # ~3 min, more when it builds its Debian root
    test_simvm|test_coll|test_paper_quick) bound=900 ;;   # ~1 min each
    *) bound=600 ;;                   # unit, multi-process, fuzz, CLI: < 30 s (ASan: ~10x)
esac
bound=${IVSHM_TEST_TIMEOUT:-$bound}

case $name in
*/tests/simvm/*|tests/simvm/*|*/tests/pkg/*|tests/pkg/*)
    . "$(dirname "$0")/simvm/lock.sh"
    simvm_lock "$base" ;;
esac

t0=$(date +%s)
# timeout signals the test's whole process group (mpirun, QEMU, children);
# a test that ignores TERM is killed 30 s later
timeout -k 30 "$bound" "$@"
rc=$?
t=$(($(date +%s) - t0))
if [ $rc = 124 ] || { [ $rc = 137 ] && [ "$t" -ge "$bound" ]; }; then
    echo "FAIL: $base did not finish within $bound s"
    exit 124
fi
echo "run-bounded: $base exited $rc after $t s (bound $bound s)"
exit $rc
