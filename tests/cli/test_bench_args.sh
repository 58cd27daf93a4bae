#!/bin/sh
# ivshm-lat and ivshm-bw refuse what they cannot measure, at once and with
# exit status 2: a --max out of range, a --cpus that is not two different
# CPUs, a CPU that does not exist or that they cannot run on (tried before
# any rank starts: none is left waiting for the other). A run that fails
# after formatting its own region leaves no region behind. Nothing here
# measures: the one run that starts both ranks ends before its ping-pong.
set -u
b=${top_builddir:-.}
. "${top_srcdir:-.}/tests/cli/lib.sh"
pass=0 fail=0
out=$(mktemp) pidf=$(mktemp)
trap 'rm -f "$out" "$pidf"' EXIT
trap 'exit 1' INT TERM
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# ends WANT_STATUS WANT_TEXT CMD...: CMD ends within 10 s with WANT_STATUS,
# says WANT_TEXT, and leaves no /dev/shm/ivshm-bench-PID of its own (its
# pid: the libtool wrapper execs)
ends() {
    want=$1 text=$2; shift 2
    timeout 10 sh -c 'echo $$ >"$0"; exec "$@"' "$pidf" "$@" >"$out" 2>&1
    rc=$?
    if [ "$rc" -eq "$want" ]; then ok; else bad "$*: exit $rc, want $want"; cat "$out"; fi
    if grep -q -- "$text" "$out"; then ok; else bad "$*: output lacks '$text'"; cat "$out"; fi
    left=/dev/shm/ivshm-bench-$(cat "$pidf")
    if [ ! -e "$left" ]; then ok; else bad "$*: left $left"; rm -f "$left"; fi
}
# the first CPU this process may run on, and one below CPU_SETSIZE that
# this machine does not have
first=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*\([0-9]*\).*/\1/p' /proc/self/status)
first=${first:-0}
absent=1023
[ ! -e /sys/devices/system/cpu/cpu$absent ] || absent=""
for t in ivshm-lat ivshm-bw; do
    x="$b/benchmarks/$t"
    ends 2 "--max must lie in" "$x" --max 3
    for c in 5 "$first" "$first,x" "$first,$first" "-1,$first"; do
        ends 2 "--cpus takes A,B: two different CPUs" "$x" --max 4096 --cpus "$c"
    done
    ends 2 "rank 1 cannot run on CPU 4000: no such CPU" "$x" --max 4096 --cpus "$first,4000"
    ends 2 "rank 0 cannot run on CPU 4000: no such CPU" "$x" --max 4096 --cpus "4000,$first"
    if [ -n "$absent" ]; then
        ends 2 "rank 1 cannot run on CPU $absent: Invalid argument" "$x" --max 4096 --cpus "$first,$absent"
    else
        not_checked "a CPU below CPU_SETSIZE that is absent: this machine has CPU 1023"
    fi
done
# both ranks start on the region ivshm-lat formats, then the CSV file
# cannot be opened: status 1, and the region is gone
ends 1 "No such file or directory" "$b/benchmarks/ivshm-lat" --max 4096 --csv /nonexistent/x.csv
finish test_bench_args
