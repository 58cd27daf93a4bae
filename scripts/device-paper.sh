#!/bin/sh
# Runs benchmarks/paper-eval.sh on a larger machine (the lent 16-core one):
# builds the tree (with the generated build system carried along where
# the machine has no libtool), uses network namespaces when iproute2 is
# there (a carried .devtools/bin/ip counts), else --single-node, and
# writes into $OUT. PARTS picks the parts ("pt2pt coll app").
set -u
PARTS=${PARTS:-pt2pt coll app}
. "$(dirname "$0")/device-build.sh"
mode=--single-node
if command -v ip >/dev/null && ip netns add ivsprobe 2>/dev/null && ip netns del ivsprobe; then
    mode=""
fi
echo "paper-eval mode: ${mode:-simulated VMs}" >&2
top_builddir=$PWD top_srcdir=$top sh "$top/benchmarks/paper-eval.sh" $mode \
    --parts "$PARTS" --vms "${VMS:-2 4 8 15}" --out "$OUT" \
    2>"$OUT/progress-$(echo "$PARTS" | tr ' ' '-').txt"
tail -c 600 "$OUT"/progress-*.txt
