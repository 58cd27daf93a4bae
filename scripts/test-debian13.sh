#!/bin/sh
# The Debian 13 (Open MPI 5.0) tier of scripts/test.sh: in the trixie root
# of scripts/debian13-root.sh (made on a fresh machine, ~3 min; reused when
# cached), configure must find Open MPI 5's devel headers and build the
# three components; then the tests that run there under PRRTE's mpirun
# (tests/simvm/test_ompi_launch.sh). Build tree: _build-deb13.
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
    top_builddir=$PWD timeout 300 sh ../tests/simvm/test_ompi_launch.sh >launch.out 2>&1 ||
        { cat launch.out; exit 1; }
    grep "^ok\|^test_ompi_launch" launch.out'
