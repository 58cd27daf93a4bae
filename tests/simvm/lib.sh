# Shared by the simulated-VM tests, the demo and the benchmark runners:
# mpirun across simulated VMs with the component from the build tree.
SIMVM_DIR=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$SIMVM_DIR/../.." && pwd)}"
: "${top_builddir:=$top_srcdir/_build-demo}"
SIMVM="$top_srcdir/tests/simvm/simvm.sh"

# one turn at a time on the simulated VMs (lock.sh)
. "$top_srcdir/tests/simvm/lock.sh"
simvm_lock "$(basename "$0")"
OMPI_SYS_COMPONENTS=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed 's/^path:pkglibdir://')
IVSHM_HELP_DIR="$top_srcdir/mpi-plugin/btl"
# The components of the build tree $top_builddir (one folder each), ahead
# of Open MPI's; read at each run, since benchmarks/ab.sh points
# top_builddir at other trees. The flat mpi-plugin/.libs is where builds of
# revisions before the per-component folders keep them (A/B runs). Only
# folders that exist: Open MPI 4.1's mpirun, given one that does not,
# loses its own options ("unknown option --allow-run-as-root").
ivshm_component_path() {
    for d in btl/.libs mpool/.libs coll/.libs .libs; do
        [ ! -d "$top_builddir/mpi-plugin/$d" ] || printf '%s:' "$top_builddir/mpi-plugin/$d"
    done
    printf '%s' "$OMPI_SYS_COMPONENTS"
}
export IVSHM_HELP_DIR

# Settings some machines put in the environment would break the simulated
# VMs (a forced plm cannot start daemons in them) or bend comparisons (a
# forced BTL choice or vader copy mechanism is not Open MPI's default): the
# runs use the defaults; SIMVM_ENV_NOTES says what was unset.
SIMVM_ENV_NOTES=""
for v in OMPI_MCA_plm OMPI_MCA_btl_vader_single_copy_mechanism OMPI_MCA_btl OMPI_MCA_pml; do
    eval "val=\${$v:-}"
    [ -n "$val" ] && SIMVM_ENV_NOTES="$SIMVM_ENV_NOTES $v=$val" && unset "$v"
done

# Open MPI 5.x launches through PRRTE: ORTE's parameters are gone, and so
# is osc pt2pt (5.x's osc rdma runs over any BTL). PRRTE hands
# mca_base_component_path to PMIx as well, whose component loader then
# lists every file of our folders as "bad prefix": PMIx keeps its own.
# coll han (5.x's default across nodes, and each simulated VM is a node)
# is left out: 5.0.7's han hangs in a broadcast whose ranks give different
# counts and datatypes of the same signature (legal MPI; mpi_coll's
# strided broadcasts), with or without our components (docs/support.md).
SIMVM_OMPI_MAJOR=$(mpirun --version 2>/dev/null | sed -n 's/^mpirun (Open MPI) \([0-9]*\)\..*/\1/p' | head -1)
if [ "${SIMVM_OMPI_MAJOR:-4}" -ge 5 ]; then
    SIMVM_OSC=
    SIMVM_LAUNCH_OPTS="--mca coll_han_priority -1"
    PMIX_MCA_mca_base_component_path=$(pkg-config --variable=libdir pmix 2>/dev/null)/pmix
    export PMIX_MCA_mca_base_component_path
else
    SIMVM_OSC="--mca osc pt2pt"
    SIMVM_LAUNCH_OPTS="--mca orte_base_help_aggregate 0 --mca orte_default_hostfile none"
fi

# pml ob1: the BTLs (ours among them) serve ob1; Debian's build would pick
# pml/osc ucx where UCX finds a network. osc pt2pt: one-sided over the
# BTLs' send path (osc rdma in Open MPI 4.1 wants one BTL that reaches
# every rank of the window, self and same-VM ranks too: ours does not).
# SIMVM_PML overrides that choice (tests of the UCX transport: pml ucx).
# simvm_mpirun HOSTS NP ARGS... (HOSTS as for --host, e.g. 10.200.0.1:2,...)
# Every run is bounded: $SIMVM_TIMEOUT seconds (default 120; 0: none); a
# run cut off there exits 124 and prints a FAIL line naming it.
: "${SIMVM_TIMEOUT:=120}"
simvm_mpirun() {
    hosts=$1 np=$2
    shift 2
    timeout -k 10 "$SIMVM_TIMEOUT" "${SIMVM_LAUNCHER:-mpirun}" --allow-run-as-root --oversubscribe --bind-to none -np "$np" --host "$hosts" \
        --mca plm_rsh_agent "$top_srcdir/tests/simvm/agent" \
        --mca oob_tcp_if_include 10.200.0.0/24 --mca btl_tcp_if_include 10.200.0.0/24 \
        --mca mca_base_component_path "$(ivshm_component_path)" \
        $SIMVM_LAUNCH_OPTS -x IVSHM_HELP_DIR \
        ${SIMVM_PML:---mca pml ob1 $SIMVM_OSC} \
        "$@"
    simvm_rc=$?
    [ $simvm_rc != 124 ] ||
        echo "FAIL: mpirun -np $np --host $hosts did not finish within $SIMVM_TIMEOUT s: $*" >&2
    return $simvm_rc
}

# The same runs in one OS, for machines without iproute2 (the benchmark
# runners' --single-node): every rank maps the region of single_node_region
# ($IVSHM_REGION), ivshmem carries same-OS peers (btl_ivshmem_same_vm), the
# caller chooses the binding. lib.sh unsets a forced plm, and a machine
# without ssh then needs an rsh agent that exists for the (local) launch to
# start at all. single_node_mpirun NP ARGS...
single_node_mpirun() {
    np=$1
    shift
    timeout -k 10 "$SIMVM_TIMEOUT" "${SIMVM_LAUNCHER:-mpirun}" --allow-run-as-root -np "$np" \
        --mca plm_rsh_agent /bin/false \
        --mca mca_base_component_path "$(ivshm_component_path)" \
        --mca pml ob1 $SIMVM_OSC --mca btl_ivshmem_same_vm 1 \
        -x IVSHM_REGION -x IVSHM_HELP_DIR "$@"
    simvm_rc=$?
    [ $simvm_rc != 124 ] ||
        echo "FAIL: mpirun -np $np did not finish within $SIMVM_TIMEOUT s: $*" >&2
    return $simvm_rc
}
single_node_region() { # PATH SIZE: formats the file, exports IVSHM_REGION
    "$top_builddir/libivshm/tools/ivshm" format "file:$1" --size "$2" --force >/dev/null
    IVSHM_REGION=file:$1
    export IVSHM_REGION
}

simvm_format() { # formats every host's region
    for r in $("$SIMVM" regions); do
        "$top_builddir/libivshm/tools/ivshm" format "file:$r" --size "${1:-256M}" --force >/dev/null
    done
}

# simvm_skip WHY: a test that cannot run here exits 77 (SKIP) with its
# reason; where everything is required (IVSHM_REQUIRE_ALL=1, as
# scripts/test.sh sets for the release build) it fails with that reason.
simvm_skip() {
    if [ "${IVSHM_REQUIRE_ALL:-0}" = 1 ]; then
        echo "FAIL: $* (IVSHM_REQUIRE_ALL=1: this test must run here)"; exit 1
    fi
    echo "SKIP: $*"; exit 77
}

# A simulated-VM test needs root, Open MPI, the component built and
# network namespaces.
simvm_require() {
    [ "$(id -u)" = 0 ] || simvm_skip "needs root for namespaces"
    command -v mpirun >/dev/null && command -v mpicc >/dev/null || simvm_skip "no Open MPI"
    [ -f "$top_builddir/mpi-plugin/btl/.libs/mca_btl_ivshmem.so" ] || simvm_skip "component not built"
    ip netns add ivsprobe 2>/dev/null && ip netns del ivsprobe || simvm_skip "no network namespaces"
}

# simvm_require_ucx: the UCX transport's tests also need it built; sets
# UCT_LIB (the transport's library, preloaded into the ranks)
simvm_require_ucx() {
    UCT_LIB=$top_builddir/mpi-plugin/ucx/.libs/libuct_ivshmem.so
    [ -f "$UCT_LIB" ] || simvm_skip "UCX transport not built (configure: UCX transport no)"
}

# simvm_checks: a test of named checks: $work (a scratch folder, removed
# with the simulated VMs at exit), ok/bad to count each check's outcome and
# simvm_checks_end NAME for the closing line and the exit status
simvm_checks() {
    work=$(mktemp -d)
    trap '"$SIMVM" down; rm -rf "$work"' EXIT
    trap 'exit 1' INT TERM
    pass=0 fail=0
}
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
simvm_checks_end() { # NAME
    echo "$1: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
