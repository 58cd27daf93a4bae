#!/bin/sh
# Pools the jobs of e3b7dd6's code over stop 53's calls B, D, E
# (../2026-12-02c-lto, set-ups "lto" and "lheap") and this folder's F and G
# (set-ups "new" and "heap", renamed to match), with
# ../2026-11-27g-btl-glue/pool.py, at 1, 2, 4, 8 B. Output: pooled.txt.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
for f in ab-B-lto-h200.txt ab-D-lto-heap-h200.txt ab-E-lto-h200.txt; do
    cp "$here/../2026-12-02c-lto/$f" "$w/"
done
for f in ab-F-h200.txt ab-G-h200.txt; do
    sed 's/^\([a-z]*\) new r/\1 lto r/; s/^\([a-z]*\) heap r/\1 lheap r/' "$here/$f" >"$w/$f"
done
pool=$here/../2026-11-27g-btl-glue/pool.py
cd "$w"
{
    echo "# without the heap: calls B, D, E, F, G"
    for b in bw bibw mbwmr; do python3 "$pool" lto vader $b 1,2,4,8 ab-*.txt; done
    echo "# with the heap: calls D and F"
    for b in bw bibw mbwmr; do python3 "$pool" lheap vader $b 1,2,4,8 ab-D-lto-heap-h200.txt ab-F-h200.txt; done
} >"$here/pooled.txt"
