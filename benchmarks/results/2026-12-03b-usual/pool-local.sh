#!/bin/sh
# Ratios of lat-ab-local-amd.txt (ivshm-lat, / raw ping-pong of the same
# run) by where the 2-CPU machine's two vCPUs lay in the run: "sib" (raw
# under 40 ns, latency under 75), "close" (raw 40-100 ns, latency 70-150)
# and "far" (raw over 200 ns, latency over 200). A size whose latency is
# of another mode than its run's raw figure (the vCPUs moved within the
# run) is left out.
#   sh pool-local.sh [FILE]
f=${1:-$(dirname "$0")/lat-ab-local-amd.txt}
awk '{
    t = $1; raw = $3; mode = raw < 40 ? "sib" : raw < 100 ? "close" : raw > 200 ? "far" : "";
    if (mode == "") next
    for (i = 4; i <= NF; i++) if ($i ~ /^[0-9]+B$/) {
        lat = $(i + 1); r = $(i + 2); gsub(/[()x]/, "", r)
        if ((mode == "sib" && lat >= 75) ||
            (mode == "close" && (lat <= 70 || lat >= 150)) ||
            (mode == "far" && lat <= 200)) continue
        k = t " " mode " " $i
        n[k]++; v[k, n[k]] = r
    }
}
END {
    for (k in n) {
        m = n[k]
        for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++)
            if (v[k, b] < v[k, a]) { x = v[k, a]; v[k, a] = v[k, b]; v[k, b] = x }
        med = m % 2 ? v[k, (m + 1) / 2] : (v[k, m / 2] + v[k, m / 2 + 1]) / 2
        printf "%-18s n %2d  min %.2f  median %.3f  max %.2f\n", k, m, v[k, 1], med, v[k, m]
    }
}' "$f" | sort
