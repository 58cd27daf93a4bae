# The simulated VMs are one set of names on the machine (namespaces ivsvmN,
# bridge ivsbr0, 10.200.0.0/24): scripts of several build trees that use
# them take turns on one lock, held (fd 9) until the script exits; a turn
# that does not come within $SIMVM_LOCK_WAIT seconds fails the script.
# A script that another one started under the lock (SIMVM_LOCK_HELD) runs
# in its turn. Sourced by tests/simvm/lib.sh and tests/run-bounded.sh.
simvm_lock() { # WHO: takes the turn, or ends the script naming WHO
    [ "$(id -u)" = 0 ] && [ -z "${SIMVM_LOCK_HELD:-}" ] &&
        command -v flock >/dev/null || return 0
    exec 9>"${SIMVM_LOCK:-/run/ivshm-simvm.lock}"
    flock -w "${SIMVM_LOCK_WAIT:-3600}" 9 || {
        echo "FAIL: $1: the simulated VMs stayed in use by another run for ${SIMVM_LOCK_WAIT:-3600} s (lock ${SIMVM_LOCK:-/run/ivshm-simvm.lock})"
        exit 1
    }
    SIMVM_LOCK_HELD=$$
    export SIMVM_LOCK_HELD
}
