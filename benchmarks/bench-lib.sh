# Shared by the benchmark runners (compare.sh, ab.sh): the pin wrapper
# and the median over rounds. Sourced after tests/simvm/lib.sh.

# bench_pin_wrapper FILE: writes a wrapper that pins rank r alike in every
# set-up between simulated VMs (Open MPI sees separate nodes there and
# cannot bind alike): one pair on CPUs 2 and 4, N pairs rank r on CPU r + 1,
# with PIN_THREADS=T (passed with -x) rank r on CPUs 2+T*r .. 1+T*(r+1).
# Every rank of a job or none: a job needing more CPUs than there are runs
# unpinned.
bench_pin_wrapper() {
    cat >"$1" <<'PIN'
#!/bin/sh
r=$OMPI_COMM_WORLD_RANK n=$OMPI_COMM_WORLD_SIZE
if [ "${PIN_THREADS:-1}" -gt 1 ]; then
    c=$((2 + PIN_THREADS * r))-$((1 + PIN_THREADS * (r + 1))) top=$((1 + PIN_THREADS * n))
elif [ "$n" = 2 ]; then c=$((2 + 2 * r)) top=4; else c=$((r + 1)) top=$n; fi
[ "$top" -lt "$(nproc)" ] || exec "$@"
exec taskset -c "$c" "$@"
PIN
    chmod +x "$1"
}

# bench_pinning_note: one line saying how the runs are pinned
bench_pinning_note() {
    if [ "$(nproc)" -gt 4 ]; then
        echo "# pinning: one pair on CPUs 2 and 4, N pairs rank r on CPU r + 1, T threads per rank on CPUs 2+T*r..1+T*(r+1) (a job needing more CPUs than there are: none of it), every set-up alike"
    else
        echo "# not pinned (fewer than 5 CPUs)"
    fi
}

# bench_machine_note: date, CPUs, CPU model, Open MPI
bench_machine_note() {
    echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1); $(ompi_info 2>/dev/null | sed -n 's/^ *Open MPI: */Open MPI /p' | head -1)"
}

# bench_median_rounds FILE...: lines "size median mean" of several rounds
# -> per size (in first-seen order) the median over the rounds of each column
bench_median_rounds() {
    awk 'function med(v,   n, x, i, j, t) {
             n = split(v, x, " ")
             for (i = 2; i <= n; i++) for (j = i; j > 1 && x[j - 1] + 0 > x[j] + 0; j--) {
                 t = x[j]; x[j] = x[j - 1]; x[j - 1] = t }
             return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
         }
         { if (!($1 in a)) order[k++] = $1; a[$1] = a[$1] " " $2; b[$1] = b[$1] " " $3 }
         END { for (i = 0; i < k; i++) print order[i], med(a[order[i]]), med(b[order[i]]) }' "$@"
}
