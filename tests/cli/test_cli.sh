#!/bin/sh
# The ivshm tool end to end: every subcommand, --json output, --help, exit
# codes for bad input, and check/gc on a damaged region.
set -u
b=${top_builddir:-.}
. "${top_srcdir:-.}/tests/cli/lib.sh"
IVSHM="$b/libivshm/tools/ivshm"
R=/dev/shm/ivshm-cli-test-$$
pass=0 fail=0
cleanup() { rm -f "$R" "$R.small" "$R.zero" "$R.huge" "$R.keep"; }
trap cleanup EXIT
trap 'exit 1' INT TERM

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# expect CODE DESCRIPTION CMD...: runs CMD, compares its exit status
expect() {
    want=$1; what=$2; shift 2
    "$@" >/tmp/ivshm-cli-out.$$ 2>&1
    got=$?
    if [ "$got" -eq "$want" ]; then ok; else bad "$what: exit $got, want $want"; cat /tmp/ivshm-cli-out.$$; fi
}
contains() {
    if grep -q -- "$1" /tmp/ivshm-cli-out.$$; then ok; else bad "output lacks '$1'"; cat /tmp/ivshm-cli-out.$$; fi
}

expect 0 "format" "$IVSHM" format "file:$R" --size 4M --procs 16
contains "uuid"
expect 17 "format twice refused" "$IVSHM" format "file:$R" --size 4M
contains "force"
expect 0 "info" "$IVSHM" info --region "file:$R"
contains "version    4"
expect 0 "info --json" "$IVSHM" info "file:$R" --json
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["size"]==4194304 and d["version"]==4 and d["processes"]==[]' /tmp/ivshm-cli-out.$$; then ok; else bad "info --json not valid JSON"; fi
expect 0 "check" "$IVSHM" check "file:$R"
contains "layout valid"
expect 0 "check --json" "$IVSHM" check "file:$R" --json
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is True' /tmp/ivshm-cli-out.$$; then ok; else bad "check --json"; fi
expect 0 "gc" "$IVSHM" gc "file:$R" --json
contains '"processes":0'
expect 0 "list" "$IVSHM" list --json
expect 0 "stat (no endpoints)" "$IVSHM" stat "file:$R"
contains "no channel endpoints"
expect 0 "stat --json" "$IVSHM" stat "file:$R" --json
if python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))==[]' /tmp/ivshm-cli-out.$$; then ok; else bad "stat --json"; fi
for c in format info list check gc stat; do
    expect 0 "$c --help" "$IVSHM" "$c" --help
    contains "usage: ivshm $c"
done
expect 0 "--help" "$IVSHM" --help
expect 2 "no command" "$IVSHM"
expect 2 "unknown command" "$IVSHM" frobnicate

# bad input: each gets its own exit code and a sentence
expect 3 "missing file" "$IVSHM" info file:/dev/shm/ivshm-does-not-exist
contains "does-not-exist"
expect 2 "bad URI" "$IVSHM" info nonsense
expect 7 "too small" "$IVSHM" format "file:$R.small" --size 64K
# a format that fails leaves nothing behind: no file it created, and an
# existing file keeps its size (it was a 90 TB sparse file once)
"$IVSHM" format "file:$R.huge" --size 99999999999999 >/tmp/ivshm-cli-out.$$ 2>&1
rc=$?
if [ $rc -ne 0 ] && [ ! -e "$R.huge" ]; then ok; else bad "failed format left $R.huge (exit $rc)"; ls -l "$R.huge"; fi
head -c 3145728 /dev/zero > "$R.keep"
"$IVSHM" format "file:$R.keep" --size 99999999999999 >/tmp/ivshm-cli-out.$$ 2>&1
rc=$?
size=$(stat -c %s "$R.keep")
if [ $rc -ne 0 ] && [ "$size" = 3145728 ]; then ok; else bad "failed format resized $R.keep to $size (exit $rc)"; fi
expect 0 "format after a failed one" "$IVSHM" format "file:$R.keep"
head -c 65536 /dev/zero > "$R.small"
expect 7 "too small on open" "$IVSHM" info "file:$R.small"
head -c 2097152 /dev/zero > "$R.zero"
expect 8 "unformatted" "$IVSHM" info "file:$R.zero"
cp "$R" "$R.zero"; truncate -s 8M "$R.zero"
expect 12 "size mismatch" "$IVSHM" check "file:$R.zero"
printf 'XXXXXXXX' | dd of="$R" bs=1 seek=0 conv=notrunc status=none
expect 9 "bad magic: check fails" "$IVSHM" check "file:$R"
contains "bad magic"
expect 9 "bad magic: info fails" "$IVSHM" info "file:$R"
expect 0 "force reformat" "$IVSHM" format "file:$R" --force
printf '\377' | dd of="$R" bs=1 seek=50 conv=notrunc status=none
expect 11 "corrupt geometry" "$IVSHM" check "file:$R"
expect 0 "force reformat" "$IVSHM" format "file:$R" --force
printf '\001' | dd of="$R" bs=1 seek=30 conv=notrunc status=none
expect 11 "corrupt uuid (checksum)" "$IVSHM" check "file:$R"
contains "checksum"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    "$IVSHM" format "file:$R" --force --mode 600 >/dev/null
    expect 4 "permission denied" setpriv --reuid=65534 --regid=65534 --clear-groups "$IVSHM" info "file:$R"
    contains "chmod"
else
    not_checked "permission denied (needs root and setpriv)"
fi
rm -f /tmp/ivshm-cli-out.$$
finish
