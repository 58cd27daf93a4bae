/*
 * The fragment pool: frag_count buffers of frag_size in the sender's own
 * control block, lent one message piece at a time. Each loan has a number
 * (frag_issued, private) that the cell carries; the receiver acknowledges
 * by raising the fragment's done counter (shared, in the sender's block)
 * to that number, never lowering it, so a late or repeated acknowledgement
 * cannot make a fragment look lent forever or free too early. A fragment
 * is free when done - issued >= 0 (signed). The sender remembers whom it
 * lent each fragment to and takes back what a gone peer still holds.
 *
 *  G0 receiver: done with the data, then release-raises done;
 *     sender acquire-loads done before it writes the fragment again.
 */
#include "chan_internal.h"

static bool frag_free(ivshm_ep_t *ep, uint32_t i)
{
    uint64_t done = atomic_load_explicit(&ep->fdone[i], memory_order_acquire);
    return (int64_t)(done - ep->frag_issued[i]) >= 0; /* G0 */
}

/* Looks at the peers holding fragments (at most every STUCK_CHECK_NS):
 * a gone one gives them back. Run when the pool is empty. */
static void reclaim_gone(ivshm_ep_t *ep)
{
    uint64_t now = ivshm__mono_ns();
    if (now - ep->frag_check_ns < STUCK_CHECK_NS)
        return;
    ep->frag_check_ns = now;
    for (uint32_t i = 0; i < ep->cfg.frag_count; i++) {
        if (frag_free(ep, i))
            continue;
        uint32_t idx = ep->frag_dest[i];
        struct peer *p = idx < ep->d->max_eps ? ep->peers[idx] : NULL;
        if (!p || !p->valid)
            continue;
        if (ivshm__peer_gone(ep, p)) {
            if (!p->dead)
                ivshm__peer_died(ep, idx); /* reclaims its fragments */
            else
                ivshm__frag_reclaim(ep, idx);
        }
    }
}

int ivshm__frag_take(ivshm_ep_t *ep)
{
    for (int round = 0; round < 2; round++) {
        for (uint32_t k = 0; k < ep->cfg.frag_count; k++) {
            uint32_t i = (ep->frag_next + k) % ep->cfg.frag_count;
            if (frag_free(ep, i)) {
                ep->frag_next = i + 1;
                return (int)i;
            }
        }
        if (round == 0)
            reclaim_gone(ep);
    }
    return -1;
}

/* At most so many bytes of a fragment are taken ahead: the smallest
 * fragment, twice the longest message measured so (2 KiB). */
#define FRAG_OWN_MAX FRAG_SIZE_MIN

void ivshm__frag_own_next(ivshm_ep_t *ep, uint32_t bytes)
{
    uint32_t f = ep->frag_next % ep->cfg.frag_count;
    if (!frag_free(ep, f))
        return; /* its receiver may still read it */
    const char *at = ep->pool + (uint64_t)f * ep->cfg.frag_size;
    if (bytes > FRAG_OWN_MAX)
        bytes = FRAG_OWN_MAX; /* measured up to 2 KiB messages */
    if (__builtin_expect(ivshm__test_own != NULL, 0)) {
        ivshm__test_own(at, at + bytes);
        return;
    }
    for (uint32_t b = 0; b < bytes; b += 64)
        ivshm__prefetch_own(at + b);
}

uint64_t ivshm__frag_lend(ivshm_ep_t *ep, int f, uint32_t idx)
{
    ep->frag_dest[f] = idx;
    return ++ep->frag_issued[f];
}

void ivshm__frag_ack(_Atomic uint64_t *done, uint64_t lend)
{
    /* the usual case first (acknowledged in order: done == lend - 1), as
     * one read-for-ownership of the sender's line instead of a read and
     * then an upgrade */
    uint64_t cur = lend - 1;
    while ((int64_t)(lend - cur) > 0 &&
           !atomic_compare_exchange_weak_explicit(done, &cur, lend,
                                                  memory_order_release,
                                                  memory_order_relaxed))
        ;
}

void ivshm__frag_reclaim(ivshm_ep_t *ep, uint32_t idx)
{
    for (uint32_t i = 0; i < ep->cfg.frag_count; i++)
        if (ep->frag_dest[i] == idx && !ep->frag_held[i] && !frag_free(ep, i))
            ivshm__frag_ack(&ep->fdone[i], ep->frag_issued[i]);
}

#define LINGER_NS 2000000000ull
void ivshm__frag_linger(ivshm_ep_t *ep)
{
    uint64_t deadline = ivshm__mono_ns() + LINGER_NS;
    unsigned spins = 0;
    for (uint32_t i = 0; i < ep->cfg.frag_count; i++)
        while (!frag_free(ep, i)) {
            if (ivshm__mono_ns() >= deadline)
                return;
            reclaim_gone(ep);
            ivshm__backoff(&spins);
        }
}
