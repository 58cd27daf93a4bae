#!/bin/sh
# The region heap's entry points behave as glibc's (issue #27, item 11;
# docs/heap.md, "Conformance"). tests/mp/heap_conform runs the same checks
# of malloc, calloc, realloc, reallocarray, free, memalign, aligned_alloc,
# posix_memalign, valloc, pvalloc and malloc_usable_size twice: plain (glibc
# answers: the reference) and with LD_PRELOAD=libivshm-heap.so over a region
# of its own, where blocks of the threshold and more must come from the
# region. Each run's own assertions must pass, and the two must print the
# same lines.
set -u
prog="$top_builddir/tests/mp/heap_conform"
heap="$top_builddir/libivshm/.libs/libivshm-heap.so"
[ -f "$heap" ] || { echo "SKIP: libivshm-heap.so not built (static build)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset IVSHM_HEAP_MIN
fail=0
"$prog" >"$work/plain" 2>"$work/plain.err" || { echo "FAIL: the plain run (glibc)"; fail=1; }
LD_PRELOAD="$heap" "$prog" --heap >"$work/heap" 2>"$work/heap.err" ||
    { echo "FAIL: the run with the heap preloaded"; fail=1; }
cat "$work/plain.err" "$work/heap.err"
lines=$(wc -l <"$work/plain")
if [ "$lines" -lt 100 ]; then
    echo "FAIL: the plain run printed $lines lines"
    fail=1
fi
if ! diff -u "$work/plain" "$work/heap" >"$work/diff"; then
    echo "FAIL: the heap answers otherwise than glibc (- glibc, + heap):"
    grep '^[-+][^-+]' "$work/diff"
    fail=1
fi
[ $fail = 0 ] && echo "ok: $lines checks, the same with and without the heap"
exit $fail
