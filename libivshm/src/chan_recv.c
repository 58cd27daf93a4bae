/*
 * Receiving: delivery of one published cell (read once, validated against
 * our own geometry and the sender's published one, in per-pair order),
 * the progress loop over fast boxes and the FIFO, and liveness: peers
 * whose life ended, and our own lease.
 */
#include "chan_internal.h"
#include "doorbell.h"

#include <string.h>

void ivshm__drop(ivshm_ep_t *ep) { BUMP(ep, invalid, 1); }

/* May the data a peer lent us (its fragment, its region memory) be read
 * now? Only while its lease surely lives: once it is gone the memory may
 * have a new owner. */
static enum ivshm_proc_state lender_state(ivshm_ep_t *ep, struct peer *p)
{
    return ivshm__proc_state(ep->r, p->owner_slot, p->owner_gen);
}

bool ivshm__deliver(ivshm_ep_t *ep, const struct cell *shared, int expect,
                    uint64_t *since)
{
    struct cell c;
    /* read once; a short cell's payload comes along in the same line */
    memcpy(&c, shared, CELL_HDR);
    if (c.type == CELL_SHORT || c.type == CELL_INLINE) {
        /* the payload's further lines are fetched while the header is
         * checked and the handler matches it, not when it copies them
         * (only hints: bounded by our cell, never faulting) */
        uint64_t end = (uint64_t)c.len +
                       (c.type == CELL_SHORT ? CELL_SHORT_HDR : CELL_HDR);
        if (end > ep->g.cell_size)
            end = ep->g.cell_size;
        for (uint64_t off = 64; off < end; off += 64)
            __builtin_prefetch((const char *)shared + off, 0, 3);
    }
    struct peer *p;
    if (expect >= 0) {
        /* a fast box carries its one sender's life only */
        p = ep->peers[expect];
        if (c.sender != (uint32_t)expect || !p ||
            c.epoch != CELL_EPOCH(p->epoch)) {
            ivshm__drop(ep);
            return true;
        }
    } else {
        bool wait;
        if (!(p = ivshm__rx_peer(ep, c.sender, c.epoch, &wait))) {
            if (wait)
                return false;
            ivshm__drop(ep); /* unknown sender, or a life we never met */
            return true;
        }
    }
    /* A sender that left after publishing: what it put inline in our own
     * queues is still readable and still in order, so it is delivered (a
     * last "done" message must not be lost). Data in its fragments or its
     * region memory may be reused: dropped. */
    bool lent = c.type == CELL_FRAG || c.type == CELL_REGION;
    if (p->dead && lent) {
        ivshm__drop(ep);
        return true;
    }
    int32_t d = seq_diff(c.pseq, p->pseq_in);
    if (d > 0) {
        /* from the future: legal only within what our queues can hold.
         * It waits for its predecessor, which may sit in our other queue
         * (also for a sender that has left: the queues are read in turns);
         * a predecessor that is provably not in our queues counts as lost
         * and the pair resynchronises (end of ivshm_ep_progress), so one
         * lost piece never jams the queue */
        if ((uint32_t)d > ep->g.fifo_cells + ep->cfg.fbox_cells + PENDING_MAX) {
            ivshm__drop(ep);
            return true;
        }
        uint64_t now = ivshm__mono_ns();
        if (!*since)
            *since = now;
        /* the resync (end of the progress call) goes to the lowest piece
         * that waits, whichever wait ran out first */
        if (p->gap_pass != ep->polls) {
            p->gap_pass = ep->polls;
            p->gap_low = c.pseq;
            p->gap_due = false;
            ep->gapped[ep->ngapped++] = c.sender;
        } else if (seq_diff(c.pseq, p->gap_low) < 0) {
            p->gap_low = c.pseq;
        }
        if (now - *since >= GAP_WAIT_NS && !p->rx_held)
            p->gap_due = true; /* a held piece of its own is no gap */
        return false;
    } else if (d < 0) {
        ivshm__drop(ep); /* replay or forgery */
        return true;
    }
    ivshm_msg_t m = {.sender = c.sender,
                     .tag = c.tag,
                     .len = c.len,
                     .offset = c.offset,
                     .total = c.total};
    switch (c.type) {
    case CELL_SHORT:
        if (c.len > ep->g.cell_size - CELL_SHORT_HDR)
            goto bad;
        m.offset = 0;
        m.total = c.len;
        m.data = (const char *)shared + CELL_SHORT_HDR;
        break;
    case CELL_INLINE:
        /* the cell is ours: our cell size bounds it, not the sender's */
        if (c.len > ep->g.cell_size - CELL_HDR || c.offset > c.total ||
            c.len > c.total - c.offset)
            goto bad;
        m.data = (const char *)shared + CELL_HDR;
        break;
    case CELL_FRAG:
        if (c.frag >= p->g.frag_count || c.len > p->g.frag_size ||
            c.offset > c.total || c.len > c.total - c.offset)
            goto bad;
        m.data = p->pool + (uint64_t)c.frag * p->g.frag_size;
        break;
    case CELL_REGION:
        if (!ivshm__owned_by(ep->r, c.aux, c.len, p->owner_slot,
                             p->owner_gen) ||
            c.offset != 0 || c.total != c.len)
            goto bad;
        m.data = (const char *)ivshm_region_base(ep->r) + c.aux;
        break;
    case CELL_FBOX_REQ:
        p->pseq_in++;
        ivshm__fbox_grant(ep, p, c.sender);
        return true;
    case CELL_NOP:
        p->pseq_in++;
        return true;
    default:
        goto bad;
    }
    if (lent) {
        enum ivshm_proc_state s = lender_state(ep, p);
        if (s == PROC_DOUBT) {
            p->rx_held = true;
            return false; /* a reclaimer decides: ask again later */
        }
        if (s == PROC_GONE) {
            ivshm__peer_died(ep, c.sender);
            goto bad;
        }
    }
    p->pseq_in++;
    p->rx_held = false;
    ep->in_handler = true;
    if (ep->handler)
        ep->handler(ep->harg, &m);
    ep->in_handler = false;
    /* acknowledge in the sender's block only while it is still its own */
    if (lent && lender_state(ep, p) == PROC_LIVE) {
        IVSHM_TEST_STEP("ack");
        if (c.type == CELL_FRAG)
            ivshm__frag_ack(&p->fdone[c.frag], c.aux); /* G0 */
        else
            atomic_fetch_add_explicit(&p->rdone[ep->index], 1,
                                      memory_order_release);
    }
    BUMP(ep, msgs_in, 1);
    BUMP(ep, bytes_in, c.len);
    return true;
bad:
    p->pseq_in++; /* the piece is consumed, dropped */
    ivshm__drop(ep);
    return true;
}

/* Reclaims dead leases (at most every GC_MAX_NS: a dead process of this
 * VM is found by its pid, one of another VM after the lease timeout), then
 * marks the peers whose life ended. */
static void check_liveness(ivshm_ep_t *ep, uint64_t now)
{
    if (now - ep->last_gc > GC_MAX_NS) {
        ep->last_gc = now;
        ivshm_gc(ep->r, NULL);
    }
    for (uint32_t i = 0; i < ep->d->max_eps; i++) {
        struct peer *p = ep->peers[i];
        if (p && p->valid && !p->dead && ivshm__peer_gone(ep, p, i))
            ivshm__peer_died(ep, i);
    }
}

int ivshm_ep_progress(ivshm_ep_t *ep)
{
    if (ivshm__lease_held(ep->r) != IVSHM_OK) {
        /* our memory may be someone else's now: touch nothing */
        if (!ep->lease_reported) {
            ep->lease_reported = true;
            if (ep->ev)
                ep->ev(ep->earg, IVSHM_EV_LEASE_LOST, ep->index);
        }
        return 0;
    }
    int budget = (int)ep->cfg.max_per_poll;
    int n;
    /* fair share: the queues take turns going first, so hot fast boxes
     * cannot starve FIFO-only senders */
    if (++ep->polls & 1) {
        n = ivshm__fbox_poll(ep, budget);
        n += ivshm__fifo_poll(ep, budget - n);
    } else {
        n = ivshm__fifo_poll(ep, budget);
        n += ivshm__fbox_poll(ep, budget - n);
    }
    /* gaps that waited long enough, where this call looked at every queue
     * to its end and no cell the sender (or an unknown claimer) may still
     * publish is parked: the pieces in between are lost */
    bool whole = ep->pass_fifo_whole && ep->pass_fbox_whole &&
                 !ep->pass_unknown_claim;
    ep->pass_unknown_claim = false;
    for (uint32_t i = 0; i < ep->ngapped && whole; i++) {
        struct peer *p = ep->peers[ep->gapped[i]];
        if (p && p->gap_pass == ep->polls && p->gap_due &&
            p->claim_pass != ep->polls &&
            seq_diff(p->gap_low, p->pseq_in) > 0) {
            BUMP(ep, invalid, (uint64_t)seq_diff(p->gap_low, p->pseq_in));
            p->pseq_in = p->gap_low;
        }
    }
    ep->ngapped = 0;
    if (ep->polls % LIVENESS_PERIOD == 0 || (ep->npend && n == 0)) {
        uint64_t now = ivshm__mono_ns();
        if (now - ep->last_liveness > LIVENESS_NS) {
            ep->last_liveness = now;
            check_liveness(ep, now);
        }
    }
    return n;
}

void ivshm_ep_stats(const ivshm_ep_t *ep, ivshm_ep_stats_t *s)
{
    s->msgs_in = ep->st.msgs_in;
    s->bytes_in = ep->st.bytes_in;
    s->msgs_out = ep->st.msgs_out;
    s->bytes_out = ep->st.bytes_out;
    s->stalls_full = ep->st.stalls;
    s->invalid_dropped = ep->st.invalid;
    s->dead_peers = ep->st.dead_peers;
    s->fbox_granted = ep->st.fbox_granted;
    s->fbox_used = ep->st.fbox_used;
    s->wakeups = ep->st.wakeups;
    s->doorbell_irqs = ep->db ? ep->db->irqs : 0;
    s->doorbell_vector =
        ep->db && ep->db->wait_fd >= 0 ? (int32_t)ep->db->vector : -1;
}
