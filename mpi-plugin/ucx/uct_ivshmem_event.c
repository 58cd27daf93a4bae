/*
 * The doorbell as UCT's event fd (UCP_FEATURE_WAKEUP: ucp_worker_get_efd,
 * ucp_worker_arm). Where the region is an ivshmem-doorbell device of the
 * guest driver and the channel endpoint holds an interrupt vector, the
 * endpoint's file of that vector turns readable when a peer rings it; the
 * channel arms its wake-up bit (N0 of chan_send.c) so that the next send
 * rings. Everywhere else (a file: region, a plain device, all vectors
 * taken) the interface has no event fd and says so in iface_query: UCP
 * then polls it.
 *
 * UCP may sleep on the fd without a timeout (ucp_worker_wait), and a peer's
 * death rings nothing, nor does an interrupt lost: the fd UCX gets is an
 * epoll set of the doorbell's file and a timer that fires every 100 ms
 * (as ivshm_ep_wait re-checks), so a sleeping worker wakes, progresses
 * (liveness, queues) and arms again.
 */
#include "uct_ivshmem.h"

#include <stdint.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define UCT_IVSHMEM_EVENT_PERIOD_NS 100000000L

void uct_ivshmem_iface_event_open(uct_ivshmem_iface_t *iface)
{
    iface->event_fd = iface->event_timer = -1;
    int bell = ivshm_ep_event_fd(iface->chan);
    if (bell < 0)
        return;
    const struct itimerspec period = {
        .it_interval = {.tv_nsec = UCT_IVSHMEM_EVENT_PERIOD_NS},
        .it_value = {.tv_nsec = UCT_IVSHMEM_EVENT_PERIOD_NS}};
    struct epoll_event bell_ev = {.events = EPOLLIN};
    struct epoll_event timer_ev = {.events = EPOLLIN};
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ep < 0 || timer < 0 || timerfd_settime(timer, 0, &period, NULL) != 0 ||
        epoll_ctl(ep, EPOLL_CTL_ADD, bell, &bell_ev) != 0 ||
        epoll_ctl(ep, EPOLL_CTL_ADD, timer, &timer_ev) != 0) {
        ucs_warn("ivshmem: no event fd (epoll/timerfd: %m): UCP polls");
        if (ep >= 0)
            close(ep);
        if (timer >= 0)
            close(timer);
        return;
    }
    iface->event_fd = ep;
    iface->event_timer = timer;
}

void uct_ivshmem_iface_event_close(uct_ivshmem_iface_t *iface)
{
    if (iface->event_fd >= 0) {
        close(iface->event_fd);
        close(iface->event_timer);
    }
    iface->event_fd = iface->event_timer = -1;
}

int uct_ivshmem_iface_has_event_fd(uct_ivshmem_iface_t *iface)
{
    return iface->event_fd >= 0;
}

ucs_status_t uct_ivshmem_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p)
{
    uct_ivshmem_iface_t *iface = ucs_derived_of(tl_iface, uct_ivshmem_iface_t);
    if (iface->event_fd < 0)
        return UCS_ERR_UNSUPPORTED;
    *fd_p = iface->event_fd;
    return UCS_OK;
}

ucs_status_t uct_ivshmem_iface_event_arm(uct_iface_h tl_iface, unsigned events)
{
    uct_ivshmem_iface_t *iface = ucs_derived_of(tl_iface, uct_ivshmem_iface_t);
    /* a pending send completes only by our own progress, and a failed
     * endpoint is reported only there */
    if (((events & UCT_EVENT_SEND_COMP) && iface->pending_eps) ||
        iface->fails_due)
        return UCS_ERR_BUSY;
    uint64_t ticks;
    if (iface->event_timer >= 0 &&
        read(iface->event_timer, &ticks, sizeof(ticks)) == sizeof(ticks))
        return UCS_ERR_BUSY; /* the timer fired: progress first */
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
