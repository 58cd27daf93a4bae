#!/bin/sh
# Medians over the device rounds of lat-ab-h200-deferred.txt (call H2) and
# lat-ab-J-h200.txt (call J) of ivshm-lat, per tree and size: ns, and x the
# raw ping-pong of the same run. (The receive side's release differs
# between the two calls' "usual" trees; see README.)
#   sh pool-h200.sh
d=$(dirname "$0")
cat "$d/lat-ab-h200-deferred.txt" "$d/lat-ab-J-h200.txt" | awk '
/^(old|usual): raw/ {
    t = $1; sub(":", "", t)
    for (i = 4; i <= NF; i++) if ($i ~ /^[0-9]+B$/) {
        r = $(i + 2); gsub(/[()x]/, "", r)
        k = t " " $i; n[k]++; ns[k, n[k]] = $(i + 1); x[k, n[k]] = r
    }
}
function med(a, k, m,    i, j, t) {
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
        if (a[k, j] < a[k, i]) { t = a[k, i]; a[k, i] = a[k, j]; a[k, j] = t }
    return m % 2 ? a[k, (m + 1) / 2] : (a[k, m / 2] + a[k, m / 2 + 1]) / 2
}
END { for (k in n) printf "%-10s rounds %2d  median %.1f ns  %.3f x raw\n", k, n[k], med(ns, k, n[k]), med(x, k, n[k]) }' | sort
