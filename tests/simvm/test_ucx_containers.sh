#!/bin/sh
# The UCT transport ivshmem between containers of one host: each container
# has its own pid, IPC and mount namespaces and its own /dev/shm (a tmpfs),
# and the two share only the region file, bind-mounted into both (the
# file: provider), and the host's network (loopback). UCX_TLS is left at
# its default: UCX's own shared memory (posix, sysv, cma) refuses peers in
# another IPC namespace, so UCX must find the region by itself.
#  1. UCX's own shared memory alone (UCX_TLS=self,sm) cannot reach the
#     other container: the endpoint is refused as unreachable;
#  2. ucp_check (every payload checked, 0 B to 4 MiB, around each protocol
#     boundary) passes between the containers, and the transport's counters
#     show the region carried all of it, both ways;
#  3. ucx_perftest (UCX's own tool) between the containers: the region
#     carries its messages too;
#  4. containers that share the pid namespace are one VM to the region (the
#     VM id hashes the pid namespace, docs/lifetimes.md): the transport
#     leaves them to UCX's shared memory, which their IPC namespaces refuse,
#     and tcp carries the job, checked, the region nothing;
#  5. containers with a user namespace as well (root mapped): the region
#     carries the checked payloads all the same;
#  6. two processes of another channel layout (each one's control block
#     says layout 5, as a libivshm older than this one writes it, once both
#     workers are up): neither is reached through the region, each says
#     why in one line, and tcp carries the checked payloads. Before, UCP
#     took the region as reachable and ucp_ep_create failed.
# UCX's rendezvous runs at its default: ucp_check's buffers are private
# memory, which rendezvous moves by UCP's active-message pipeline through
# the region (docs/ucx.md).
set -u
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || simvm_skip "needs root for namespaces"
command -v ucx_perftest >/dev/null || simvm_skip "no ucx_perftest (ucx-utils)"
pkg-config --exists ucx || simvm_skip "no UCX headers (libucx-dev)"
simvm_require_ucx
unshare --pid --ipc --mount --fork --mount-proc true 2>/dev/null ||
    simvm_skip "no pid/IPC/mount namespaces (unshare)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM
pass=0 fail=0

# a port of its own for the address exchange (a leftover from a killed
# run must not answer)
port=$((20000 + $$ % 20000))
cc -O2 "$top_srcdir/tests/simvm/ucp_check.c" -o "$work/ucp_check" \
    $(pkg-config --cflags --libs ucx) || { echo "FAIL: cannot build ucp_check"; exit 1; }
"$top_builddir/libivshm/tools/ivshm" format "file:$work/region" --size 64M --force >/dev/null

# container NSFLAGS OUT CMD...: CMD in new namespaces (NSFLAGS for unshare,
# always with the mount namespace), its own /dev/shm, the region at
# /dev/shm/ivshm-region; stdout and stderr to OUT
container() {
    ns=$1 out=$2
    shift 2
    # shellcheck disable=SC2086
    timeout -k 5 60 unshare $ns --mount --fork --propagation private sh -c '
        mount -t tmpfs -o size=16m container-shm /dev/shm &&
        : >/dev/shm/ivshm-region &&
        mount --bind "$0" /dev/shm/ivshm-region || exit 3
        exec "$@"' "$work/region" "$@" >"$out" 2>&1
}
CONTAINER="--pid --mount-proc --ipc"
export IVSHM_REGION=file:/dev/shm/ivshm-region UCX_IVSHMEM_STATS=y
export LD_PRELOAD="$UCT_LIB"

# pair NSFLAGS NAME SERVER-CMD... -- CLIENT-CMD...: the two sides, each in
# its own container; the exit codes in $rc_s $rc_c
pair() {
    ns=$1 name=$2
    shift 2
    srv=""
    while [ "$1" != -- ]; do srv="$srv $1"; shift; done
    shift
    # shellcheck disable=SC2086
    container "$ns" "$work/$name.server" $srv &
    spid=$!
    # ucx_perftest's client tries to connect once: wait for the listener
    for _ in $(seq 100); do
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
        sleep 0.1
    done
    container "$ns" "$work/$name.client" "$@"
    rc_c=$?
    wait $spid
    rc_s=$?
}
# ucp_pair NSFLAGS NAME [VAR=VALUE...]: ucp_check's server and client on
# a port of their own, with those variables set
ucp_pair() {
    ns=$1 name=$2
    shift 2
    port=$((port + 1))
    pair "$ns" "$name" env "$@" "$work/ucp_check" server "$port" -- \
        env "$@" "$work/ucp_check" client 127.0.0.1 "$port"
}
# sent FILE: bytes the transport's interface in FILE sent through the region
sent() {
    sed -n 's/^uct ivshmem: .* sent [0-9]* messages (\([0-9]*\) bytes).*/\1/p' "$1" | sort -n | tail -1
}
# payload FILE: bytes of payload ucp_check sent
payload() {
    sed -n 's/^ucp_check [a-z]*: .*, \([0-9]*\) bytes sent$/\1/p' "$1"
}

# carried NAME WHAT: both sides of pair NAME checked every payload, and
# each side's interface sent all of its payload through the region
carried() {
    f0=$work/$1.server f1=$work/$1.client
    s0=$(sent "$f0") p0=$(payload "$f0") s1=$(sent "$f1") p1=$(payload "$f1")
    if grep -q "^ucp_check server: 33 sizes, 33 passed, 0 failed" "$f0" &&
       grep -q "^ucp_check client: 33 sizes, 33 passed, 0 failed" "$f1" &&
       [ -n "$p0" ] && [ "${s0:-0}" -ge "$p0" ] && [ -n "$p1" ] && [ "${s1:-0}" -ge "$p1" ]; then
        ok "$2: every payload intact both ways; the region carried $s0 and $s1 bytes of $p0 and $p1"
    else
        bad "$2 (rc $rc_s/$rc_c): region ${s0:-none} and ${s1:-none} bytes of ${p0:-?} and ${p1:-?}"
        cat "$f0" "$f1"
    fi
}

# ---- 1. UCX's own shared memory alone
ucp_pair "$CONTAINER" sm UCX_TLS=self,sm
if [ "$rc_c" != 0 ] && grep -q "ucp_ep_create: Destination is unreachable" "$work/sm.client"; then
    ok "UCX's own shared memory (UCX_TLS=self,sm) cannot reach the other container"
else
    bad "UCX_TLS=self,sm between the containers (client rc $rc_c)"; cat "$work/sm.client"
fi

# ---- 2. checked payloads, UCX_TLS at its default
ucp_pair "$CONTAINER" check
carried check "UCX_TLS at its default"

# ---- 3. ucx_perftest, 2000 messages of 64 KiB
port=$((port + 1))
pair "$CONTAINER" perf ucx_perftest -t tag_bw -s 65536 -n 2000 -w 100 -p "$port" -- \
    ucx_perftest 127.0.0.1 -t tag_bw -s 65536 -n 2000 -w 100 -p "$port"
s=$(sent "$work/perf.client")
if [ "$rc_c" = 0 ] && [ "$rc_s" = 0 ] && [ "${s:-0}" -ge $((2000 * 65536)) ]; then
    ok "ucx_perftest tag_bw between the containers: the region carried $s bytes"
else
    bad "ucx_perftest (rc $rc_s/$rc_c): region ${s:-none} bytes"; tail -n 5 "$work/perf.client" "$work/perf.server"
fi

# ---- 4. one pid namespace: one VM to the region
ucp_pair --ipc samepid
s=$(sent "$work/samepid.client")
if grep -q "^ucp_check client: 33 sizes, 33 passed, 0 failed" "$work/samepid.client" &&
   [ "${s:-x}" = 0 ]; then
    ok "one pid namespace, two IPC namespaces: one VM to the region, nothing through it (tcp), payloads intact"
else
    bad "one pid namespace: region ${s:-none} bytes"; cat "$work/samepid.client"
fi

# ---- 5. user namespaces too
ucp_pair "--user --map-root-user $CONTAINER" user
carried user "with user namespaces too"

# ---- 6. another channel layout on both sides
# forge_layout FILE: once FILE holds two endpoints' control blocks (both
# workers up), their magic "IVMHCTL6" (64-byte aligned) becomes "IVMHCTL5"
forge_layout() {
    python3 - "$1" <<'PY'
import mmap, sys, time
with open(sys.argv[1], "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
    for _ in range(300):
        at, i = [], m.find(b"IVMHCTL6")
        while i >= 0:
            if i % 64 == 0:
                at.append(i)
            i = m.find(b"IVMHCTL6", i + 1)
        if len(at) == 2:
            for i in at:
                m[i + 7:i + 8] = b"5"
            sys.exit(0)
        time.sleep(0.1)
    print("forge_layout: %d control blocks, not 2" % len(at))
    sys.exit(1)
PY
}
# a new region file: no control block of the endpoints before is left
# (a format keeps the bytes of the chunks)
rm -f "$work/region"
"$top_builddir/libivshm/tools/ivshm" format "file:$work/region" --size 64M >/dev/null
: >"$work/forge.out"
rm -f "$work/gate"
forged=1
( forge_layout "$work/region" >>"$work/forge.out" 2>&1 || forged=0
  [ $forged = 0 ] || : >"$work/gate" ) &
ucp_pair "$CONTAINER" layout UCP_CHECK_GATE="$work/gate"
wait
reason="ivshmem: pid [0-9]* is not reached through the region: endpoint [0-9]* uses channel layout 5"
s0=$(sent "$work/layout.server") s1=$(sent "$work/layout.client")
if [ -f "$work/gate" ] &&
   grep -q "^ucp_check server: 33 sizes, 33 passed, 0 failed" "$work/layout.server" &&
   grep -q "^ucp_check client: 33 sizes, 33 passed, 0 failed" "$work/layout.client" &&
   [ "$(grep -c "$reason" "$work/layout.server")" = 1 ] &&
   [ "$(grep -c "$reason" "$work/layout.client")" = 1 ] &&
   [ "${s0:-0}" = 0 ] && [ "${s1:-0}" = 0 ]; then
    ok "peers of another channel layout: not reached through the region, one line each, tcp carried the checked payloads"
else
    bad "peers of another channel layout (rc $rc_s/$rc_c, region ${s0:-none}/${s1:-none} bytes)"
    cat "$work/forge.out" "$work/layout.server" "$work/layout.client"
fi

simvm_checks_end test_ucx_containers
