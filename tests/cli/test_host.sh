#!/bin/sh
# ivshm-host, the admin's set-up tool: create (power-of-two size, owner,
# mode, hugetlbfs check), the QEMU arguments it prints (fed to a real QEMU
# when one is installed), libvirt XML, and check-libvirt on good and bad
# domain definitions; the ivshm-server@ systemd unit passes
# systemd-analyze verify (where systemd is installed).
set -u
b=${top_builddir:-.}
. "${top_srcdir:-.}/tests/cli/lib.sh"
HOST="$b/qemu-config/ivshm-host"
IVSHM_TOOL="$b/libivshm/tools/ivshm"; export IVSHM_TOOL
N=ivshm-host-test-$$
R=/dev/shm/$N
out=/tmp/ivshm-host-out.$$
pass=0 fail=0
trap 'rm -f "$R" "$R.bad" "$out" /tmp/$N.xml' EXIT
trap 'exit 1' INT TERM

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect() {
    want=$1; what=$2; shift 2
    "$@" >"$out" 2>&1
    got=$?
    if [ "$got" -eq "$want" ]; then ok; else bad "$what: exit $got, want $want"; cat "$out"; fi
}
contains() {
    if grep -q -- "$1" "$out"; then ok; else bad "output lacks '$1'"; cat "$out"; fi
}

expect 1 "create: size not a power of two" "$HOST" create "$R" --size 3M
contains "power of two"
expect 1 "create: hugepages outside hugetlbfs" "$HOST" create "$R" --size 4M --hugepages
contains "hugetlbfs"
expect 1 "create: no size" "$HOST" create "$R"
expect 0 "create" "$HOST" create "$R" --size 4M --mode 0640 --owner nobody:nogroup
[ "$(stat -c '%s %a %U:%G' "$R")" = "4194304 640 nobody:nogroup" ] && ok || bad "create: size/mode/owner: $(stat -c '%s %a %U:%G' "$R")"
expect 0 "created region validates" "$IVSHM_TOOL" check "file:$R"

expect 0 "qemu-args" "$HOST" qemu-args --region "$R" --id shm0
contains "memory-backend-file,id=shm0,share=on,mem-path=$R,size=4194304"
contains "ivshmem-plain,memdev=shm0"
expect 0 "qemu-args doorbell" "$HOST" qemu-args --doorbell /run/ivshm/x.sock --vectors 4
contains "chardev socket,path=/run/ivshm/x.sock,id=ivshm0c"
contains "ivshmem-doorbell,chardev=ivshm0c,vectors=4"
expect 1 "qemu-args: missing region" "$HOST" qemu-args --region "$R.none"
contains "does not exist"

if command -v qemu-system-x86_64 >/dev/null; then
    # the printed arguments are accepted by a real QEMU (no guest is run)
    args=$("$HOST" qemu-args --region "$R")
    # shellcheck disable=SC2086
    if timeout 60 qemu-system-x86_64 -machine q35,accel=tcg -nodefaults -display none \
        -S -qmp stdio $args </dev/null >"$out" 2>&1 <<'Q'
{"execute":"qmp_capabilities"}
{"execute":"quit"}
Q
    then ok; else bad "QEMU rejected: $args"; cat "$out"; fi
else
    not_checked "the printed QEMU arguments (no qemu-system-x86_64)"
fi

expect 0 "libvirt-xml" "$HOST" libvirt-xml --name "$N" --size 4M
contains "<model type='ivshmem-plain'/>"
contains "<size unit='M'>4</size>"
"$HOST" libvirt-xml --name "$N" --size 4M 2>/dev/null > "$out.frag"
xml() { printf "<domain type='kvm'><name>vm1</name><devices>%s</devices></domain>\n" "$1" > /tmp/$N.xml; }
xml "$(cat "$out.frag")"; rm -f "$out.frag"
expect 0 "check-libvirt: good" "$HOST" check-libvirt /tmp/$N.xml
contains "ok: shmem $N (ivshmem-plain): backed by $R"
expect 0 "check-libvirt from stdin" sh -c "\"$HOST\" check-libvirt - < /tmp/$N.xml"
xml ""
expect 1 "check-libvirt: no device" "$HOST" check-libvirt /tmp/$N.xml
contains "has no <shmem> device"
xml "<shmem name='$N'><model type='ivshmem-plain'/><size unit='M'>8</size></shmem>"
expect 1 "check-libvirt: size mismatch" "$HOST" check-libvirt /tmp/$N.xml
contains "the XML says 8388608"
xml "<shmem name='$N'><model type='ivshmem-plain'/><size unit='M'>3</size></shmem>"
expect 1 "check-libvirt: not a power of two" "$HOST" check-libvirt /tmp/$N.xml
contains "not a power of two"
xml "<shmem name='$N'><model type='ivshmem'/><size unit='M'>4</size></shmem>"
expect 1 "check-libvirt: legacy model" "$HOST" check-libvirt /tmp/$N.xml
contains "deprecated"
"$HOST" libvirt-xml --name "$N" --size 4M --doorbell /tmp/$N.sock --vectors 2 > "$out.frag"
xml "$(cat "$out.frag")"; rm -f "$out.frag"
expect 0 "check-libvirt: doorbell" "$HOST" check-libvirt /tmp/$N.xml
contains "doorbell through /tmp/$N.sock, 2 vector(s)"
contains "does not exist yet"
xml "<shmem name='$N'><model type='ivshmem-doorbell'/><size unit='M'>4</size><server path='/tmp/$N.sock'/></shmem>"
expect 1 "check-libvirt: doorbell with a size (libvirt refuses it)" "$HOST" check-libvirt /tmp/$N.xml
contains "libvirt refuses <size> with ivshmem-doorbell"
printf 'garbage' > "$R" # destroy the region's header
xml "<shmem name='$N'><model type='ivshmem-plain'/></shmem>"
expect 1 "check-libvirt: damaged region" "$HOST" check-libvirt /tmp/$N.xml
contains "not a valid libivshm region"
echo "<domain" > /tmp/$N.xml
expect 1 "check-libvirt: bad XML" "$HOST" check-libvirt /tmp/$N.xml
contains "not valid XML"

# the systemd unit as installed, its ExecStart pointed at the built server
if command -v systemd-analyze >/dev/null 2>&1; then
    units=$(mktemp -d)
    sed "s|^ExecStart=[^ ]*ivshm-server |ExecStart=$(cd "$b" && pwd)/qemu-config/ivshm-server |" \
        "$b/qemu-config/ivshm-server@.service" >"$units/ivshm-server@test.service"
    expect 0 "systemd-analyze verify ivshm-server@.service" \
        systemd-analyze verify --man=no "$units/ivshm-server@test.service"
    if [ -s "$out" ]; then bad "systemd-analyze warns:"; cat "$out"; else ok; fi
    # a broken unit is caught (the check can fail)
    printf '[Service]\nExecStart=not-a-path\n' >"$units/broken@test.service"
    expect 1 "systemd-analyze rejects a broken unit" \
        systemd-analyze verify --man=no "$units/broken@test.service"
    rm -rf "$units"
else
    not_checked "the ivshm-server@ unit (no systemd-analyze)"
fi

finish test_host
