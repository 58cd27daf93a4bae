#!/bin/sh
# ivshm-lat and ivshm-bw refuse what they cannot measure, at once and with
# exit status 2: a --max out of range, a --cpus CPU that does not exist or
# that this process may not use (before any rank starts: none is left
# waiting for the other), and leave no region of their own behind. Nothing
# here runs a ping-pong.
set -u
b=${top_builddir:-.}
. "${top_srcdir:-.}/tests/cli/lib.sh"
pass=0 fail=0
out=/tmp/ivshm-bench-args.$$
trap 'rm -f "$out"' EXIT
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
regions() { ls /dev/shm 2>/dev/null | grep -c '^ivshm-bench-' ; }
# refused WANT_TEXT CMD...: CMD ends with status 2 within 10 s, says WANT_TEXT
refused() {
    want=$1; shift
    before=$(regions)
    timeout 10 "$@" >"$out" 2>&1
    rc=$?
    if [ "$rc" -eq 2 ]; then ok; else bad "$*: exit $rc, want 2"; cat "$out"; fi
    if grep -q -- "$want" "$out"; then ok; else bad "$*: output lacks '$want'"; cat "$out"; fi
    if [ "$(regions)" -eq "$before" ]; then ok; else bad "$*: left a region in /dev/shm"; fi
}
for t in ivshm-lat ivshm-bw; do
    x="$b/benchmarks/$t"
    refused "--max must lie in" "$x" --max 3
    refused "rank 1 cannot run on CPU 4000" "$x" --max 64 --cpus 0,4000
    refused "rank 0 cannot run on CPU 4000" "$x" --max 64 --cpus 4000,0
    if [ "$(nproc --all)" -ge 2 ] && command -v taskset >/dev/null; then
        # CPU 1 exists, but this process may only use CPU 0
        refused "rank 1 cannot run on CPU 1: not one this process may use" \
            taskset -c 0 "$x" --max 64 --cpus 0,1
    else
        not_checked "a CPU that exists but is not allowed: needs 2 CPUs and taskset"
    fi
done
finish test_bench_args
