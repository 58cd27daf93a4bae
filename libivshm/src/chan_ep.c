/*
 * Endpoints: claiming a directory index (a new epoch: one life of the
 * index), the control block with its FIFO and fragment pool, the address
 * a modex carries, connecting to a peer's life, destroy, and the blocking
 * wait over the notifier (polling, or the guest driver's doorbell).
 *
 *  D0 owner writes its entry (control block, epoch E0, doorbell), then
 *     release-stores word = READY; readers acquire-load the word, then
 *     read the entry.
 */
#include "chan_internal.h"
#include "doorbell.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GRACE_NS 1000000ull   /* the first wait's bound (see send: N0) */
#define WAIT_RECHECK_NS 100000000ull /* a blocked wait looks again (100 ms) */
/* senders mid-send finish before the free (2 ms; the fuzzer sets 0) */
long ivshm__destroy_grace_ns = 2000000L;

static void ep_free_local(ivshm_ep_t *ep)
{
    ivshm__db_close(ep->db);
    if (ep->peers)
        for (uint32_t i = 0; i < ep->d->max_eps; i++)
            free(ep->peers[i]);
    free(ep->peers);
    free(ep->active);
    free(ep->frag_issued);
    free(ep->frag_dest);
    free(ep->frag_held);
    free(ep->gapped);
    free(ep->banks);
    free(ep);
}

ivshm_status_t ivshm__poll_wait(void *ctx, const volatile uint64_t *word,
                                uint64_t seen, uint64_t timeout_ns)
{
    (void)ctx;
    uint64_t deadline = timeout_ns == UINT64_MAX
                            ? UINT64_MAX
                            : ivshm__mono_ns() + timeout_ns;
    unsigned spins = 0;
    while (atomic_load((const _Atomic uint64_t *)word) == seen) {
        if (ivshm__mono_ns() >= deadline)
            return IVSHM_ERR_AGAIN;
        ivshm__backoff(&spins);
    }
    return IVSHM_OK;
}

static void poll_ring(void *ctx, uint32_t peer)
{
    (void)ctx;
    (void)peer; /* a polling waiter sees the notify word change */
}

/* Claims a directory index (index, or any free one with index < 0) for our
 * lease: taken only from a free entry or one whose owner is provably gone. */
static ivshm_status_t claim_index(ivshm_ep_t *ep, int index)
{
    ivshm_domain_t *d = ep->d;
    ivshm_region_t *r = ep->r;
    if (index >= 0 && (uint32_t)index >= d->max_eps)
        return ivshm__fail(IVSHM_ERR_INVAL, "endpoint index %d >= %u", index,
                           d->max_eps);
    uint32_t lo = index < 0 ? 0 : (uint32_t)index;
    uint32_t hi = index < 0 ? d->max_eps : (uint32_t)index + 1;
    for (int round = 0; round < 2; round++) {
        if (round == 1)
            ivshm_gc(r, NULL); /* a dead holder's lease may not be collected yet */
    for (uint32_t i = lo; i < hi; i++) {
        struct dir_entry *e = &d->dir[i];
        uint64_t w = atomic_load(&e->word);
        if (DIR_STATE(w) != DIR_FREE &&
            ivshm__proc_live(r, DIR_SLOT(w), DIR_GEN(w)))
            continue; /* held by a live process (or one in doubt) */
        if (atomic_compare_exchange_strong(
                &e->word, &w, DIR_WORD(r->gen, r->slot, DIR_CLAIMING))) {
            ep->index = i;
            /* E0: a new life of the index; cells, grants and control
             * blocks of earlier lives carry older epochs */
            ep->epoch = atomic_fetch_add(&e->epoch, 1) + 1;
            return IVSHM_OK;
        }
    }
    }
    return ivshm__fail(index < 0 ? IVSHM_ERR_NOSPACE : IVSHM_ERR_BUSY,
                       index < 0 ? "all %u endpoint slots of job '%s' are "
                                   "taken"
                                 : "endpoint %u of job '%s' is held by a "
                                   "live process",
                       index < 0 ? d->max_eps : (uint32_t)index, d->key);
}

ivshm_status_t ivshm_ep_create(ivshm_domain_t *d, int index,
                               const ivshm_ep_config_t *cfg,
                               ivshm_msg_handler_t handler, void *arg,
                               ivshm_ep_t **out)
{
    *out = NULL;
    ivshm_region_t *r = d->r;
    ivshm_status_t st = ivshm__require_attached(r);
    if (st == IVSHM_OK)
        st = ivshm__lease_held(r);
    if (st != IVSHM_OK)
        return st;
    ivshm_ep_t *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return ivshm__fail(IVSHM_ERR_SYS, "out of memory");
    ep->d = d;
    ep->r = r;
    ep->lives_ended = &ivshm__hdr(r)->lives_ended;
    if (cfg)
        ep->cfg = *cfg;
    else
        ivshm_ep_config_init(&ep->cfg);
    if ((st = ivshm_ep_config_check(&ep->cfg)) != IVSHM_OK)
        goto err_free;
    ep->handler = handler;
    ep->harg = arg;
    ep->own_ahead = ivshm__cpu_prefetchw();
    ep->notifier = (ivshm_notifier_t){poll_ring, ivshm__poll_wait, NULL};
    ep->peers = calloc(d->max_eps, sizeof(*ep->peers));
    ep->active = calloc(ep->cfg.fbox_budget + 1, sizeof(*ep->active));
    ep->frag_issued = calloc(ep->cfg.frag_count, sizeof(*ep->frag_issued));
    ep->frag_dest = calloc(ep->cfg.frag_count, sizeof(*ep->frag_dest));
    ep->frag_held = calloc(ep->cfg.frag_count, sizeof(*ep->frag_held));
    ep->gapped = calloc(d->max_eps, sizeof(*ep->gapped));
    if (!ep->peers || !ep->active || !ep->frag_issued || !ep->frag_dest || !ep->frag_held ||
        !ep->gapped) {
        st = ivshm__fail(IVSHM_ERR_SYS, "out of memory");
        goto err_free;
    }
    ep->fbox_ring =
        (uint32_t)fbox_ring_bytes(ep->cfg.fbox_cells, ep->cfg.cell_size);
    ep->fbox_bytes = ep->cfg.fbox_cells ? (uint32_t)sizeof(struct fbox_hdr) +
                                              ep->fbox_ring + FBOX_SLACK
                                        : 0;
    if ((st = claim_index(ep, index)) != IVSHM_OK)
        goto err_free;
    IVSHM_TEST_STEP("create");
    struct ctl_geom g;
    ivshm__ctl_size_for(&ep->cfg, d->max_eps, &g);
    g.index = ep->index;
    g.epoch = ep->epoch;
    if ((st = ivshm_alloc(r, g.total, &ep->ctl_off)) != IVSHM_OK)
        goto err_entry;
    ep->ctl = (struct ep_ctl *)((char *)ivshm_region_base(r) + ep->ctl_off);
    memset(ep->ctl, 0, g.cells_off); /* header and tables; cells below */
    memset((char *)ep->ctl + g.cells_off, 0,
           (size_t)ep->cfg.fifo_cells * ep->cfg.cell_size);
    ep->ctl->g = g;
    ep->g = g;
    ep->fbox_msg_max = fbox_msg_limit(&g);
    ep->cells = (char *)ep->ctl + g.cells_off;
    ep->pool = (char *)ep->ctl + g.pool_off;
    ep->grants = (_Atomic uint64_t *)((char *)ep->ctl + g.grants_off);
    ep->rdone = (_Atomic uint64_t *)((char *)ep->ctl + g.rdone_off);
    ep->fdone = (_Atomic uint64_t *)((char *)ep->ctl + g.fdone_off);
    struct dir_entry *e = &d->dir[ep->index];
    atomic_store(&e->ctl_off, ep->ctl_off);
    e->ctl_size = g.total;
    e->pid = (uint32_t)getpid();
    atomic_store(&e->doorbell, 0);
    if (ivshm__db_open(r, d->dir, d->max_eps, &ep->db) == IVSHM_OK) {
        ep->notifier.ring = ivshm__db_ring;
        ep->notifier.ctx = ep->db;
        if (ep->db->wait_fd >= 0)
            ep->notifier.wait = ivshm__db_wait;
        atomic_store(&e->doorbell, ivshm__db_word(ep->db));
    }
    /* D0: publish; connectors acquire the word, then read the entry. */
    atomic_store_explicit(&e->word, DIR_WORD(r->gen, r->slot, DIR_READY),
                          memory_order_release);
    *out = ep;
    return IVSHM_OK;

err_entry:
    atomic_store(&d->dir[ep->index].word, 0);
err_free:
    ep_free_local(ep);
    return st;
}

void ivshm_ep_destroy(ivshm_ep_t *ep)
{
    if (!ep)
        return;
    ivshm_region_t *r = ep->r;
    if (ivshm__lease_held(r) != IVSHM_OK) {
        /* the entry, the block and the boxes are no longer ours */
        ep_free_local(ep);
        return;
    }
    ivshm__frag_linger(ep);
    struct dir_entry *e = &ep->d->dir[ep->index];
    uint64_t w = DIR_WORD(r->gen, r->slot, DIR_READY);
    if (atomic_compare_exchange_strong(&e->word, &w, DIR_FREE)) {
        ivshm__life_ended(r);
        IVSHM_TEST_STEP("destroy");
        /* a sender checks our life before each write: one that checked
         * just before the change finishes its write before the memory can
         * be someone else's (the window is documented in channels.md) */
        struct timespec ts = {0, ivshm__destroy_grace_ns};
        if (ts.tv_nsec > 0)
            nanosleep(&ts, NULL);
        for (uint32_t i = 0; i < ep->nbanks; i++)
            ivshm_free(r, ep->banks[i].off);
        ivshm_free(r, ep->ctl_off);
    }
    ep_free_local(ep);
}

uint32_t ivshm_ep_index(const ivshm_ep_t *ep) { return ep->index; }

void ivshm_ep_set_event_handler(ivshm_ep_t *ep, ivshm_event_handler_t h,
                                void *arg)
{
    ep->ev = h;
    ep->earg = arg;
}

void ivshm_ep_set_whole_handler(ivshm_ep_t *ep, ivshm_whole_handler_t h)
{
    ep->whole = h;
}

void ivshm_ep_set_notifier(ivshm_ep_t *ep, const ivshm_notifier_t *n)
{
    ep->notifier = *n;
}

/* Address blob: uuid[16] job_idx job_gen index epoch entry_word ctl_off */
static void make_address(ivshm_domain_t *d, uint32_t index, uint32_t epoch,
                         uint64_t word, uint64_t ctl_off,
                         uint8_t addr[IVSHM_EP_ADDR_SIZE])
{
    memset(addr, 0, IVSHM_EP_ADDR_SIZE);
    ivshm_region_uuid(d->r, addr);
    uint32_t v[4] = {d->job_idx, d->job_gen, index, epoch};
    memcpy(addr + 16, v, sizeof(v));
    memcpy(addr + 32, &word, 8);
    memcpy(addr + 40, &ctl_off, 8);
}

ivshm_status_t ivshm_ep_address(const ivshm_ep_t *ep,
                                uint8_t addr[IVSHM_EP_ADDR_SIZE])
{
    make_address(ep->d, ep->index, ep->epoch,
                 atomic_load(&ep->d->dir[ep->index].word), ep->ctl_off, addr);
    return IVSHM_OK;
}

ivshm_status_t ivshm_domain_address(ivshm_domain_t *d, uint32_t index,
                                    uint8_t addr[IVSHM_EP_ADDR_SIZE])
{
    if (index >= d->max_eps)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "endpoint %u out of range",
                           index);
    struct dir_entry *e = &d->dir[index];
    uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
    if (DIR_STATE(w) != DIR_READY ||
        ivshm__proc_state(d->r, DIR_SLOT(w), DIR_GEN(w)) != PROC_LIVE)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "no live endpoint at %u",
                           index);
    make_address(d, index, atomic_load(&e->epoch), w,
                 atomic_load(&e->ctl_off), addr);
    return IVSHM_OK;
}

ivshm_status_t ivshm_ep_connect(ivshm_ep_t *ep, const uint8_t *addr,
                                size_t len, uint32_t *peer)
{
    uint8_t uuid[16];
    ivshm_region_uuid(ep->r, uuid);
    if (len < IVSHM_EP_ADDR_SIZE || memcmp(addr, uuid, 16) != 0)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND,
                           "address names another region");
    uint32_t v[4];
    uint64_t w, off;
    memcpy(v, addr + 16, sizeof(v));
    memcpy(&w, addr + 32, 8);
    memcpy(&off, addr + 40, 8);
    if (v[0] != ep->d->job_idx || v[1] != ep->d->job_gen)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "address names another job");
    if (v[2] >= ep->d->max_eps)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "endpoint index out of range");
    ivshm_status_t st = ivshm__lease_held(ep->r);
    if (st != IVSHM_OK)
        return st;
    struct peer tmp;
    /* a lease in doubt is mostly a collector between its claim and its
     * back-off or release (L1): waited out, up to a bound, so that a peer
     * met at that moment is not judged unreachable for good */
    uint64_t deadline = 0;
    unsigned spins = 0;
    while ((st = ivshm__load_peer(ep, v[2], w, &tmp)) == IVSHM_ERR_AGAIN &&
           ivshm__doubt_wait(ep->r, DIR_SLOT(w), DIR_GEN(w), &deadline,
                             &spins))
        ;
    if (st != IVSHM_OK)
        return st;
    /* our own lease again after a wait: what follows writes our block */
    if (spins && (st = ivshm__lease_held(ep->r)) != IVSHM_OK)
        return st;
    if ((uint64_t)((char *)tmp.ctl - (char *)ivshm_region_base(ep->r)) != off ||
        tmp.epoch != v[3])
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "endpoint was re-created");
    struct peer *p = ep->peers[v[2]];
    /* a record of another life is replaced (its grant and loans end) */
    if ((!p || !p->valid || p->dead || p->entry_word != w ||
         p->epoch != tmp.epoch) &&
        !ivshm__set_peer(ep, v[2], &tmp))
        return ivshm__fail(IVSHM_ERR_SYS, "out of memory");
    *peer = v[2];
    return IVSHM_OK;
}

/* Tells senders that we may sleep (they ring from now on, see N0).
 * True the first time (senders may not see the flag yet: a grace). The
 * flag lives in the region, where any VM may clear it: our own word is
 * the truth, and the shared one is stored again at each wait, so a
 * cleared flag costs at most one bounded wait round, never the rings. */
static bool become_blocking(ivshm_ep_t *ep)
{
    if (ep->blocking) {
        if (!atomic_load_explicit(&ep->ctl->may_block, memory_order_relaxed))
            atomic_store(&ep->ctl->may_block, 1);
        return false;
    }
    ep->blocking = true;
    atomic_store(&ep->ctl->may_block, 1);
    ep->blocking_since = ivshm__mono_ns();
    return true;
}

ivshm_status_t ivshm_ep_wait(ivshm_ep_t *ep, int timeout_ms)
{
    /* a lost lease first: a handler that waits must learn it, not wait
     * again */
    ivshm_status_t st = ivshm__lease_held(ep->r);
    if (st != IVSHM_OK)
        return st;
    if (ep->in_handler)
        return IVSHM_ERR_AGAIN; /* nothing can come before it returns */
    _Atomic uint64_t *nw = &ep->ctl->notify;
    uint64_t grace = UINT64_MAX;
    if (become_blocking(ep))
        grace = GRACE_NS; /* senders may not see the flag yet: see N0 */
    uint64_t now = ivshm__mono_ns();
    uint64_t deadline = timeout_ms < 0
                            ? UINT64_MAX
                            : now + ivshm__ms_to_ns((uint64_t)timeout_ms);
    for (;;) {
        uint64_t w = atomic_load(nw);
        /* N0 (receiver side): arm, then re-check the queues */
        while (!(w & 1) && !atomic_compare_exchange_weak(nw, &w, w | 1))
            ;
        w |= 1;
        ep->liveness_due = true;
        if (ivshm_ep_progress(ep) > 0) {
            atomic_compare_exchange_strong(nw, &w, w & ~1ull);
            return IVSHM_OK;
        }
        uint64_t t = deadline == UINT64_MAX ? UINT64_MAX : deadline - now;
        if (grace < t)
            t = grace;
        /* a claimer may die before it publishes, and parked cells resolve
         * by time (an abandoned claim, a gap): no sender may be left to
         * ring, so every round is bounded */
        uint64_t cap = ep->npend || ep->nactive ? STUCK_CHECK_NS
                                                : WAIT_RECHECK_NS;
        if (t > cap)
            t = cap;
        st = ep->notifier.wait(ep->notifier.ctx, (const volatile uint64_t *)nw,
                               w, t);
        if (st == IVSHM_ERR_NODEV) {
            ep->notifier.wait = ivshm__poll_wait; /* the doorbell is gone */
            st = IVSHM_ERR_AGAIN;
        }
        uint64_t cur = w;
        atomic_compare_exchange_strong(nw, &cur, w & ~1ull); /* disarm */
        if (st == IVSHM_OK)
            return IVSHM_OK;
        if ((st = ivshm__lease_held(ep->r)) != IVSHM_OK)
            return st;
        now = ivshm__mono_ns();
        if (now >= deadline)
            return IVSHM_ERR_AGAIN;
        grace = UINT64_MAX; /* after the first round, every sender fences */
    }
}

/* Event-driven waiting for callers with their own poll loop (UCT's event
 * fd): the doorbell's file of our claimed vector is the fd; arming sets
 * the wake-up bit (N0) after the fd was drained and before the queues are
 * looked at, so a send that lands after the look rings. */
int ivshm_ep_event_fd(ivshm_ep_t *ep)
{
    if (!ep->db || ep->db->wait_fd < 0 || ep->notifier.wait != ivshm__db_wait)
        return -1;
    return ep->db->wait_fd;
}

ivshm_status_t ivshm_ep_arm(ivshm_ep_t *ep)
{
    ivshm_status_t st = ivshm__lease_held(ep->r);
    if (st != IVSHM_OK)
        return st;
    int fd = ivshm_ep_event_fd(ep);
    if (fd < 0)
        return IVSHM_ERR_NOTSUP;
    uint64_t cnt;
    while (read(fd, &cnt, sizeof(cnt)) == sizeof(cnt)) /* O_NONBLOCK */
        ep->db->irqs += cnt;
    ep->liveness_due = true; /* the pass after the wake judges peers */
    /* senders fence and ring only once they see may_block (N0; it costs
     * them a fence per send, so it is set at the first arm, not before),
     * which may take GRACE_NS; parked cells resolve by time, not by a
     * ring: stay awake */
    if (become_blocking(ep) ||
        ivshm__mono_ns() - ep->blocking_since < GRACE_NS || ep->npend)
        return IVSHM_ERR_AGAIN;
    _Atomic uint64_t *nw = &ep->ctl->notify;
    uint64_t w = atomic_load(nw);
    while (!(w & 1) && !atomic_compare_exchange_weak(nw, &w, w | 1))
        ;
    w |= 1;
    if (ivshm__fifo_ready(ep) || ivshm__fbox_ready(ep)) {
        atomic_compare_exchange_strong(nw, &w, w & ~1ull); /* disarm */
        return IVSHM_ERR_AGAIN;
    }
    return IVSHM_OK;
}
