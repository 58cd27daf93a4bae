#!/bin/sh
# Simulated VMs for MPI tests: each "VM" is a network + UTS namespace with
# its own hostname and veth address (10.200.0.0/24, bridged to the root
# namespace at 10.200.0.254; traffic never leaves the machine). Each
# "host" has its own region file, so co-resident VMs share one region and
# VMs of different hosts do not, as with real ivshmem devices.
#
#   simvm.sh up SPEC...   SPEC = HOST:VM (e.g. a:0 a:1 b:2): VM n on host
#   simvm.sh down         removes every namespace, link and file it made
#   simvm.sh agent H ...  the rsh agent Open MPI calls (plm_rsh_agent), and
#                         hydra's ssh (options before H are dropped)
#   simvm.sh hosts        the VMs' addresses, comma-separated
#
# State lives in $SIMVM_STATE (default /run/ivshm-simvm).
set -eu
STATE=${SIMVM_STATE:-/run/ivshm-simvm}
BR=ivsbr0
NET=10.200.0

cmd=${1:-}
[ $# -gt 0 ] && shift

vm_up() { # host vm
    h=$1 n=$2 ns=ivsvm$n ip=$NET.$((n + 1))
    ip netns add "$ns"
    ip link add "ivsv$n" type veth peer name eth0 netns "$ns"
    ip link set "ivsv$n" master "$BR" up
    ip -n "$ns" addr add "$ip/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    echo "$ip $ns vm$n-host$h /dev/shm/ivshm-simhost-$h" >>"$STATE/map"
}

case "$cmd" in
up)
    "$0" down >/dev/null 2>&1 || true
    mkdir -p "$STATE"
    : >"$STATE/map"
    ip link add "$BR" type bridge
    ip addr add "$NET.254/24" dev "$BR"
    ip link set "$BR" up
    for spec in "$@"; do
        vm_up "${spec%%:*}" "${spec#*:}"
    done
    ;;
down)
    if [ -f "$STATE/map" ]; then
        while read -r ip ns hn region; do
            ip netns del "$ns" 2>/dev/null || true
            rm -f "$region"
        done <"$STATE/map"
    fi
    for l in $(ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: \(ivsv[0-9]*\)@.*/\1/p'); do
        ip link del "$l" 2>/dev/null || true
    done
    ip link del "$BR" 2>/dev/null || true
    rm -rf "$STATE"
    ;;
agent)
    # Open MPI calls: agent HOST command... (as it would call ssh); MPICH's
    # hydra (-launcher ssh -launcher-exec) puts ssh options first: dropped
    while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
    host=$1
    shift
    line=$(grep "^$host " "$STATE/map") || { echo "simvm: unknown host $host" >&2; exit 255; }
    set -- "$line" "$@"
    ns=$(echo "$1" | cut -d' ' -f2)
    hn=$(echo "$1" | cut -d' ' -f3)
    region=$(echo "$1" | cut -d' ' -f4)
    shift
    # like ssh: the remote command is one shell string
    exec ip netns exec "$ns" unshare --uts sh -c \
        'hostname "$1"; IVSHM_REGION="${SIMVM_REGION_OVERRIDE:-file:$2}"; export IVSHM_REGION; shift 2; exec sh -c "$*"' \
        simvm "$hn" "$region" "$@"
    ;;
hosts)
    cut -d' ' -f1 "$STATE/map" | paste -sd, -
    ;;
regions)
    cut -d' ' -f4 "$STATE/map" | sort -u
    ;;
*)
    sed -n '2,16p' "$0" >&2
    exit 2
    ;;
esac
