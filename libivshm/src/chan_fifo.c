/*
 * The receive FIFO: one per endpoint, many producers. A producer claims a
 * position by CAS on head (C0), names itself and the lap in the cell's
 * claim word, writes the cell and release-stores seq = position + 1 (C1).
 * The consumer acquire-loads seq, and only then reads the cell; it
 * release-stores tail once it is done with every cell below it (T0),
 * which producers acquire-load only when the FIFO looks full.
 *
 * A producer stopped between C0 and C1 leaves an unpublished cell: the
 * consumer parks it (pending) and goes on with later cells, so other
 * senders are not blocked; per-pair sequence numbers keep each pair's
 * order. A parked cell is given up when its claimer's life ended, or,
 * without a claim of this lap, after one lease timeout; a published cell
 * that waits for a pair's missing piece is resolved by deliver() within
 * GAP_WAIT_NS. So nothing parks the FIFO for good.
 */
#include "chan_internal.h"

#include <string.h>

/* A queue that looks full: a claim is made only below tail + cells and
 * tail never passes head, so at any one moment 0 <= head - tail <= cells.
 * One moment: head, tail, head again, judged only when both heads agree
 * (head only grows, so it did not move while tail was read; a stale tail
 * against a newer head would look like a lap too many). Outside that is
 * a head or tail that some writer scribbled: waiting for room would wait
 * for ever, so the peer is marked damaged and its sends fail from now on
 * (tx_peer), with one message. */
static void fifo_check_lap(struct peer *p)
{
    uint64_t h = atomic_load_explicit(&p->ctl->head, memory_order_acquire);
    uint64_t t = atomic_load_explicit(&p->ctl->tail, memory_order_acquire);
    uint64_t h2 = atomic_load_explicit(&p->ctl->head, memory_order_acquire);
    if (h != h2 || h - t <= p->g.fifo_cells || p->damaged)
        return;
    p->damaged = true;
    p->lives_seen = LIVES_UNSEEN; /* its sends take the full check */
    ivshm__fail(IVSHM_ERR_CORRUPT,
                "a peer's receive queue is damaged (head %llu, tail %llu, "
                "%u cells: more than a lap apart): its sends fail",
                (unsigned long long)h, (unsigned long long)t,
                p->g.fifo_cells);
}

/* Claims a FIFO position of peer p's queue (C0). NULL when it is full. */
struct cell *ivshm__fifo_claim(ivshm_ep_t *ep, struct peer *p, uint64_t *pos)
{
    uint32_t n = p->g.fifo_cells;
    uint64_t h = atomic_load_explicit(&p->ctl->head, memory_order_relaxed);
    for (;;) {
        if (ring_full(h, p->cached_tail, n)) {
            p->cached_tail = atomic_load_explicit(&p->ctl->tail,
                                                  memory_order_acquire); /* T0 */
            if (ring_full(h, p->cached_tail, n)) {
                fifo_check_lap(p);
                return NULL;
            }
        }
        /* C0: claim; a stopped claimer blocks nobody (file comment) */
        if (atomic_compare_exchange_weak_explicit(&p->ctl->head, &h, h + 1,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed))
            break;
    }
    struct cell *c = (struct cell *)(p->cells + (h & (n - 1)) * p->g.cell_size);
    atomic_store_explicit(&c->claim, CLAIM_WORD(h >> p->fifo_shift, ep->index),
                          memory_order_relaxed);
    *pos = h;
    return c;
}

static struct cell *fifo_cell(ivshm_ep_t *ep, uint64_t pos)
{
    return (struct cell *)(ep->cells +
                           (pos & (ep->g.fifo_cells - 1)) * ep->g.cell_size);
}

static bool published(const struct cell *c, uint64_t pos)
{
    /* C1 (reader) */
    return atomic_load_explicit(&c->seq, memory_order_acquire) == pos + 1;
}

/* The claimer a parked cell names for this lap, or UINT32_MAX. */
static uint32_t claimer(ivshm_ep_t *ep, uint64_t pos)
{
    uint32_t cw = atomic_load_explicit(&fifo_cell(ep, pos)->claim,
                                       memory_order_relaxed);
    uint32_t shift = (uint32_t)__builtin_ctz(ep->g.fifo_cells);
    uint32_t who = CLAIM_SENDER(cw);
    if (cw && CLAIM_LAP(cw) == (uint16_t)(pos >> shift) && who < ep->d->max_eps)
        return who;
    return UINT32_MAX;
}

/* Notes, for the gap resolution, who may still publish a parked cell. */
static void note_unpublished(ivshm_ep_t *ep, uint64_t pos)
{
    uint32_t who = claimer(ep, pos);
    if (who != UINT32_MAX && ep->peers[who])
        ep->peers[who]->claim_pass = ep->polls;
    else
        ep->pass_unknown_claim = true;
}

/* An unpublished cell parked since pd->first_seen: is its claimer's life
 * over? A claim of this lap names the claimer; without one (the claimer
 * died before naming itself, or a stranger claimed) it is given up after
 * one lease timeout. A lease in doubt is waited for. */
static bool claim_abandoned(ivshm_ep_t *ep, const struct pending *pd,
                            uint64_t now)
{
    if (now - pd->first_seen < STUCK_CHECK_NS)
        return false;
    uint32_t who = claimer(ep, pd->pos);
    if (who != UINT32_MAX) {
        uint64_t w = atomic_load(&ep->d->dir[who].word);
        if (DIR_STATE(w) == DIR_READY) {
            enum ivshm_proc_state s =
                ivshm__proc_state(ep->r, DIR_SLOT(w), DIR_GEN(w));
            if (s != PROC_GONE)
                return false; /* live (maybe stopped) or in doubt: wait */
        }
        if (ep->peers[who])
            ivshm__peer_died(ep, who);
        return true;
    }
    return now - pd->first_seen > ivshm__ms_to_ns(ep->r->g.lease_timeout_ms);
}

int ivshm__fifo_poll(ivshm_ep_t *ep, int budget)
{
    int n = 0;
    uint64_t now = 0;
    ep->pass_fifo_whole = false;
    if (ep->npend > 0 && budget <= 0)
        return 0;
    /* parked cells first, in position order */
    for (uint32_t i = 0; i < ep->npend && n < budget;) {
        struct pending *pd = &ep->pend[i];
        struct cell *c = fifo_cell(ep, pd->pos);
        bool done;
        if (published(c, pd->pos)) {
            done = ivshm__deliver(ep, c, -1, ep->g.cell_size, &pd->first_seen);
            n += done;
        } else {
            if (!now)
                now = ivshm__mono_ns();
            done = claim_abandoned(ep, pd, now);
            if (!done)
                note_unpublished(ep, pd->pos);
            if (done && published(c, pd->pos)) {
                /* published after all (then its claimer left): deliver
                 * what can be, in order */
                done = ivshm__deliver(ep, c, -1, ep->g.cell_size, &pd->first_seen);
                n += done;
            } else if (done) {
                ivshm__drop(ep);
            }
        }
        if (done) {
            memmove(pd, pd + 1, (ep->npend - i - 1) * sizeof(*pd));
            ep->npend--;
        } else {
            i++;
        }
    }
    /* then new cells */
    while (n < budget) {
        uint64_t pos = ep->rx_pos;
        struct cell *c = fifo_cell(ep, pos);
        uint64_t since = 0;
        if (published(c, pos)) {
            if (ivshm__deliver(ep, c, -1, ep->g.cell_size, &since)) {
                n++;
                ep->rx_pos++;
                continue;
            }
        } else {
            uint64_t h = atomic_load_explicit(&ep->ctl->head,
                                              memory_order_relaxed);
            /* nothing claimed here yet (or a head that lies): done */
            if ((int64_t)(h - pos) <= 0 || h - pos > ep->g.fifo_cells) {
                ep->pass_fifo_whole = true;
                break;
            }
            note_unpublished(ep, pos);
        }
        /* claimed but unpublished, or not its turn: park it */
        if (ep->npend == PENDING_MAX)
            break;
        if (!since) {
            if (!now)
                now = ivshm__mono_ns();
            since = now;
        }
        ep->pend[ep->npend++] = (struct pending){pos, since};
        ep->rx_pos++;
    }
    /* T0: release what we are done with, in batches */
    uint64_t tail = ep->npend ? ep->pend[0].pos : ep->rx_pos;
    if (tail != ep->tail_published &&
        (n < budget || tail - ep->tail_published >= ep->g.fifo_cells / 4)) {
        atomic_store_explicit(&ep->ctl->tail, tail, memory_order_release);
        ep->tail_published = tail;
    }
    return n;
}

bool ivshm__fifo_ready(ivshm_ep_t *ep)
{
    return published(fifo_cell(ep, ep->rx_pos), ep->rx_pos);
}
