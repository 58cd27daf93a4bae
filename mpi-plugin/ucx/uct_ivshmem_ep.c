/*
 * The `ivshmem` endpoint: the send side of active messages (short ones
 * built in place in the peer's queue, bcopy ones packed privately and
 * handed to the channel in one piece) and the pending queue that keeps a
 * sender's order while the peer's queue is full.
 */
#include "uct_ivshmem.h"

#include <string.h>

UCS_CLASS_INIT_FUNC(uct_ivshmem_ep_t, const uct_ep_params_t *params)
{
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(params->iface, uct_ivshmem_iface_t);
    uct_ivshmem_dev_addr_t dev;
    uct_ivshmem_iface_addr_t addr;
    ivshm_identity_t id;
    uint8_t chan[IVSHM_EP_ADDR_SIZE];

    UCT_EP_PARAMS_CHECK_DEV_IFACE_ADDRS(params);
    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);
    memcpy(&dev, params->dev_addr, sizeof(dev));
    memcpy(&addr, params->iface_addr, sizeof(addr));
    uct_ivshmem_peer_unpack(&dev, &addr, &id, chan);
    ivshm_status_t st = ivshm_ep_connect(iface->chan, chan, sizeof(chan),
                                         &self->peer);
    if (st != IVSHM_OK) {
        ucs_debug("ivshmem: cannot connect to pid %u: %s", id.pid,
                  ivshm_last_error());
        return UCS_ERR_UNREACHABLE;
    }
    ucs_queue_head_init(&self->pending);
    self->dispatching = 0;
    self->failed = UCS_OK;
    self->fail_reported = 0;
    self->peer_id = id;
    ucs_list_add_tail(&iface->eps, &self->link);
    ucs_debug("ivshmem: ep %p to pid %u (channel peer %u)", self, id.pid,
              self->peer);
    return UCS_OK;
}

UCS_CLASS_CLEANUP_FUNC(uct_ivshmem_ep_t)
{
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(self->super.super.iface, uct_ivshmem_iface_t);
    if (!ucs_queue_is_empty(&self->pending)) {
        ucs_warn("ivshmem: ep %p destroyed with requests pending", self);
        iface->pending_eps--;
    }
    ucs_list_del(&self->link);
}

/* The endpoint goes to the process of those addresses: the same lease
 * (region, VM, slot, generation, pid). */
int uct_ivshmem_ep_connected_to(uct_ep_h tl_ep,
                                const uct_device_addr_t *dev_addr,
                                const uct_iface_addr_t *iface_addr)
{
    const uct_ivshmem_ep_t *ep = ucs_derived_of(tl_ep, uct_ivshmem_ep_t);
    uct_ivshmem_dev_addr_t dev;
    uct_ivshmem_iface_addr_t addr;
    ivshm_identity_t id;
    uint8_t chan[IVSHM_EP_ADDR_SIZE];
    memcpy(&dev, dev_addr, sizeof(dev));
    memcpy(&addr, iface_addr, sizeof(addr));
    uct_ivshmem_peer_unpack(&dev, &addr, &id, chan);
    return memcmp(id.region_uuid, ep->peer_id.region_uuid, 16) == 0 &&
           id.vm_id == ep->peer_id.vm_id && id.slot == ep->peer_id.slot &&
           id.gen == ep->peer_id.gen && id.pid == ep->peer_id.pid;
}

UCS_CLASS_DEFINE(uct_ivshmem_ep_t, uct_base_ep_t);
UCS_CLASS_DEFINE_NEW_FUNC(uct_ivshmem_ep_t, uct_ep_t, const uct_ep_params_t *);
UCS_CLASS_DEFINE_DELETE_FUNC(uct_ivshmem_ep_t, uct_ep_t);

/* A send must wait behind the endpoint's pending requests (order), except
 * the one the pending queue itself is running. */
static inline int uct_ivshmem_ep_must_wait(const uct_ivshmem_ep_t *ep)
{
    return !ep->dispatching && !ucs_queue_is_empty(&ep->pending);
}

/* UCP's keepalive (error handling mode peer; an active message with
 * UCT_SEND_FLAG_PEER_CHECK, or ep_check) asks about the peer. The channel
 * fails the endpoints of a peer proven gone on its own progress; a peer
 * only in doubt (another VM, no heartbeat: it may be paused) is judged
 * here: silent past UCX_IVSHMEM_PEER_TIMEOUT, its endpoints fail with an
 * endpoint timeout (nothing of it is reclaimed, docs/ucx.md). UCX hears
 * it on the next progress call: the caller still holds the endpoint. */
static void uct_ivshmem_ep_peer_check(uct_ivshmem_ep_t *ep,
                                      uct_ivshmem_iface_t *iface)
{
    uint64_t silent_ms;
    if (ep->failed != UCS_OK)
        return;
    ivshm_status_t st = ivshm_ep_peer_silence(iface->chan, ep->peer,
                                              &silent_ms);
    if (st == IVSHM_ERR_PEER_DEAD) {
        uct_ivshmem_iface_fail_eps_later(iface, ep->peer,
                                         UCS_ERR_CONNECTION_RESET);
    } else if (st == IVSHM_OK && silent_ms > iface->peer_timeout_ms) {
        ucs_error("ivshmem: peer %u of region %s (another VM) has been "
                  "silent for %llu s, past UCX_IVSHMEM_PEER_TIMEOUT: its "
                  "endpoints fail (its memory is kept: it may be paused)",
                  ep->peer, iface->md->device,
                  (unsigned long long)(silent_ms / 1000));
        uct_ivshmem_iface_fail_eps_later(iface, ep->peer,
                                         UCS_ERR_ENDPOINT_TIMEOUT);
    }
}

static ucs_status_t uct_ivshmem_send_status(uct_ivshmem_iface_t *iface,
                                            uct_ivshmem_ep_t *ep,
                                            ivshm_status_t st)
{
    switch (st) {
    case IVSHM_OK:
        return UCS_OK;
    case IVSHM_ERR_AGAIN:
        iface->cnt.tx_full++;
        return UCS_ERR_NO_RESOURCE;
    case IVSHM_ERR_PEER_DEAD:
        return UCS_ERR_CONNECTION_RESET;
    case IVSHM_ERR_CORRUPT:
        /* the peer's queue is damaged for good (docs/channels.md): its
         * endpoints fail, said once */
        ucs_error("ivshmem: send to channel peer %u failed: %s", ep->peer,
                  ivshm_last_error());
        uct_ivshmem_iface_fail_eps_later(iface, ep->peer, UCS_ERR_IO_ERROR);
        return UCS_ERR_IO_ERROR;
    default:
        ucs_error("ivshmem: send failed: %s", ivshm_last_error());
        return UCS_ERR_IO_ERROR;
    }
}

ucs_status_t uct_ivshmem_ep_am_short(uct_ep_h tl_ep, uint8_t id,
                                     uint64_t header, const void *payload,
                                     unsigned length)
{
    uct_ivshmem_ep_t *ep = ucs_derived_of(tl_ep, uct_ivshmem_ep_t);
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    size_t total = sizeof(header) + length;
    ivshm_rsv_t rsv;
    void *buf;

    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(total, 0, iface->max_short, "am_short");
    if (ep->failed != UCS_OK)
        return ep->failed;
    if (uct_ivshmem_ep_must_wait(ep))
        return UCS_ERR_NO_RESOURCE;
    /* header and payload straight into one cell (a fragment where this
     * peer's cells are smaller); reserved below where data tracing wants
     * the message in one buffer */
    ivshm_status_t st;
    buf = NULL;
    if (!ucs_log_is_enabled(UCS_LOG_LEVEL_TRACE_DATA)) {
        st = ivshm_ep_try_send2(iface->chan, ep->peer, id, &header,
                                sizeof(header), payload, length);
    } else {
        st = ivshm_ep_reserve(iface->chan, ep->peer, total, &buf, &rsv);
        if (st != IVSHM_OK)
            return uct_ivshmem_send_status(iface, ep, st);
        memcpy(buf, &header, sizeof(header));
        memcpy((char *)buf + sizeof(header), payload, length);
        st = ivshm_ep_commit(iface->chan, &rsv, id, total);
        if (st != IVSHM_OK)
            ivshm_ep_cancel(iface->chan, &rsv);
    }
    if (st != IVSHM_OK)
        return uct_ivshmem_send_status(iface, ep, st);
    iface->cnt.tx_msgs++;
    iface->cnt.tx_bytes += total;
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, buf, total,
                       "TX: AM_SHORT");
    UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, total);
    return UCS_OK;
}

ssize_t uct_ivshmem_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                                uct_pack_callback_t pack_cb, void *arg,
                                unsigned flags)
{
    uct_ivshmem_ep_t *ep = ucs_derived_of(tl_ep, uct_ivshmem_ep_t);
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);

    UCT_CHECK_AM_ID(id);
    if (ucs_unlikely(flags & UCT_SEND_FLAG_PEER_CHECK))
        uct_ivshmem_ep_peer_check(ep, iface);
    if (ep->failed != UCS_OK)
        return ep->failed;
    if (uct_ivshmem_ep_must_wait(ep))
        return UCS_ERR_NO_RESOURCE;
    size_t length = pack_cb(iface->tx_buf, arg);
    UCT_CHECK_LENGTH(length, 0, iface->max_bcopy, "am_bcopy");
    ivshm_status_t st = ivshm_ep_try_send(iface->chan, ep->peer, id,
                                          iface->tx_buf, length);
    if (st != IVSHM_OK)
        return uct_ivshmem_send_status(iface, ep, st);
    iface->cnt.tx_msgs++;
    iface->cnt.tx_bytes += length;
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id,
                       iface->tx_buf, length, "TX: AM_BCOPY");
    UCT_TL_EP_STAT_OP(&ep->super, AM, BCOPY, length);
    return (ssize_t)length;
}

/* Always queued: the interface runs pending requests on every progress
 * call, so no wake-up is lost while the peer's queue drains. */
ucs_status_t uct_ivshmem_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                        unsigned flags)
{
    uct_ivshmem_ep_t *ep = ucs_derived_of(tl_ep, uct_ivshmem_ep_t);
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    (void)flags;
    /* counted once per endpoint; a running queue is counted already */
    if (!ep->dispatching && ucs_queue_is_empty(&ep->pending))
        iface->pending_eps++;
    uct_pending_req_queue_push(&ep->pending, req);
    UCT_TL_EP_STAT_PEND(&ep->super);
    return UCS_OK;
}

void uct_ivshmem_ep_pending_purge(uct_ep_h tl_ep,
                                  uct_pending_purge_callback_t cb, void *arg)
{
    uct_ivshmem_ep_t *ep = ucs_derived_of(tl_ep, uct_ivshmem_ep_t);
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    uct_pending_req_priv_queue_t *priv;
    if (ucs_queue_is_empty(&ep->pending))
        return;
    uct_pending_queue_purge(priv, &ep->pending, 1, cb, arg);
    iface->pending_eps--;
}

unsigned uct_ivshmem_iface_dispatch_pending(uct_ivshmem_iface_t *iface)
{
    uct_ivshmem_ep_t *ep, *tmp;
    uct_pending_req_priv_queue_t *priv;
    unsigned done = 0;
    ucs_list_for_each_safe(ep, tmp, &iface->eps, link) {
        if (ucs_queue_is_empty(&ep->pending))
            continue;
        size_t before = ucs_queue_length(&ep->pending);
        ep->dispatching = 1;
        uct_pending_queue_dispatch(priv, &ep->pending, 1);
        ep->dispatching = 0;
        size_t after = ucs_queue_length(&ep->pending);
        done += (unsigned)(before - after);
        if (after == 0)
            iface->pending_eps--;
    }
    iface->cnt.pending_done += done;
    return done;
}

ucs_status_t uct_ivshmem_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                  uct_completion_t *comp)
{
    uct_ivshmem_ep_t *ep = ucs_derived_of(tl_ep, uct_ivshmem_ep_t);
    (void)comp;
    if (flags & UCT_FLUSH_FLAG_CANCEL)
        return UCS_OK; /* nothing is in flight once committed */
    if (ep->failed != UCS_OK)
        return ep->failed; /* what is pending will never go */
    /* A committed message is in the peer's queue, in shared memory: the
     * sends still to do are the pending ones. A flush the pending queue
     * runs itself (UCX queues one that found requests pending) has every
     * request ahead of it done; those behind it came later and are no
     * part of it. Counting them left MPICH's close flush at the queue's
     * head for ever, and the sends queued behind it with it. */
    if (!ep->dispatching && !ucs_queue_is_empty(&ep->pending))
        return UCS_ERR_NO_RESOURCE;
    UCT_TL_EP_STAT_FLUSH(&ep->super);
    return UCS_OK;
}

ucs_status_t uct_ivshmem_ep_check(uct_ep_h tl_ep, unsigned flags,
                                  uct_completion_t *comp)
{
    uct_ivshmem_ep_t *ep = ucs_derived_of(tl_ep, uct_ivshmem_ep_t);
    (void)flags;
    (void)comp;
    uct_ivshmem_ep_peer_check(
        ep, ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t));
    return UCS_OK;
}

/* The peer is lost for good: its sends fail from now on, and UCX hears of
 * it through the interface's error handler (UCP's error handling mode
 * peer). */
static void uct_ivshmem_iface_mark_failed(uct_ivshmem_iface_t *iface,
                                          uint32_t peer, ucs_status_t status)
{
    uct_ivshmem_ep_t *ep;
    ucs_list_for_each(ep, &iface->eps, link) {
        if ((peer == UINT32_MAX || ep->peer == peer) && ep->failed == UCS_OK)
            ep->failed = status;
    }
}

void uct_ivshmem_iface_fail_eps_later(uct_ivshmem_iface_t *iface,
                                      uint32_t peer, ucs_status_t status)
{
    uct_ivshmem_iface_mark_failed(iface, peer, status);
    iface->fails_due = 1;
}

/* One endpoint at a time: the handler may destroy the endpoint it is
 * given (and UCP may destroy others with it), so the list is walked again
 * from its head after each call. */
void uct_ivshmem_iface_report_fails(uct_ivshmem_iface_t *iface)
{
    uct_ivshmem_ep_t *ep;
    iface->fails_due = 0;
    for (;;) {
        uct_ivshmem_ep_t *next = NULL;
        ucs_list_for_each(ep, &iface->eps, link) {
            if (ep->failed != UCS_OK && !ep->fail_reported) {
                next = ep;
                break;
            }
        }
        if (next == NULL)
            return;
        next->fail_reported = 1;
        ucs_debug("ivshmem: ep %p (channel peer %u) failed: %s", next,
                  next->peer, ucs_status_string(next->failed));
        uct_iface_handle_ep_err(&iface->super.super, &next->super.super,
                                next->failed);
    }
}
