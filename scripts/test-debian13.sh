#!/bin/sh
# The Debian 13 (Open MPI 5.0) tier of scripts/test.sh: in the trixie root
# of scripts/debian13-root.sh (made on a fresh machine, ~3 min; reused when
# cached), configure must find Open MPI 5's devel headers and build the
# three components; then the simulated-VM MPI tests under PRRTE's mpirun:
# the launch and the one switch (test_ompi_launch), point-to-point with a
# paused rank (test_simvm), the heap, the collectives with a killed rank,
# threads with a killed rank; each checks payloads and the region's
# counters. Build tree: _build-deb13; each test's output in
# _build-deb13/TEST.out.
# Exit: 0 passed, 1 failed, 77 the root could not be made (no archive).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
sh scripts/debian13-root.sh '
    set -e
    rm -rf _build-deb13 && mkdir -p _build-deb13 && cd _build-deb13
    ../configure --enable-werror CFLAGS="-O2 -g" >configure.out 2>&1 || { cat configure.out; exit 1; }
    grep "Open MPI component" configure.out
    grep -q "Open MPI component ...... yes (Open MPI 5" configure.out ||
        { echo "FAIL: configure did not take Open MPI 5 in the Debian 13 root"; exit 1; }
    make -j2 >make.out 2>&1 || { tail -40 make.out; exit 1; }
    failed=
    for t in test_ompi_launch test_simvm test_heap test_coll test_threads; do
        start=$(date +%s)
        rc=0
        top_builddir=$PWD timeout 300 sh ../tests/simvm/$t.sh >$t.out 2>&1 || rc=$?
        echo "$t (Open MPI 5.0): rc $rc in $(($(date +%s) - start)) s"
        grep -a "^ok\|^FAIL" $t.out
        [ $rc -eq 0 ] || { failed="$failed $t"; tail -30 $t.out; }
    done
    [ -z "$failed" ] || { echo "FAIL: Debian 13:$failed"; exit 1; }'
