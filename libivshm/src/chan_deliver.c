/*
 * Delivery of one published cell, from the FIFO or a fast box: the header
 * is read once into a local, its sender's life is found, the piece is
 * checked against the pair's order (a piece from the future waits for its
 * predecessor), its fields are validated against our own geometry and the
 * sender's published one, and the message is handed to the handler. Data
 * a peer lent (a fragment, its region memory) is read only while the
 * lender's lease surely lives, and acknowledged in its block only then.
 * The steps every message takes are inline helpers; a piece that must wait
 * for its predecessor leaves through an ordinary one.
 */
#include "chan_internal.h"

#include <string.h>

void ivshm__drop(ivshm_ep_t *ep) { BUMP(ep, invalid, 1); }

/* May the data a peer lent us (its fragment, its region memory) be read
 * now? Only while its lease surely lives: once it is gone the memory may
 * have a new owner. */
static inline enum ivshm_proc_state lender_state(ivshm_ep_t *ep,
                                                 struct peer *p)
{
    return ivshm__owner_state(ep, p);
}

/* Copies the cell's header into c (read once); a short cell's payload
 * comes along in the same line. */
static inline void read_cell(const struct cell *shared, uint32_t room,
                             struct cell *c)
{
    memcpy(c, shared, CELL_HDR);
    if (c->type == CELL_SHORT || c->type == CELL_INLINE) {
        uint64_t hdr = c->type == CELL_SHORT ? CELL_SHORT_HDR : CELL_HDR;
        uint64_t end = hdr + c->len;
        if (end > room)
            end = room;
        if (end > hdr)
            ivshm__prefetch_payload((const char *)shared + hdr, end - hdr);
    }
}

/* The life of a peer that sent c; NULL if the cell is not to be trusted,
 * with *wait set when its lease is in doubt (ask again later). */
static inline struct peer *cell_sender(ivshm_ep_t *ep, const struct cell *c,
                                       int expect, bool *wait)
{
    if (expect >= 0) {
        /* a fast box carries its one sender's life only */
        struct peer *p = ep->peers[expect];
        *wait = false;
        if (c->sender != (uint32_t)expect || !p ||
            c->epoch != CELL_EPOCH(p->epoch))
            return NULL;
        return p;
    }
    return ivshm__rx_peer(ep, c->sender, c->epoch, wait);
}

/* A piece from the future (d ahead of the pair's next): legal only within
 * what our queues can hold. It waits for its predecessor, which may sit in
 * our other queue (also for a sender that has left: the queues are read in
 * turns); a predecessor that is provably not in our queues counts as lost
 * and the pair resynchronises (end of ivshm_ep_progress), so one lost
 * piece never jams the queue. Returns what ivshm__deliver returns: false
 * (it waits), or true (dropped: too far ahead). */
static bool wait_for_predecessor(ivshm_ep_t *ep, struct peer *p,
                                 const struct cell *c, int32_t d,
                                 uint64_t *since)
{
    if ((uint32_t)d > pseq_window(&ep->g)) {
        ivshm__drop(ep);
        return true;
    }
    uint64_t now = ivshm__mono_ns();
    if (!*since)
        *since = now;
    /* the resync (end of the progress call) goes to the lowest piece that
     * waits, whichever wait ran out first */
    if (p->gap_pass != ep->polls) {
        p->gap_pass = ep->polls;
        p->gap_low = c->pseq;
        p->gap_due = false;
        ep->gapped[ep->ngapped++] = c->sender;
    } else if (seq_diff(c->pseq, p->gap_low) < 0) {
        p->gap_low = c->pseq;
    }
    if (now - *since >= GAP_WAIT_NS && !p->rx_held)
        p->gap_due = true; /* a held piece of its own is no gap */
    return false;
}

enum cell_kind { CELL_IS_MESSAGE, CELL_IS_CONTROL, CELL_IS_BAD };

/* Validates c's fields for its type and points m at its payload. Control
 * cells (a fast-box request, a no-op) carry no message: they take their
 * place in the pair's order and are carried out here. */
static inline enum cell_kind cell_message(ivshm_ep_t *ep, struct peer *p,
                                          const struct cell *c,
                                          const struct cell *shared,
                                          uint32_t room, ivshm_msg_t *m)
{
    /* every type but the short one carries the full header: its fields
     * beyond the short one's must lie in the cell's own room */
    if (c->type != CELL_SHORT && room < CELL_HDR)
        return CELL_IS_BAD;
    *m = (ivshm_msg_t){.sender = c->sender,
                       .tag = c->tag,
                       .len = c->len,
                       .offset = c->offset,
                       .total = c->total};
    switch (c->type) {
    case CELL_SHORT:
        if ((uint64_t)c->len + CELL_SHORT_HDR > room)
            return CELL_IS_BAD;
        m->offset = 0;
        m->total = c->len;
        m->data = (const char *)shared + CELL_SHORT_HDR;
        return CELL_IS_MESSAGE;
    case CELL_INLINE:
        /* the cell is ours: its room bounds it, not the sender's word */
        if ((uint64_t)c->len + CELL_HDR > room || c->offset > c->total ||
            c->len > c->total - c->offset)
            return CELL_IS_BAD;
        m->data = (const char *)shared + CELL_HDR;
        return CELL_IS_MESSAGE;
    case CELL_FRAG:
        if (c->frag >= p->g.frag_count || c->len > p->g.frag_size ||
            c->offset > c->total || c->len > c->total - c->offset)
            return CELL_IS_BAD;
        m->data = p->pool + (uint64_t)c->frag * p->g.frag_size;
        return CELL_IS_MESSAGE;
    case CELL_REGION:
        if (!ivshm__owned_by(ep->r, c->aux, c->len, p->owner_slot,
                             p->owner_gen) ||
            c->offset != 0 || c->total != c->len)
            return CELL_IS_BAD;
        m->data = (const char *)ivshm_region_base(ep->r) + c->aux;
        return CELL_IS_MESSAGE;
    case CELL_FBOX_REQ:
        p->pseq_in++;
        ivshm__fbox_grant(ep, p, c->sender);
        return CELL_IS_CONTROL;
    case CELL_NOP:
        p->pseq_in++;
        return CELL_IS_CONTROL;
    default:
        return CELL_IS_BAD;
    }
}


/* Tells the lender its fragment or region memory was read: in the
 * sender's block, and only while that block is still its own. */
static inline void ack_lender(ivshm_ep_t *ep, struct peer *p,
                              const struct cell *c)
{
    if (lender_state(ep, p) != PROC_LIVE)
        return;
    IVSHM_TEST_STEP("ack");
    if (c->type == CELL_FRAG)
        ivshm__frag_ack(&p->fdone[c->frag], c->aux); /* G0 */
    else
        atomic_fetch_add_explicit(&p->rdone[ep->index], 1,
                                  memory_order_release);
}

bool ivshm__deliver(ivshm_ep_t *ep, const struct cell *shared, int expect,
                    uint32_t room, uint64_t *since)
{
    struct cell c;
    read_cell(shared, room, &c);
    bool wait;
    struct peer *p = cell_sender(ep, &c, expect, &wait);
    if (!p) {
        if (wait)
            return false;
        ivshm__drop(ep); /* unknown sender, or a life we never met */
        return true;
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
    if (d > 0)
        return wait_for_predecessor(ep, p, &c, d, since);
    if (d < 0) {
        ivshm__drop(ep); /* replay or forgery */
        return true;
    }
    ivshm_msg_t m;
    switch (cell_message(ep, p, &c, shared, room, &m)) {
    case CELL_IS_MESSAGE:
        break;
    case CELL_IS_CONTROL:
        return true;
    case CELL_IS_BAD:
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
    ivshm__hand_over(ep, p, &m);
    if (lent)
        ack_lender(ep, p, &c);
    /* counted privately; the progress pass mirrors the totals to the
     * shared stats line once (per pass, not per message) */
    ep->st.msgs_in++;
    ep->st.bytes_in += c.len;
    return true;
bad:
    p->pseq_in++; /* the piece is consumed, dropped */
    ivshm__drop(ep);
    return true;
}

bool ivshm__deliver_msg(ivshm_ep_t *ep, uint32_t idx, uint64_t w,
                        const char *data, uint64_t *since)
{
    /* a fast box carries its one sender's life only */
    struct peer *p = ep->peers[idx];
    /* 16 bits of the pair's sequence (fbox_msg_ok: unambiguous) */
    int32_t d = (int16_t)(FBOX_PSEQ(w) - (uint16_t)p->pseq_in);
    if (d > 0) {
        struct cell c = {.pseq = p->pseq_in + (uint32_t)d,
                         .sender = (uint16_t)idx};
        return wait_for_predecessor(ep, p, &c, d, since);
    }
    if (d < 0) {
        ivshm__drop(ep); /* replay */
        return true;
    }
    ivshm__hand_over_msg(ep, p, idx, w, data, ep->whole);
    return true;
}
