/*
 * The `ivshmem` interface: one channel endpoint of the region per UCT
 * interface, its receive side (each whole message copied out of the region
 * and handed to UCX's active-message handler), progress, the addresses it
 * publishes and the reachability rule, which asks the region whether the
 * peer holds a live lease in it.
 */
#include "uct_ivshmem.h"

#include <ucs/time/time.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ucs_config_field_t uct_ivshmem_iface_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_ivshmem_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"SAME_VM", "n",
     "Also carry processes of this VM (they share the region too). Off: "
     "UCX's own shared memory (posix, cma) serves them.",
     ucs_offsetof(uct_ivshmem_iface_config_t, same_vm), UCS_CONFIG_TYPE_BOOL},

    {"STATS", "n",
     "Print the interface's message counters on stderr when it closes.",
     ucs_offsetof(uct_ivshmem_iface_config_t, stats), UCS_CONFIG_TYPE_BOOL},

    {"PEER_TIMEOUT", "30s",
     "A peer in another VM whose lease has had no heartbeat for longer than "
     "this (past the region's lease timeout; its VM may be paused) fails "
     "its endpoints with an endpoint timeout when UCP's keepalive asks "
     "(error handling mode peer). Nothing of it is reclaimed. inf: never.",
     ucs_offsetof(uct_ivshmem_iface_config_t, peer_timeout),
     UCS_CONFIG_TYPE_TIME_UNITS},

    {NULL}
};

static uct_iface_ops_t uct_ivshmem_iface_ops;
/* UCX's base internal ops, and under 1.18 reachability (compat header) */
static uct_iface_internal_ops_t uct_ivshmem_iface_internal_ops =
    UCT_IVSHMEM_IFACE_INTERNAL_OPS_INIT;

/* A received piece is untrusted: another VM may rewrite it while UCX
 * parses it, so it is copied out first, and only a whole message (the
 * channel cuts nothing we send: bcopy is bounded by one fragment) with an
 * active-message id UCX knows is delivered. A whole message comes to the
 * channel's whole handler; its length is bounded here too, by rx_buf's
 * (a whole fragment or lent region piece may be longer than a cell). */
static void uct_ivshmem_iface_rx_whole(void *arg, uint32_t sender,
                                       uint32_t tag, const void *data,
                                       uint32_t len)
{
    uct_ivshmem_iface_t *iface = arg;
    if (tag >= UCT_AM_ID_MAX || len > iface->max_bcopy) {
        iface->cnt.rx_dropped++;
        ucs_warn("ivshmem: dropped a message from peer %u (id %u, %u "
                 "bytes): not an active message of ours",
                 sender, tag, len);
        return;
    }
    memcpy(iface->rx_buf, data, len);
    iface->cnt.rx_msgs++;
    iface->cnt.rx_bytes += len;
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_RECV, tag,
                       iface->rx_buf, len, "RX: AM");
    uct_iface_invoke_am(&iface->super, (uint8_t)tag, iface->rx_buf, len, 0);
}

/* A piece of a longer message: our sends never split one. */
static void uct_ivshmem_iface_rx(void *arg, const ivshm_msg_t *m)
{
    uct_ivshmem_iface_t *iface = arg;
    iface->cnt.rx_dropped++;
    ucs_warn("ivshmem: dropped a message from peer %u (id %u, %u of %llu "
             "bytes at %llu): not one whole active message",
             m->sender, m->tag, m->len, (unsigned long long)m->total,
             (unsigned long long)m->offset);
}

/* Liveness, the region's word (docs/lifetimes.md): a peer whose lease is
 * gone (proven dead: its own detach, a gc of its VM that found its pid
 * gone, an admin's 'ivshm gc --force') is lost, and UCX hears it as
 * UCS_ERR_CONNECTION_RESET on each endpoint to it. A peer whose lease is
 * only in doubt (another VM, heartbeat expired: the VM may be paused) is
 * not reported here: nothing of it was reclaimed, it may answer again,
 * and its sends wait for room meanwhile; UCP's keepalive asks the
 * endpoint (uct_ivshmem_ep_peer_check), which fails it once the silence
 * passes UCX_IVSHMEM_PEER_TIMEOUT. Our own lease reclaimed:
 * every endpoint fails with UCS_ERR_ENDPOINT_TIMEOUT (this process
 * stalled past the lease timeout and may not touch the region again).
 * The channel calls this wherever it finds the loss: in our progress, but
 * also inside a send (UCP's, from its own active-message handler or with
 * the endpoint in hand), where UCP's error handler must not run: it may
 * discard the endpoint the send is on. So the endpoints are marked here
 * and UCX is told by uct_ivshmem_iface_progress, right after the channel's
 * progress returns, or on the next call. */
static void uct_ivshmem_iface_event(void *arg, int kind, uint32_t peer)
{
    uct_ivshmem_iface_t *iface = arg;
    if (kind == IVSHM_EV_LEASE_LOST) {
        ucs_error("ivshmem: this process' lease in region %s was reclaimed "
                  "(stalled past the lease timeout): the transport stops",
                  iface->md->device);
        uct_ivshmem_iface_fail_eps_later(iface, UINT32_MAX,
                                         UCS_ERR_ENDPOINT_TIMEOUT);
    } else {
        ucs_diag("ivshmem: peer %u of region %s is gone", peer,
                 iface->md->device);
        uct_ivshmem_iface_fail_eps_later(iface, peer,
                                         UCS_ERR_CONNECTION_RESET);
    }
}

/* The channel's geometry: the BTL's defaults (mpi-plugin/btl), not the
 * library's. 1088-byte cells carry a message of up to 1056 bytes inline,
 * so UCP's eager messages up to 1 KiB go short, in one cell, instead of
 * through a fragment that the receiver reads from the sender's block and
 * acknowledges (UCP tag_lat at 1 KiB: 0.78-0.82 us with the library's
 * 128-byte cells, 0.65 us with these; docs/ucx.md "Latency"); 32 cells a
 * fast box keep one within its 64 KiB bank. Fragments stay the library's (both sides must agree on
 * their size: it is max_bcopy). $IVSHM_* settings still win. */
static void uct_ivshmem_chan_config(ivshm_ep_config_t *cfg)
{
    ivshm_ep_config_defaults(cfg);
    cfg->cell_size = 1088;
    cfg->fbox_cells = 32;
    ivshm_ep_config_env(cfg); /* IVSHM_* settings win */
}

static unsigned uct_ivshmem_iface_progress(uct_iface_h tl_iface)
{
    uct_ivshmem_iface_t *iface = ucs_derived_of(tl_iface, uct_ivshmem_iface_t);
    int n = ivshm_ep_progress_whole(iface->chan, uct_ivshmem_iface_rx_whole);
    unsigned count = n > 0 ? (unsigned)n : 0;
    if (ucs_unlikely(iface->fails_due))
        uct_ivshmem_iface_report_fails(iface);
    if (iface->pending_eps)
        count += uct_ivshmem_iface_dispatch_pending(iface);
    return count;
}

static ucs_status_t uct_ivshmem_iface_query(uct_iface_h tl_iface,
                                            uct_iface_attr_t *attr)
{
    uct_ivshmem_iface_t *iface = ucs_derived_of(tl_iface, uct_ivshmem_iface_t);
    uct_base_iface_query(&iface->super, attr);
    attr->iface_addr_len = sizeof(uct_ivshmem_iface_addr_t);
    attr->device_addr_len = sizeof(uct_ivshmem_dev_addr_t);
    attr->ep_addr_len = 0;
    attr->max_conn_priv = 0;
    attr->cap.flags = UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY |
                      UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CB_SYNC |
                      UCT_IFACE_FLAG_CONNECT_TO_IFACE |
                      UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE |
                      UCT_IVSHMEM_IFACE_CAP_FLAGS;
    if (uct_ivshmem_iface_has_event_fd(iface))
        attr->cap.event_flags = UCT_IFACE_FLAG_EVENT_SEND_COMP |
                                UCT_IFACE_FLAG_EVENT_RECV |
                                UCT_IFACE_FLAG_EVENT_FD;
    attr->cap.am.max_short = iface->max_short - sizeof(uint64_t);
    attr->cap.am.max_bcopy = iface->max_bcopy;
    attr->cap.am.min_zcopy = 0;
    attr->cap.am.max_zcopy = 0;
    attr->cap.am.opt_zcopy_align = UCS_SYS_CACHE_LINE_SIZE;
    attr->cap.am.align_mtu = attr->cap.am.opt_zcopy_align;
    attr->cap.am.max_hdr = 0;
    attr->cap.am.max_iov = 1;
    uct_ivshmem_rma_query(iface, attr); /* put, get, atomics */
    /* Measured on the 16-core machine (docs/ucx.md, Performance
     * estimates): one-way 8-byte latency through UCP 0.68 us against
     * posix's 0.49 us, i.e. about 0.59 us at UCT level with both ends'
     * overhead (UCP adds ~0.1 us to posix's 0.39 us am_lat); UCP's AM lane
     * score is 1 / (latency + 2 overhead): 590 ns here, ahead of rc_mlx5
     * (600 + 2 x 40 ns) and ud (630 + 2 x 80), far ahead of tcp (50 us
     * overhead), behind posix (80 + 2 x 10). Bandwidth: eager bcopy
     * messages moved 8.0-10.3 GB/s (tag_bw 8-64 KiB), MPI 9.5 GB/s at
     * best: 9 GB/s, no more. */
    attr->latency = ucs_linear_func_make(550e-9, 0);
    attr->bandwidth.dedicated = 9000.0 * UCS_MBYTE;
    attr->bandwidth.shared = 0;
    attr->overhead = 20e-9;
    attr->priority = 0;
    return UCS_OK;
}

static ucs_status_t uct_ivshmem_iface_get_device_address(uct_iface_h tl_iface,
                                                         uct_device_addr_t *addr)
{
    uct_ivshmem_iface_t *iface = ucs_derived_of(tl_iface, uct_ivshmem_iface_t);
    memcpy(((uct_ivshmem_dev_addr_t *)addr)->region_uuid, iface->md->uuid, 16);
    return UCS_OK;
}

static ucs_status_t uct_ivshmem_iface_get_address(uct_iface_h tl_iface,
                                                  uct_iface_addr_t *addr)
{
    uct_ivshmem_iface_t *iface = ucs_derived_of(tl_iface, uct_ivshmem_iface_t);
    uct_ivshmem_iface_addr_t a;
    ivshm_identity_t id;
    uint8_t chan[IVSHM_EP_ADDR_SIZE];
    if (ivshm_self_identity(iface->md->r, &id) != IVSHM_OK ||
        ivshm_ep_address(iface->chan, chan) != IVSHM_OK)
        return UCS_ERR_IO_ERROR;
    memset(&a, 0, sizeof(a));
    a.vm_id = id.vm_id;
    a.slot = id.slot;
    a.gen = id.gen;
    a.pid = id.pid;
    a.max_bcopy = (uint32_t)iface->max_bcopy;
    memcpy(a.chan_tail, chan + 16, sizeof(a.chan_tail));
    a.version = UCT_IVSHMEM_WIRE_VERSION;
    memcpy(addr, &a, sizeof(a));
    return UCS_OK;
}

void uct_ivshmem_peer_unpack(const uct_ivshmem_dev_addr_t *dev,
                             const uct_ivshmem_iface_addr_t *addr,
                             ivshm_identity_t *id,
                             uint8_t chan[IVSHM_EP_ADDR_SIZE])
{
    memset(id, 0, sizeof(*id));
    memcpy(id->region_uuid, dev->region_uuid, 16);
    id->vm_id = addr->vm_id;
    id->slot = addr->slot;
    id->gen = addr->gen;
    id->pid = addr->pid;
    memcpy(chan, dev->region_uuid, 16);
    memcpy(chan + 16, addr->chan_tail, UCT_IVSHMEM_CHAN_TAIL);
}

/* Same region (UUID), and the peer's lease in it live, of the same
 * generation, in another VM (or this one, with SAME_VM): the region's
 * word, as for the BTL; host names and boot ids play no part. Both sides
 * must send messages of the same largest size (IVSHM_FRAG_SIZE alike).
 * Last, as the BTL does, the peer's channel endpoint must connect: one of
 * another libivshm (another channel layout, a geometry this library
 * refuses) or a damaged one is not reached, so UCP weighs its other
 * transports instead of failing uct_ep_create. Connecting twice is
 * harmless: the endpoint keeps the record of that peer's life. */
int uct_ivshmem_iface_reaches(uct_iface_h tl_iface,
                              const uct_device_addr_t *dev_addr,
                              const uct_iface_addr_t *iface_addr)
{
    uct_ivshmem_iface_t *iface = ucs_derived_of(tl_iface, uct_ivshmem_iface_t);
    uct_ivshmem_dev_addr_t dev;
    uct_ivshmem_iface_addr_t peer;
    ivshm_identity_t id;
    uint8_t chan[IVSHM_EP_ADDR_SIZE];
    if (dev_addr == NULL || iface_addr == NULL)
        return 0;
    memcpy(&dev, dev_addr, sizeof(dev));
    memcpy(&peer, iface_addr, sizeof(peer));
    if (memcmp(dev.region_uuid, iface->md->uuid, 16) != 0) {
        ucs_debug("ivshmem: a peer maps another region: not reachable");
        return 0;
    }
    if (peer.version != UCT_IVSHMEM_WIRE_VERSION) {
        /* said once per process: UCP asks again for every lane it weighs */
        static int said;
        if (!said) {
            said = 1;
            ucs_warn("ivshmem: a peer's transport speaks wire version %u, "
                     "this one %u (another libuct_ivshmem build): not "
                     "reached through the region",
                     peer.version, UCT_IVSHMEM_WIRE_VERSION);
        }
        return 0;
    }
    if (peer.max_bcopy != iface->max_bcopy) {
        ucs_diag("ivshmem: a peer sends messages of up to %u bytes, this "
                 "process %zu (IVSHM_FRAG_SIZE differs): not reached through "
                 "the region", peer.max_bcopy, iface->max_bcopy);
        return 0;
    }
    uct_ivshmem_peer_unpack(&dev, &peer, &id, chan);
    /* settled: a peer in doubt now would be unreachable for the job */
    ivshm_locality_t loc = ivshm_peer_locality_settled(iface->md->r, &id);
    int reached = loc == IVSHM_PEER_OTHER_VM ||
                  (loc == IVSHM_PEER_SAME_VM && iface->same_vm);
    uint32_t chan_peer;
    if (reached && ivshm_ep_connect(iface->chan, chan, sizeof(chan),
                                    &chan_peer) != IVSHM_OK) {
        /* said once per process, as UCP asks again for every lane */
        static int said;
        if (!said) {
            said = 1;
            ucs_warn("ivshmem: pid %u is not reached through the region: "
                     "%s", id.pid, ivshm_last_error());
        }
        return 0;
    }
    ucs_debug("ivshmem: pid %u (slot %u gen %u): %s, %s", id.pid, id.slot,
              id.gen, ivshm_locality_str(loc),
              reached ? "reachable" : "not reachable");
    return reached;
}

static ucs_status_t uct_ivshmem_iface_flush(uct_iface_h tl_iface,
                                            unsigned flags,
                                            uct_completion_t *comp)
{
    uct_ivshmem_iface_t *iface = ucs_derived_of(tl_iface, uct_ivshmem_iface_t);
    if (comp != NULL)
        return UCS_ERR_UNSUPPORTED;
    (void)flags;
    /* a committed message is in the peer's queue, in shared memory: done;
     * a pending one is still to go (UCP asks again: NO_RESOURCE is no
     * answer of an interface's flush, UCP takes it for an error) */
    return iface->pending_eps ? UCS_INPROGRESS : UCS_OK;
}

/* the counters of UCX_IVSHMEM_STATS=y at close: messages, then RMA */
static void uct_ivshmem_iface_print_stats(uct_ivshmem_iface_t *iface)
{
    const uct_ivshmem_counters_t *c = &iface->cnt;
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    uct_ivshmem_say(
            "uct ivshmem: %s pid %d device %s: sent %llu messages (%llu "
            "bytes), received %llu (%llu bytes), dropped %llu, no room %llu, "
            "pending done %llu\n",
            host, (int)getpid(), iface->md->device,
            (unsigned long long)c->tx_msgs, (unsigned long long)c->tx_bytes,
            (unsigned long long)c->rx_msgs, (unsigned long long)c->rx_bytes,
            (unsigned long long)c->rx_dropped, (unsigned long long)c->tx_full,
            (unsigned long long)c->pending_done);
    uct_ivshmem_say(
            "uct ivshmem rma: %s pid %d device %s: put %llu bytes (short "
            "%llu, bcopy %llu, zcopy %llu), get %llu bytes (short %llu, "
            "bcopy %llu, zcopy %llu), atomics %llu, refused %llu\n",
            host, (int)getpid(), iface->md->device,
            (unsigned long long)(c->put_short + c->put_bcopy + c->put_zcopy),
            (unsigned long long)c->put_short, (unsigned long long)c->put_bcopy,
            (unsigned long long)c->put_zcopy,
            (unsigned long long)(c->get_short + c->get_bcopy + c->get_zcopy),
            (unsigned long long)c->get_short, (unsigned long long)c->get_bcopy,
            (unsigned long long)c->get_zcopy, (unsigned long long)c->atomics,
            (unsigned long long)c->rma_refused);
}

UCS_CLASS_INIT_FUNC(uct_ivshmem_iface_t, uct_md_h tl_md,
                           uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    const uct_ivshmem_iface_config_t *cfg =
        ucs_derived_of(tl_config, uct_ivshmem_iface_config_t);
    uct_ivshmem_md_t *md = ucs_derived_of(tl_md, uct_ivshmem_md_t);

    UCT_CHECK_PARAM(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE,
                    "UCT_IFACE_PARAM_FIELD_OPEN_MODE is not defined");
    if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("ivshmem: only UCT_IFACE_OPEN_MODE_DEVICE is supported");
        return UCS_ERR_UNSUPPORTED;
    }
    /* one channel endpoint is used by one thread at a time */
    if (ucs_derived_of(worker, uct_priv_worker_t)->thread_mode ==
        UCS_THREAD_MODE_MULTI) {
        ucs_error("ivshmem: a multi-threaded worker is not supported");
        return UCS_ERR_INVALID_PARAM;
    }
    if (md->r == NULL)
        return UCS_ERR_NO_DEVICE;

    UCS_CLASS_CALL_SUPER_INIT(uct_base_iface_t, &uct_ivshmem_iface_ops,
                              &uct_ivshmem_iface_internal_ops, tl_md, worker,
                              params, tl_config UCS_STATS_ARG(NULL)
                              UCS_STATS_ARG(UCT_IVSHMEM_NAME));

    self->md = md;
    memset(&self->cnt, 0, sizeof(self->cnt));
    self->pending_eps = 0;
    self->same_vm = cfg->same_vm;
    self->stats = cfg->stats;
    self->fails_due = 0;
    self->peer_timeout_ms = cfg->peer_timeout == UCS_TIME_INFINITY
                                ? UINT64_MAX
                                : (uint64_t)ucs_time_to_msec(cfg->peer_timeout);
    ucs_list_head_init(&self->eps);
    ivshm_ep_config_t chan_cfg;
    uct_ivshmem_chan_config(&chan_cfg);
    if (ivshm_ep_config_check(&chan_cfg) != IVSHM_OK) {
        ucs_error("ivshmem: %s", ivshm_last_error());
        return UCS_ERR_INVALID_PARAM;
    }
    /* a whole message that fits a cell travels inline in it */
    self->max_short = chan_cfg.cell_size - IVSHM_CELL_OVERHEAD;
    if (ivshm_ep_create(md->dom, -1, &chan_cfg, uct_ivshmem_iface_rx, self,
                        &self->chan) != IVSHM_OK) {
        ucs_error("ivshmem: cannot create a channel endpoint in region %s: "
                  "%s", md->device, ivshm_last_error());
        return UCS_ERR_NO_RESOURCE;
    }
    ivshm_ep_set_event_handler(self->chan, uct_ivshmem_iface_event, self);
    ivshm_ep_set_whole_handler(self->chan, uct_ivshmem_iface_rx_whole);
    self->max_bcopy = ivshm_ep_max_single(self->chan);
    /* the interface address leaves out the channel address' leading
     * region UUID (ivshm/channel.h): make sure it leads */
    uint8_t chan[IVSHM_EP_ADDR_SIZE];
    if (ivshm_ep_address(self->chan, chan) != IVSHM_OK ||
        memcmp(chan, md->uuid, 16) != 0) {
        ucs_error("ivshmem: this libivshm's channel address does not begin "
                  "with the region's UUID");
        ivshm_ep_destroy(self->chan);
        return UCS_ERR_UNSUPPORTED;
    }
    self->rx_buf = ucs_malloc(self->max_bcopy, "ivshmem rx");
    self->tx_buf = ucs_malloc(self->max_bcopy, "ivshmem tx");
    self->get_buf = ucs_malloc(self->max_bcopy, "ivshmem get");
    if (self->rx_buf == NULL || self->tx_buf == NULL || self->get_buf == NULL) {
        ucs_free(self->rx_buf);
        ucs_free(self->tx_buf);
        ucs_free(self->get_buf);
        ivshm_ep_destroy(self->chan);
        return UCS_ERR_NO_MEMORY;
    }
    uct_ivshmem_iface_event_open(self);
    ucs_debug("ivshmem: interface on %s, channel endpoint %u, short %zu, "
              "bcopy %zu", md->device, ivshm_ep_index(self->chan),
              self->max_short, self->max_bcopy);
    return UCS_OK;
}

UCS_CLASS_CLEANUP_FUNC(uct_ivshmem_iface_t)
{
    uct_base_iface_progress_disable(&self->super.super,
                                    UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    if (self->stats) {
        uct_ivshmem_iface_print_stats(self);
    }
    uct_ivshmem_iface_event_close(self);
    ivshm_ep_destroy(self->chan);
    ucs_free(self->rx_buf);
    ucs_free(self->tx_buf);
    ucs_free(self->get_buf);
}

UCS_CLASS_DEFINE(uct_ivshmem_iface_t, uct_base_iface_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_ivshmem_iface_t, uct_iface_t, uct_md_h,
                          uct_worker_h, const uct_iface_params_t *,
                          const uct_iface_config_t *);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_ivshmem_iface_t, uct_iface_t);

static uct_iface_ops_t uct_ivshmem_iface_ops = {
    .ep_am_short = uct_ivshmem_ep_am_short,
    .ep_am_short_iov = uct_base_ep_am_short_iov,
    .ep_am_bcopy = uct_ivshmem_ep_am_bcopy,
    .ep_put_short = uct_ivshmem_ep_put_short,
    .ep_put_bcopy = uct_ivshmem_ep_put_bcopy,
    .ep_put_zcopy = uct_ivshmem_ep_put_zcopy,
    .ep_get_short = uct_ivshmem_ep_get_short,
    .ep_get_bcopy = uct_ivshmem_ep_get_bcopy,
    .ep_get_zcopy = uct_ivshmem_ep_get_zcopy,
    .ep_atomic_cswap64 = uct_ivshmem_ep_atomic_cswap64,
    .ep_atomic_cswap32 = uct_ivshmem_ep_atomic_cswap32,
    .ep_atomic64_post = uct_ivshmem_ep_atomic64_post,
    .ep_atomic32_post = uct_ivshmem_ep_atomic32_post,
    .ep_atomic64_fetch = uct_ivshmem_ep_atomic64_fetch,
    .ep_atomic32_fetch = uct_ivshmem_ep_atomic32_fetch,
    .ep_pending_add = uct_ivshmem_ep_pending_add,
    .ep_pending_purge = uct_ivshmem_ep_pending_purge,
    .ep_flush = uct_ivshmem_ep_flush,
    .ep_fence = uct_base_ep_fence,
    .ep_check = uct_ivshmem_ep_check,
    .ep_create = UCS_CLASS_NEW_FUNC_NAME(uct_ivshmem_ep_t),
    .ep_destroy = UCS_CLASS_DELETE_FUNC_NAME(uct_ivshmem_ep_t),
    .iface_flush = uct_ivshmem_iface_flush,
    .iface_fence = uct_base_iface_fence,
    .iface_progress_enable = uct_base_iface_progress_enable,
    .iface_progress_disable = uct_base_iface_progress_disable,
    .iface_progress = uct_ivshmem_iface_progress,
    .iface_event_fd_get = uct_ivshmem_iface_event_fd_get,
    .iface_event_arm = uct_ivshmem_iface_event_arm,
    .iface_close = UCS_CLASS_DELETE_FUNC_NAME(uct_ivshmem_iface_t),
    .iface_query = uct_ivshmem_iface_query,
    .iface_get_device_address = uct_ivshmem_iface_get_device_address,
    .iface_get_address = uct_ivshmem_iface_get_address,
    .iface_is_reachable = UCT_IVSHMEM_IFACE_IS_REACHABLE,
};
