#!/bin/sh
# /init of the MPI guests (tests/qemu/test_qemu_mpi.sh): a Debian root
# file system with Open MPI, dropbear and soft-RoCE. Kernel arguments:
#   ivt_name=vmN ivt_ip=ADDR    the guest's name and address on eth0
#   ivt_role=lead|bench|member  the lead runs the checks below, bench the
#                               route benchmarks; members serve
#   ivt_role=libvirt            the lead of test_libvirt_mpi.sh's two
#                               guests (vm1, vm2: one region); the host
#                               unplugs and plugs its <shmem> device
# The lead prints "IVT-PASS name" / "IVT-FAIL name: why" for each check on
# the serial console, then "IVT-END", and powers off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
mount -t tmpfs shm /dev/shm
exec >/dev/console 2>&1
hostname "$ivt_name"
ip link set lo up
modprobe e1000
ip addr add "$ivt_ip/24" dev eth0
ip link set eth0 up
# soft-RoCE on eth0 (crc32_generic: rxe's ICRC)
modprobe crc32_generic
modprobe rdma_rxe
modprobe ib_uverbs
modprobe rdma_ucm
rdma link add rxe0 type rxe netdev eth0 || echo "IVT-FAIL rxe: no soft-RoCE link on $ivt_name"
insmod /opt/ivt/ivshmem.ko || echo "IVT-FAIL insmod: ivshmem.ko on $ivt_name"
dropbear -r /etc/dropbear/dropbear_ed25519_host_key -p 22
echo "IVT-READY $ivt_name"

if [ "$ivt_role" != lead ] && [ "$ivt_role" != bench ] && [ "$ivt_role" != ucx ] &&
   [ "$ivt_role" != libvirt ]; then
    while :; do sleep 3600; done
fi

pass() { echo "IVT-PASS $1"; }
fail() { echo "IVT-FAIL $1: $2"; }
show() { sed 's/^/    /' "$1"; }
# job OUT CMD...: runs CMD, its output on the console as it comes and in
# OUT; rc is its exit status
job() {
    out=$1; shift
    ( "$@"; echo $? >"$out.rc" ) 2>&1 | tee "$out" | sed 's/^/    /'
    rc=$(cat "$out.rc")
}

peers="vm2 vm3 vm4"
[ "$ivt_role" = libvirt ] && peers=vm2
for h in $peers; do
    i=0
    until ssh -o ConnectTimeout=5 "$h" true 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 120 ] && break; sleep 1
    done
done
ok=1
for h in $peers; do ssh "$h" true || ok=0; done
[ $ok = 1 ] && pass ssh-all || fail ssh-all "a guest does not answer ssh"

# What a user types: the component's aggregate parameter set (--tune ivshmem)
# turns on both routes; the rest is what TCG guests need (slow: long verbs
# timeouts; one vCPU: yield while idle).
MPIRUN="mpirun --allow-run-as-root --tune ivshmem --mca oob_tcp_if_include eth0
 --mca btl_tcp_if_include eth0 --mca mpi_yield_when_idle 1
 --mca btl_ivshmem_verbs_ack_timeout 20 --mca btl_ivshmem_verbs_connect_timeout 300
 --mca btl_ivshmem_verbose 1"
ALL="--host vm1,vm2,vm3,vm4 -np 4 --map-by node"

# stats_route OUT A B: the route the counters of rank A -> rank B name, if
# it carried messages
stats_route() {
    sed -n "s/^.*btl ivshmem stats: host [^ ]* rank $2 -> rank $3: route \([a-z]*\): \([0-9]*\) sends.*/\1 \2/p" "$1" |
        awk '$2 > 0 { print $1 }' | head -n1
}
# checked_job NAME OUT MPIRUN-ARGS...: mpi_routes check with the counters;
# NAME-job (mpirun's status) and NAME-checked-parts (all 7 parts passed)
checked_job() {
    name=$1 out=$2; shift 2
    job "$out" timeout 900 $MPIRUN "$@" --mca btl_ivshmem_stats 1 /opt/ivt/mpi_routes check
    [ $rc = 0 ] && pass "$name-job" || fail "$name-job" "mpirun exit $rc"
    n=$(grep -c '^IVT-PASS mpi-' "$out")
    [ "$n" = 7 ] && pass "$name-checked-parts" || fail "$name-checked-parts" "$n of 7 parts passed"
}
# routes_are OUT NAME REGION CROSS: region between the two guests of each
# host, CROSS (verbs or nothing) between hosts, in both directions
routes_are() {
    bad=
    for p in "0 1" "1 0" "2 3" "3 2" "0 2" "2 0" "0 3" "3 0" "1 2" "2 1" "1 3" "3 1"; do
        set -- $p
        case "$1$2" in 01|10|23|32) want=region ;; *) want=$CROSS ;; esac
        got=$(stats_route "$OUT" "$1" "$2")
        [ "$got" = "$want" ] || bad="$bad $1->$2:${got:-none}(want ${want:-none})"
    done
    [ -z "$bad" ] && pass "$NAME" || fail "$NAME" "$bad"
}

# test_libvirt_mpi.sh: two libvirt guests on one region. A checked job
# over it; then a job under the unplug of this guest's device (virsh
# detach-device, asked for by "IVT-HOTPLUG-DETACH" on the console) must
# end with the region guard's one message, no crash and no wrong payload;
# after the plug ("IVT-HOTPLUG-ATTACH": the host attaches the device
# again) a new job uses the region again
if [ "$ivt_role" = libvirt ]; then
    TWO="--host vm1,vm2 -np 2 --map-by node"
    echo "== libvirt guests: a checked job over the region"
    t0=$(date +%s)
    checked_job lv /tmp/lv.out $TWO
    r01=$(stats_route /tmp/lv.out 0 1) r10=$(stats_route /tmp/lv.out 1 0)
    [ "$r01 $r10" = "region region" ] && pass lv-region-counters ||
        fail lv-region-counters "0->1 over ${r01:-nothing}, 1->0 over ${r10:-nothing}"
    echo "   ($(($(date +%s) - t0)) s)"

    echo "== the device unplugged under a job (rank 0 here sends, rank 1 on vm2 checks)"
    t0=$(date +%s)
    timeout 600 $MPIRUN $TWO /opt/ivt/mpi_routes stream 1000000 >/tmp/unplug.out 2>&1 &
    jobpid=$!
    i=0
    until grep -q '^stream: 10 messages checked' /tmp/unplug.out; do
        i=$((i + 1))
        { [ $i -gt 600 ] || ! kill -0 $jobpid 2>/dev/null; } && break
        sleep 0.5
    done
    echo "IVT-HOTPLUG-DETACH"
    wait $jobpid; rc=$?
    show /tmp/unplug.out
    if grep -q '^stream: 10 messages checked' /tmp/unplug.out && [ $rc != 0 ] && [ $rc != 124 ]; then
        pass "unplug-job-ends (exit $rc after $(($(date +%s) - t0)) s)"
    else
        fail unplug-job-ends "mpirun exit $rc (124: it hung), the job under way: $(grep -c '^stream: ' /tmp/unplug.out)"
    fi
    n=$(grep -c 'is gone (ivshmem device removed' /tmp/unplug.out)
    [ "$n" = 1 ] && pass unplug-one-message || fail unplug-one-message "$n messages of the region guard"
    bad=$(grep -e '^IVT-FAIL' -e 'exited on signal' -e 'Bus error' -e 'Segmentation' /tmp/unplug.out | head -n1)
    [ -z "$bad" ] && pass unplug-no-crash-no-wrong-payload || fail unplug-no-crash-no-wrong-payload "$bad"
    i=0
    while [ -e /dev/ivshmem0 ] && [ $i -lt 300 ]; do sleep 0.2; i=$((i + 1)); done
    echo "IVT-HOTPLUG-ATTACH"
    i=0
    while [ ! -c /dev/ivshmem0 ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i + 1)); done
    job /tmp/replug.out timeout 600 $MPIRUN $TWO --mca btl_ivshmem_stats 1 /opt/ivt/mpi_routes stream 20
    r01=$(stats_route /tmp/replug.out 0 1)
    if [ $rc = 0 ] && grep -q '^IVT-PASS mpi-stream' /tmp/replug.out && [ "$r01" = region ]; then
        pass replug-job-over-region
    else
        fail replug-job-over-region "mpirun exit $rc, 0->1 over ${r01:-nothing}"
    fi
    echo "   ($(($(date +%s) - t0)) s)"
    echo "IVT-END"
    echo o > /proc/sysrq-trigger
    sleep 10
fi

if [ "$ivt_role" = bench ]; then
    # The route figures (benchmarks/guest-routes.sh): ivshm-osu latency and
    # bw, each in one job over the four guests, for the pair on one host
    # (ranks 0,1: vm1, vm2) and the pair across hosts (ranks 0,2: vm1, vm3).
    # Lines "BENCH setup pair bench bytes value" go to the console.
    OSU="/opt/ivt/ivshm-osu"
    osu() { # SETUP PAIR BENCH MPIRUN-ARGS...
        setup=$1 pair=$2 b=$3; shift 3
        case $b in latency) o="-m 65536 -i 40 -r 3" ;; *) o="-m 262144 -i 2 -r 3" ;; esac
        timeout 900 $MPIRUN $ALL "$@" $OSU "$b" $o -P "$pair" >/tmp/osu.out 2>&1 ||
            { fail "bench-$setup-$b-$pair" "exit $?"; sed 's/^/    /' /tmp/osu.out | tail -20; return; }
        awk -v s="$setup" -v p="$pair" -v b="$b" '/^[0-9]/ { print "BENCH", s, p, b, $1, $2 }' /tmp/osu.out
        pass "bench-$setup-$b-$pair"
    }
    for b in latency bw; do
        osu routes 0,1 "$b"                                     # region
        osu routes 0,2 "$b"                                     # verbs
        osu verbs-only 0,1 "$b" --mca btl_ivshmem_region none   # verbs loopback on one host
        osu tcp 0,2 "$b" --mca btl self,vader,tcp               # tcp across hosts
        osu tcp 0,1 "$b" --mca btl self,vader,tcp               # tcp on one host
    done
    echo "IVT-END"
    echo o > /proc/sysrq-trigger
    sleep 10
fi

# The mixed job again through Open MPI's pml ucx (docs/ucx.md, Real
# guests): the UCT transport ivshmem (preloaded) between the guests of a
# host, UCX's own verbs transports (rc, ud) over soft-RoCE between hosts.
# No tcp in UCX_TLS: a peer on the other host has verbs or nothing.
#  * UCX_UD_ETH_DGID_CHECK=n: ud_verbs takes a RoCE packet's IP version
#    from the work completion's sl, which mlx5 fills and rxe leaves 0, so
#    it reads every RoCE v2 IPv4 packet's address as IPv6 and drops them
#    all: without it, wire-up never ends (rc needs ud to connect);
#  * UCX_RNDV_THRESH=inf: until the transport has put/get zcopy,
#    rendezvous would move a co-resident pair's large messages over rc;
#  * what TCG guests need: rxe answers in milliseconds to seconds (rc:
#    5 s, which UCX rounds to the verbs exponent 20, ~4.3 s per try, as
#    the BTL's ack timeout above; ud: 300 s before a peer counts as gone,
#    first retransmission after 100 ms), no keepalive rounds;
#  * osc ucx off and btl self only: one UCP context and one lease per rank
#    (osc ucx opens a second context, the ivshmem BTL attaches too), so
#    each rank prints one set of counters;
#  * UCX_LOG_LEVEL=info: UCX names each endpoint configuration's lanes.
UCX_ENV="UCX_TLS=self,ivshmem,rc,ud UCX_UD_ETH_DGID_CHECK=n UCX_RNDV_THRESH=inf
 UCX_RC_TIMEOUT=5s UCX_RC_RETRY_COUNT=7 UCX_RC_RNR_TIMEOUT=100ms UCX_RC_RNR_RETRY_COUNT=7
 UCX_UD_TIMEOUT=300s UCX_UD_TIMER_TICK=100ms UCX_KEEPALIVE_INTERVAL=inf
 UCX_IVSHMEM_STATS=y UCX_LOG_LEVEL=info UCX_WARN_UNUSED_ENV_VARS=n
 LD_PRELOAD=/opt/ivt/libuct_ivshmem.so"
# ucx_counts OUT HOST: "device sent-bytes received-bytes" of HOST's
# ivshmem interface (UCX_IVSHMEM_STATS=y), nothing if it printed none
ucx_counts() {
    sed -n "s/^uct ivshmem: $2 pid [0-9]* device \([^:]*\): sent [0-9]* messages (\([0-9]*\) bytes), received [0-9]* (\([0-9]*\) bytes).*/\1 \2 \3/p" "$1" | head -n1
}
# ucx_lanes OUT HOST: the tag lanes of each endpoint configuration HOST's
# rank printed, one a line ("ivshmem/region_... rc_verbs/rxe0:1")
ucx_lanes() {
    sed -n "s/^.*\[$2:[^]]*\] .* ep_cfg\[[0-9]*\]: tag(\([^)]*\)).*/\1/p" "$1"
}
ucx_job() {
    if [ ! -f /opt/ivt/libuct_ivshmem.so ]; then
        echo "   (the UCX transport was not built: pml ucx not run)"
        return
    fi
    echo "== pml ucx: the region (UCT ivshmem) inside each host, UCX rc/ud over soft-RoCE between hosts"
    t0=$(date +%s)
    xs=
    for v in $UCX_ENV; do xs="$xs -x $v"; done
    job /tmp/ucx.out timeout 900 mpirun --allow-run-as-root --mca pml ucx \
        --mca pml_ucx_tls any --mca pml_ucx_devices any --mca osc ^ucx --mca btl self \
        --mca oob_tcp_if_include eth0 --mca mpi_yield_when_idle 1 $xs $ALL /opt/ivt/mpi_routes check
    [ $rc = 0 ] && pass ucx-job || fail ucx-job "mpirun exit $rc"
    n=$(grep -c '^IVT-PASS mpi-' /tmp/ucx.out)
    [ "$n" = 7 ] && pass ucx-checked-parts || fail ucx-checked-parts "$n of 7 parts passed"
    # The region's counters (each rank's interface, at close): the two
    # guests of a host on one device, the hosts on two; each co-resident
    # rank sent its partner's share (more than the pair's point-to-point
    # payload: 5 ping-pongs of 8 B..300 KB and the 4 MiB message, 5803437
    # bytes) and not the other host's too (which would double it), and
    # every byte one sent into the region its partner received.
    pair=5803437 bad=
    for p in "vm1 vm2" "vm2 vm1" "vm3 vm4" "vm4 vm3"; do
        set -- $p
        set -- $(ucx_counts /tmp/ucx.out "$1") $(ucx_counts /tmp/ucx.out "$2") "$1" "$2"
        # $1 device, $2 sent, $3 received; $4..$6 the partner's; $7 $8 names
        if [ $# != 8 ] || [ "$1" != "$4" ] || [ "$2" -le $pair ] || [ "$2" -ge $((2 * pair)) ] ||
           [ "$2" != "$6" ]; then
            bad="$bad ${7:-?}->${8:-?}"
        fi
    done
    d1=$(ucx_counts /tmp/ucx.out vm1 | cut -d' ' -f1) d3=$(ucx_counts /tmp/ucx.out vm3 | cut -d' ' -f1)
    [ -n "$d1" ] && [ "$d1" != "$d3" ] || bad="$bad one-device(${d1:-none}=${d3:-none})"
    [ -z "$bad" ] && pass ucx-region-pairs || fail ucx-region-pairs "counters wrong for:$bad"
    # UCX's word on the lanes: each rank has a configuration with the
    # region's device (its partner's) and one of verbs lanes only (the
    # other host's two ranks)
    bad=
    for h in vm1 vm2 vm3 vm4; do
        dev=$(ucx_counts /tmp/ucx.out $h | cut -d' ' -f1)
        ucx_lanes /tmp/ucx.out $h | grep -q "ivshmem/${dev:-none}" || bad="$bad $h:no-region-lane"
        ucx_lanes /tmp/ucx.out $h | grep -v -e ivshmem -e self/ | grep -q '_verbs/rxe0:1' ||
            bad="$bad $h:no-verbs-only-configuration"
    done
    [ -z "$bad" ] && pass ucx-cross-verbs || fail ucx-cross-verbs "$bad"
    echo "   ($(($(date +%s) - t0)) s)"
}
[ "$ivt_role" = ucx ] && { ucx_job; echo "IVT-END"; echo o > /proc/sysrq-trigger; sleep 10; }

echo "== mixed job: vm1+vm2 share region A, vm3+vm4 region B, hosts over soft-RoCE"
t0=$(date +%s)
checked_job mixed /tmp/mixed.out $ALL
# the burst to the other host outran the receiver's buffers: its sender
# waited for credits (a sender that does not count them never waits)
w=$(sed -n "s/^.*btl ivshmem stats: host [^ ]* rank 0 -> rank 3: route verbs: .* \([0-9]*\) waits for credits.*/\1/p" /tmp/mixed.out)
[ "${w:-0}" -gt 0 ] && pass mixed-credit-waits ||
    fail mixed-credit-waits "rank 0 -> rank 3 (verbs) waited for credits ${w:-0} times in a burst of 300"
OUT=/tmp/mixed.out NAME=mixed-routes CROSS=verbs routes_are
grep -q "^IVT-PASS mpi-large-4MiB" /tmp/mixed.out && pass mixed-large || fail mixed-large "no checked 4 MiB exchange"
echo "   ($(($(date +%s) - t0)) s)"

echo "== MPI_Alloc_mem buffers to the other host: one RDMA read each (docs/verbs.md)"
t0=$(date +%s)
# verbs_counts OUT: "sends gets puts" of rank 0 -> rank 3 (route verbs)
verbs_counts() {
    sed -n "s/^.*btl ivshmem stats: host [^ ]* rank 0 -> rank 3: route verbs: \([0-9]*\) sends.*, \([0-9]*\) gets [0-9]* bytes, \([0-9]*\) puts.*/\1 \2 \3/p" "$1" | head -n1
}
# allocmem NAME OUT MPIRUN-ARGS...: the 1 MiB ping-pong (6 round trips)
# between MPI_Alloc_mem buffers of rank 0 and rank 3; sets sends, rdma
allocmem() {
    name=$1 out=$2; shift 2
    job "$out" timeout 600 $MPIRUN $ALL --mca btl_ivshmem_stats 1 "$@" /opt/ivt/mpi_routes allocmem
    set -- $(verbs_counts "$out")
    sends=${1:-0} rdma=$((${2:-0} + ${3:-0}))
    lat=$(sed -n 's/^IVT-INFO allocmem-latency \([0-9]*\) us/\1/p' "$out")
    echo "   $name: rank 0 -> rank 3 (verbs): $sends sends, $rdma RDMA transfers; 1 MiB latency ${lat:-?} us (TCG)"
    ok=0
    [ $rc = 0 ] && grep -q '^IVT-PASS mpi-allocmem' "$out" && ok=1
}
# the default: a job with a peer on another host keeps MPI_Alloc_mem
# private, which the HCA registers: each 1 MiB message rank 0 receives is
# one RDMA read (or write), with a handful of sends around them
allocmem allocmem-private /tmp/allocmem.out
if [ $ok = 1 ] && [ "$rdma" = 6 ] && [ "$sends" -le 24 ]; then
    pass allocmem-rdma
else
    fail allocmem-rdma "exit $rc, $rdma RDMA transfers (want 6), $sends sends (want <= 24)"
fi
# mpool_ivshmem_verbs 1 keeps them in the region (BAR2, which the HCA
# cannot register): the same messages go through sends
allocmem allocmem-region /tmp/allocmem-region.out --mca mpool_ivshmem_verbs 1
if [ $ok = 1 ] && [ "$rdma" = 0 ] && [ "$sends" -gt 24 ]; then
    pass allocmem-region-by-sends
else
    fail allocmem-region-by-sends "exit $rc, $rdma RDMA transfers (want 0), $sends sends (want > 24)"
fi
echo "   ($(($(date +%s) - t0)) s)"

ucx_job

echo "== fault: a rank killed mid-transfer over verbs; a job beside it goes on"
t0=$(date +%s)
timeout 900 $MPIRUN --host vm2,vm4 -np 2 --map-by node /opt/ivt/mpi_routes stream 300 >/tmp/beside.out 2>&1 &
beside=$!
job /tmp/victim.out timeout 300 $MPIRUN --host vm1,vm3 -np 2 --map-by node /opt/ivt/mpi_routes victim
t1=$(($(date +%s) - t0))
if [ $rc != 0 ] && [ $rc != 124 ] && grep -q "killed mid-stream" /tmp/victim.out; then
    pass "victim-job-ends (exit $rc after $t1 s)"
else
    fail victim-job-ends "mpirun exit $rc after $t1 s (124: it hung)"
fi
wait $beside
rc=$?
show /tmp/beside.out
if [ $rc = 0 ] && grep -q "^IVT-PASS mpi-stream" /tmp/beside.out; then
    pass job-beside-unaffected
else
    fail job-beside-unaffected "mpirun exit $rc"
fi
echo "   ($(($(date +%s) - t0)) s)"

echo "== no RDMA device on one host: one message, and the job runs over tcp"
t0=$(date +%s)
for h in vm3 vm4; do ssh "$h" rdma link delete rxe0; done
job /tmp/nordma.out timeout 900 $MPIRUN $ALL --mca btl self,vader,ivshmem,tcp --mca btl_ivshmem_stats 1 \
    /opt/ivt/mpi_routes check
[ $rc = 0 ] && pass nordma-job || fail nordma-job "mpirun exit $rc"
n=$(grep -c "cannot be used on this VM" /tmp/nordma.out)
[ "$n" = 1 ] && pass nordma-one-message || fail nordma-one-message "$n messages"
grep -q "Problem: no usable RDMA device" /tmp/nordma.out && pass nordma-says-why ||
    fail nordma-says-why "the message does not name the cause"
OUT=/tmp/nordma.out NAME=nordma-routes CROSS= routes_are
echo "   ($(($(date +%s) - t0)) s)"

echo "IVT-END"
echo o > /proc/sysrq-trigger
sleep 10
