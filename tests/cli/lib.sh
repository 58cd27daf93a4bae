# Sourced by the CLI tests: a part that a test cannot check on this machine
# is named, and the test then ends SKIP (77) with the reasons rather than
# PASS having checked less; where every part is required
# (IVSHM_REQUIRE_ALL=1, as scripts/test.sh sets for the release build) it
# fails with them.
unchecked=""
not_checked() { # WHAT AND WHY
    unchecked="$unchecked${unchecked:+; }$*"
    echo "not checked: $*"
}
# finish [NAME]: the closing count, then the exit status
finish() {
    echo "${1:+$1: }$pass passed, $fail failed"
    [ "$fail" -eq 0 ] || exit 1
    [ -z "$unchecked" ] && exit 0
    if [ "${IVSHM_REQUIRE_ALL:-0}" = 1 ]; then
        echo "FAIL: not checked: $unchecked (IVSHM_REQUIRE_ALL=1)"; exit 1
    fi
    echo "SKIP: not checked: $unchecked"
    exit 77
}
