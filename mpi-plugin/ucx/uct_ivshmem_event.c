/*
 * The doorbell as UCT's event fd (UCP_FEATURE_WAKEUP: ucp_worker_get_efd,
 * ucp_worker_arm). Where the region is an ivshmem-doorbell device of the
 * guest driver and the channel endpoint holds an interrupt vector, the
 * endpoint's file of that vector turns readable when a peer rings it; the
 * channel arms its wake-up bit (N0 of chan_send.c) so that the next send
 * rings. Everywhere else (a file: region, a plain device, all vectors
 * taken) the interface has no event fd and says so in iface_query: UCP
 * then polls it.
 */
#include "uct_ivshmem.h"

int uct_ivshmem_iface_has_event_fd(uct_ivshmem_iface_t *iface)
{
    return ivshm_ep_event_fd(iface->chan) >= 0;
}

ucs_status_t uct_ivshmem_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p)
{
    uct_ivshmem_iface_t *iface = ucs_derived_of(tl_iface, uct_ivshmem_iface_t);
    int fd = ivshm_ep_event_fd(iface->chan);
    if (fd < 0)
        return UCS_ERR_UNSUPPORTED;
    *fd_p = fd;
    return UCS_OK;
}

ucs_status_t uct_ivshmem_iface_event_arm(uct_iface_h tl_iface, unsigned events)
{
    uct_ivshmem_iface_t *iface = ucs_derived_of(tl_iface, uct_ivshmem_iface_t);
    /* a pending send completes only by our own progress */
    if ((events & UCT_EVENT_SEND_COMP) && iface->pending_eps)
        return UCS_ERR_BUSY;
    if (!(events & UCT_EVENT_RECV))
        return UCS_OK;
    switch (ivshm_ep_arm(iface->chan)) {
    case IVSHM_OK:
        return UCS_OK;
    case IVSHM_ERR_AGAIN:
        return UCS_ERR_BUSY;
    case IVSHM_ERR_NOTSUP:
        return UCS_ERR_UNSUPPORTED;
    default: /* the lease is gone: progress reports it */
        return UCS_ERR_BUSY;
    }
}
