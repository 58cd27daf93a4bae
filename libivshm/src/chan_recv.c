/*
 * Receiving: the progress loop over fast boxes and the FIFO (which hand
 * each published cell to chan_deliver.c), the resynchronisation of pairs
 * whose missing piece is provably lost, and liveness: peers whose life
 * ended, and our own lease.
 */
#include "chan_fbox_read.h"
#include "doorbell.h"

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
        if (p && p->valid && !p->dead && ivshm__peer_gone(ep, p))
            ivshm__peer_died(ep, i);
    }
}

/* The message statistics' mirror in the shared stats lines (as BUMP's),
 * for `ivshm stat`: written once per pass that delivered, at the first
 * call that finds nothing in the one box after the usual path delivered
 * from it (settle), and on the periodic liveness look, not per message.
 * The sends' count is mirrored here too (a sender's progress delivers its
 * replies, or looks at liveness every LIVENESS_PERIOD calls). */
static inline void mirror_stats(ivshm_ep_t *ep)
{
    ep->mirror_due = false;
    atomic_store_explicit(&ep->ctl->msgs_in, ep->st.msgs_in,
                          memory_order_relaxed);
    atomic_store_explicit(&ep->ctl->bytes_in, ep->st.bytes_in,
                          memory_order_relaxed);
    atomic_store_explicit(&ep->ctl->msgs_out, ep->st.msgs_out,
                          memory_order_relaxed);
    atomic_store_explicit(&ep->ctl->bytes_out, ep->st.bytes_out,
                          memory_order_relaxed);
}

/* What ivshm_ep_progress's first look found. */
enum first_look {
    LOOK_LEASE_LOST, /* our lease is not held */
    LOOK_IDLE,       /* every queue idle (only liveness may be due) */
    LOOK_BOXES,      /* the FIFO idle, a fast box not */
    LOOK_ALL,        /* the FIFO not idle */
};

/* A pass that found work, or that is due to look at liveness (every
 * LIVENESS_PERIOD calls, or when a sleeper asks). */
static __attribute__((noinline)) int progress_pass(ivshm_ep_t *ep,
                                                   enum first_look look)
{
    if (look == LOOK_LEASE_LOST) {
        /* our memory may be someone else's now: touch nothing */
        if (!ep->lease_reported) {
            ep->lease_reported = true;
            ivshm__event(ep, IVSHM_EV_LEASE_LOST, ep->index);
        }
        return 0;
    }
    int budget = (int)ep->cfg.max_per_poll;
    int n = 0;
    if (look == LOOK_IDLE)
        goto liveness;
    /* fair share: the queues take turns going first, so hot fast boxes
     * cannot starve FIFO-only senders. A FIFO found idle is not polled
     * again: the pass is then the one that polls the FIFO first, at the
     * caller's look (nothing was claimed, parked or unreleased there) */
    if (look == LOOK_BOXES) {
        n = ivshm__fbox_poll(ep, budget);
        ep->pass_fifo_whole = true;
    } else if (ep->polls & 1) {
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
    if (n)
        mirror_stats(ep);
liveness:
    /* a sleeper's pass (liveness_due) judges too: it makes few passes,
     * and a peer's death rings nobody */
    if (ep->polls % LIVENESS_PERIOD == 0 || ep->liveness_due ||
        (ep->npend && n == 0)) {
        ep->liveness_due = false;
        mirror_stats(ep);
        uint64_t now = ivshm__mono_ns();
        if (now - ep->last_liveness > LIVENESS_NS) {
            ep->last_liveness = now;
            check_liveness(ep, now);
        }
    }
    return n;
}

/* The usual entry found at the head of p's box (index idx), with word w:
 * takes it and those after it, handing them to whole (ep->whole, read once
 * a call: it is set before the endpoint's first progress, channel.h), or
 * leaves the whole pass the entry the usual steps refuse. */
static inline __attribute__((always_inline)) int
usual_steps(ivshm_ep_t *ep, struct peer *p, uint32_t idx, uint64_t w,
            ivshm_whole_handler_t whole)
{
    int n = box_take_usual(ep, p, idx, w, (int)ep->cfg.max_per_poll, whole);
    if (!n)
        return progress_pass(ep, LOOK_BOXES);
    ep->mirror_due = true;
    return n;
}

/* The usual steps, a call of their own, so that the calls that find
 * nothing save no registers: with the endpoint's handler as it is set, or
 * with the one a caller named (ivshm_ep_progress_whole). The second has
 * one caller where a component names its handler, so the compiler
 * (link-time inlining, docs/channels.md, "The channel inlined into the
 * components") knows the handler there and calls it directly
 * (docs/channels.md, "The handler named"). */
static __attribute__((noinline)) int progress_usual(ivshm_ep_t *ep,
                                                    struct peer *p,
                                                    uint32_t idx, uint64_t w)
{
    return usual_steps(ep, p, idx, w, ep->whole);
}
static __attribute__((noinline)) int
progress_usual_named(ivshm_ep_t *ep, struct peer *p, uint32_t idx, uint64_t w,
                     ivshm_whole_handler_t whole)
{
    return usual_steps(ep, p, idx, w, whole);
}

/* A call that found nothing in p's box, after the usual path took
 * entries: the stats go to the shared line, off the path of a reply; and
 * bytes read that a pass which ended on its budget left unreleased go
 * back to the sender (F1). */
static __attribute__((noinline)) int settle(ivshm_ep_t *ep, struct peer *p)
{
    box_release(ep, p, true);
    mirror_stats(ep);
    return 0;
}

/* Most calls of a polling receiver find nothing: they are answered here,
 * by a few loads of lines that stay in our cache (our lease word, the
 * FIFO's head, each box's head entry), without the frame of the whole
 * pass. A pass that finds every queue idle (nothing claimed in the FIFO
 * past what we read, nothing parked or left to release, no published
 * entry at a fast box's head, no box of a dead sender to release) has
 * nothing to deliver, release or resolve: a piece that waits is published
 * or parked, so it is seen here. It only looks at liveness, which
 * progress_pass does every LIVENESS_PERIOD calls. A sender's progress
 * while it waits for room, and a receiver between windows or waiting for
 * a reply, make most of their calls such.
 * A receiver with one box (a pair, a halo's neighbour) and an idle FIFO
 * takes the box's usual entries here too, the pair's next messages, with
 * the reader's steps inline (chan_fbox_read.h): no call of the poll, no
 * second look at the peer, no pass's loop over the boxes or its gap
 * bookkeeping (nothing here can leave a gap); docs/channels.md, "The
 * usual path". */
static inline __attribute__((always_inline)) int
ep_progress(ivshm_ep_t *ep, ivshm_whole_handler_t named)
{
    /* A handler's own call delivers nothing: the pass it is in has not
     * moved past the piece being handled, so a nested pass would deliver
     * from the same place (a piece twice, or one skipped: the FIFO lost
     * one that way). The pass goes on once the handler returns. */
    if (__builtin_expect(ep->in_handler, 0))
        return 0;
    ++ep->polls;
    if (__builtin_expect(ivshm__lease_held(ep->r) != IVSHM_OK, 0))
        return progress_pass(ep, LOOK_LEASE_LOST);
    if (!ivshm__fifo_idle(ep))
        return progress_pass(ep, LOOK_ALL);
    if (__builtin_expect(
            ep->polls % LIVENESS_PERIOD == 0 || ep->liveness_due, 0))
        return progress_pass(ep,
                             ivshm__fbox_idle(ep) ? LOOK_IDLE : LOOK_BOXES);
    if (ep->nactive == 1) {
        uint32_t idx = ep->active[0];
        struct peer *p = ep->peers[idx];
        if (p && p->rx_fbox) {
            /* ivshm__fbox_idle's look at this box, the cheap test first */
            uint64_t w;
            if (!ivshm__fbox_head_entry(p, &w)) {
                /* nothing published at its head */
                if (!p->dead) {
                    if (ivshm__fbox_unreleased(p) || ep->mirror_due)
                        return settle(ep, p);
                    return 0;
                }
            } else if (!p->dead && usual_entry(p, w)) {
                /* `named &&` first: in ivshm_ep_progress (named NULL) the
                 * branch goes at compile time, so progress_usual_named's
                 * only caller is a component's, with its constant */
                if (named && named == ep->whole)
                    return progress_usual_named(ep, p, idx, w, named);
                return progress_usual(ep, p, idx, w);
            }
            return progress_pass(ep, LOOK_BOXES); /* anything else */
        }
    }
    return ivshm__fbox_idle(ep) ? 0 : progress_pass(ep, LOOK_BOXES);
}

int ivshm_ep_progress(ivshm_ep_t *ep)
{
    return ep_progress(ep, NULL);
}

int ivshm_ep_progress_whole(ivshm_ep_t *ep, ivshm_whole_handler_t whole)
{
    return ep_progress(ep, whole);
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
