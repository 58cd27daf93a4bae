#!/bin/sh
# The region heap's entry points behave as glibc's (issue #27, item 11;
# docs/heap.md, "Conformance"). tests/mp/heap_conform runs the same checks
# of malloc, calloc, realloc, reallocarray, free, memalign, aligned_alloc,
# posix_memalign, valloc, pvalloc and malloc_usable_size twice: plain (glibc
# answers: the reference) and with LD_PRELOAD=libivshm-heap.so over a region
# of its own, where blocks of the threshold and more must come from the
# region. Each run's own assertions must pass, and the two must print the
# same lines. aligned_alloc's rules changed in glibc 2.38: a second pair of
# runs puts 2.38's aligned_alloc (tests/mp/aligned_alloc_c17.c) in front of
# the C library, so that the heap is held to both rules on any glibc.
set -u
prog="$top_builddir/tests/mp/heap_conform"
heap="$top_builddir/libivshm/.libs/libivshm-heap.so"
[ -f "$heap" ] || { echo "SKIP: libivshm-heap.so not built (static build)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset IVSHM_HEAP_MIN
fail=0

# compare NAME PRELOAD...: the plain run with PRELOAD, and the heap's run
# with the heap before it; both must pass their own checks and print the
# same lines
compare() {
    name=$1
    shift
    LD_PRELOAD="$*" "$prog" >"$work/plain" 2>"$work/plain.err" ||
        { echo "FAIL: the plain run ($name)"; fail=1; }
    LD_PRELOAD="$heap${*:+ $*}" "$prog" --heap >"$work/heap" 2>"$work/heap.err" ||
        { echo "FAIL: the run with the heap preloaded ($name)"; fail=1; }
    cat "$work/plain.err" "$work/heap.err"
    lines=$(wc -l <"$work/plain")
    if [ "$lines" -lt 100 ]; then
        echo "FAIL: the plain run ($name) printed $lines lines"
        fail=1
    fi
    if ! diff -u "$work/plain" "$work/heap" >"$work/diff"; then
        echo "FAIL: the heap answers otherwise than $name (- $name, + heap):"
        grep '^[-+][^-+]' "$work/diff"
        fail=1
    fi
    [ $fail = 0 ] && echo "ok: $lines checks, the same with and without the heap ($name)"
}

compare "this glibc"
# glibc 2.38's aligned_alloc (refuses alignments that are not powers of
# two) in front of an older glibc: the heap must leave those to it
c17="$top_builddir/tests/mp/.libs/libaligned-alloc-c17.so"
if [ -f "$c17" ]; then
    compare "glibc 2.38's aligned_alloc" "$c17"
else
    echo "FAIL: $c17 not built"
    fail=1
fi
exit $fail
