/*
 * Peers: validation of another endpoint's published layout (every geometry
 * a sender relies on comes from the receiver's control block, checked
 * here) and the identity of one life of a peer: directory word, epoch and
 * owner lease. A record that names an ended life is never used to write.
 */
#include "chan_internal.h"

#include <stdlib.h>
#include <string.h>

uint64_t ivshm__ctl_size_for(const ivshm_ep_config_t *c, uint32_t max_eps,
                             struct ctl_geom *g)
{
    uint64_t off = sizeof(struct ep_ctl);
    g->grants_off = off;
    off += (uint64_t)max_eps * 8;
    g->rdone_off = off;
    off += (uint64_t)max_eps * 8;
    g->fdone_off = off;
    off += (uint64_t)c->frag_count * 8;
    off = (off + 63) & ~63ull;
    g->cells_off = off;
    off += (uint64_t)c->fifo_cells * c->cell_size;
    off = (off + 4095) & ~4095ull;
    g->pool_off = off;
    off += (uint64_t)c->frag_count * c->frag_size;
    g->total = off;
    g->fifo_cells = c->fifo_cells;
    g->cell_size = c->cell_size;
    g->fbox_cells = c->fbox_cells;
    g->frag_count = c->frag_count;
    g->frag_size = c->frag_size;
    g->max_eps = max_eps;
    g->magic = CTL_MAGIC;
    return off;
}

bool ivshm__owned_by(const ivshm_region_t *r, uint64_t off, uint64_t len,
                     uint32_t slot, uint32_t gen)
{
    return ivshm__range_owned(r, off, len, OWNER_TAG(OWNER_PROC, slot, gen));
}

/* Validates the control block an entry (word w) points to at off: owned by
 * the entry's lease in every chunk, geometry consistent with its sizes and
 * within our limits. Fills *gout with the private copy every later access
 * uses. */
ivshm_status_t ivshm__check_ctl(ivshm_region_t *r, uint32_t max_eps,
                                uint32_t idx, uint64_t w, uint64_t off,
                                struct ctl_geom *gout)
{
    if (!ivshm__owned_by(r, off, sizeof(struct ep_ctl), DIR_SLOT(w),
                         DIR_GEN(w)))
        return ivshm__fail(IVSHM_ERR_CORRUPT,
                           "endpoint %u: control block offset %llu is not "
                           "its owner's memory",
                           idx, (unsigned long long)off);
    struct ep_ctl *c = (struct ep_ctl *)((char *)ivshm_region_base(r) + off);
    struct ctl_geom g;
    memcpy(&g, &c->g, sizeof(g)); /* read once */
    if (CTL_MAGIC_OLD(g.magic))
        return ivshm__fail(IVSHM_ERR_VERSION,
                           "endpoint %u uses channel layout %c (an older "
                           "libivshm); this library speaks layout %u: run "
                           "one libivshm version in every VM of a job",
                           idx, (char)(g.magic >> 56), CTL_LAYOUT);
    ivshm_ep_config_t pc;
    ivshm_ep_config_defaults(&pc); /* not our $IVSHM_*: the peer's numbers */
    pc.fifo_cells = g.fifo_cells;
    pc.cell_size = g.cell_size;
    pc.fbox_cells = g.fbox_cells;
    pc.frag_count = g.frag_count;
    pc.frag_size = g.frag_size;
    if (g.magic == CTL_MAGIC && ivshm_ep_config_check(&pc) != IVSHM_OK)
        return ivshm__fail(IVSHM_ERR_CORRUPT,
                           "endpoint %u publishes a geometry this library "
                           "refuses (%s)",
                           idx, ivshm_last_error());
    /* every derived offset must be what the sizes imply */
    struct ctl_geom want;
    memset(&want, 0, sizeof(want));
    bool ok = g.magic == CTL_MAGIC && g.index == idx && g.max_eps == max_eps;
    if (ok) {
        ivshm__ctl_size_for(&pc, g.max_eps, &want);
        want.index = g.index;
        want.epoch = g.epoch;
        ok = memcmp(&want, &g, sizeof(g)) == 0 &&
             ivshm__owned_by(r, off, g.total, DIR_SLOT(w), DIR_GEN(w));
    }
    if (!ok)
        return ivshm__fail(IVSHM_ERR_CORRUPT,
                           "endpoint %u: control block geometry is invalid",
                           idx);
    *gout = g;
    return IVSHM_OK;
}

/* Reads directory entry idx once, validates it and the control block it
 * points to, and fills p. */
ivshm_status_t ivshm__load_peer(ivshm_ep_t *ep, uint32_t idx,
                                uint64_t want_word, struct peer *p)
{
    ivshm_domain_t *d = ep->d;
    ivshm_region_t *r = ep->r;
    if (idx >= d->max_eps)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "endpoint %u out of range",
                           idx);
    struct dir_entry *e = &d->dir[idx];
    /* D0 (reader): the word, then what it publishes */
    uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
    uint32_t epoch = atomic_load_explicit(&e->epoch, memory_order_relaxed);
    if (DIR_STATE(w) != DIR_READY || (want_word && w != want_word))
        return ivshm__fail(IVSHM_ERR_NOT_FOUND,
                           "endpoint %u is gone or was replaced", idx);
    enum ivshm_proc_state ps = ivshm__proc_state(r, DIR_SLOT(w), DIR_GEN(w));
    if (ps == PROC_DOUBT)
        return ivshm__fail(IVSHM_ERR_AGAIN,
                           "endpoint %u's lease is being judged", idx);
    if (ps != PROC_LIVE)
        return ivshm__fail(IVSHM_ERR_PEER_DEAD,
                           "endpoint %u's process lease is gone", idx);
    uint64_t off = atomic_load(&e->ctl_off);
    struct ctl_geom g;
    ivshm_status_t st = ivshm__check_ctl(r, d->max_eps, idx, w, off, &g);
    if (st != IVSHM_OK)
        return st;
    if (g.epoch != epoch)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND,
                           "endpoint %u is being re-created", idx);
    struct ep_ctl *c = (struct ep_ctl *)((char *)ivshm_region_base(r) + off);
    memset(p, 0, sizeof(*p));
    p->valid = true;
    p->entry_word = w;
    p->epoch = epoch;
    p->owner_slot = DIR_SLOT(w);
    p->owner_gen = DIR_GEN(w);
    p->entry = e;
    p->owner_word = &ivshm__reg(r, p->owner_slot)->word; /* live: in range */
    p->owner_alive = SLOT_WORD(p->owner_gen, SLOT_ALIVE);
    p->lives_seen = LIVES_UNSEEN;
    p->ctl = c;
    p->g = g;
    p->fifo_shift = (uint32_t)__builtin_ctz(g.fifo_cells);
    p->cells = (char *)c + g.cells_off;
    p->grants = (_Atomic uint64_t *)((char *)c + g.grants_off);
    p->rdone = (_Atomic uint64_t *)((char *)c + g.rdone_off);
    p->fdone = (_Atomic uint64_t *)((char *)c + g.fdone_off);
    p->pool = (char *)c + g.pool_off;
    p->cached_tail = atomic_load_explicit(&c->tail, memory_order_acquire);
    /* tickets continue from what this life of the receiver counted for
     * our index (an earlier life of ours may have used it) */
    p->region_tickets = atomic_load_explicit(&ep->rdone[idx],
                                             memory_order_acquire);
    p->rx_fbox_slot = -1;
    return IVSHM_OK;
}

struct peer *ivshm__set_peer(ivshm_ep_t *ep, uint32_t idx,
                             const struct peer *tmp)
{
    struct peer *p = ep->peers[idx];
    if (!p) {
        p = malloc(sizeof(*p));
        if (!p)
            return NULL;
        ep->peers[idx] = p;
    } else {
        /* the earlier life has ended (another holds its index): said as
         * a death where we had not seen it yet, so that what the front
         * end bound to it (a UCT endpoint) fails instead of sending to
         * the new life. Then its box (our memory) is released and its
         * grant withdrawn, its fragments from us taken back */
        if (p->valid && !p->dead)
            ivshm__peer_died(ep, idx);
        ivshm__fbox_release(ep, p, idx);
        if (p->valid)
            ivshm__frag_reclaim(ep, idx);
    }
    *p = *tmp;
    return p;
}

bool ivshm__peer_gone(ivshm_ep_t *ep, const struct peer *p)
{
    return p->dead || !ivshm__entry_same(p) ||
           ivshm__owner_state(ep, p) == PROC_GONE;
}

struct peer *ivshm__rx_peer(ivshm_ep_t *ep, uint32_t idx, uint16_t epoch,
                           bool *wait)
{
    *wait = false;
    if (idx >= ep->d->max_eps)
        return NULL;
    struct peer *p = ep->peers[idx];
    if (p && p->valid && CELL_EPOCH(p->epoch) == epoch)
        return p;
    /* a life we have not met: the current occupant of the index, if the
     * cell is its own */
    struct peer tmp;
    ivshm_status_t st = ivshm__load_peer(ep, idx, 0, &tmp);
    *wait = st == IVSHM_ERR_AGAIN; /* its lease is in doubt: ask again */
    if (st != IVSHM_OK || CELL_EPOCH(tmp.epoch) != epoch)
        return NULL;
    return ivshm__set_peer(ep, idx, &tmp);
}

void ivshm__peer_died(ivshm_ep_t *ep, uint32_t idx)
{
    struct peer *p = ep->peers[idx];
    if (!p || p->dead)
        return;
    p->dead = true;
    p->lives_seen = LIVES_UNSEEN; /* its sends take the full check */
    /* what we lent it comes back; its fast box (our memory) is drained by
     * the fast-box poll, then released: what it published before it left
     * is still delivered */
    ivshm__frag_reclaim(ep, idx);
    BUMP(ep, dead_peers, 1);
    ivshm__event(ep, IVSHM_EV_PEER_DEAD, idx);
}

ivshm_status_t ivshm_ep_peer_holds(ivshm_ep_t *ep, uint32_t peer,
                                   uint64_t off, uint64_t len)
{
    struct peer *p = peer < ep->d->max_eps ? ep->peers[peer] : NULL;
    if (!p || !p->valid)
        return ivshm__fail(IVSHM_ERR_INVAL, "peer %u is not connected", peer);
    if (ivshm__owner_state(ep, p) != PROC_LIVE)
        return ivshm__fail(IVSHM_ERR_PEER_DEAD,
                           "peer %u's lease is gone or being reclaimed", peer);
    if (!ivshm__owned_by(ep->r, off, len, p->owner_slot, p->owner_gen))
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "[%llu, +%llu) is not memory of peer %u",
                           (unsigned long long)off, (unsigned long long)len,
                           peer);
    return IVSHM_OK;
}

ivshm_status_t ivshm_ep_peer_alive(ivshm_ep_t *ep, uint32_t peer)
{
    struct peer *p = peer < ep->d->max_eps ? ep->peers[peer] : NULL;
    if (!p || !p->valid ||
        ivshm__owner_state(ep, p) != PROC_LIVE)
        return ivshm__fail(IVSHM_ERR_PEER_DEAD,
                           "peer %u's lease ended (its memory may have a new "
                           "owner)",
                           peer);
    return IVSHM_OK;
}

ivshm_status_t ivshm_ep_peer_silence(ivshm_ep_t *ep, uint32_t peer,
                                     uint64_t *silent_ms)
{
    *silent_ms = 0;
    const struct peer *p = peer < ep->d->max_eps ? ep->peers[peer] : NULL;
    if (!p || !p->valid)
        return ivshm__fail(IVSHM_ERR_INVAL, "peer %u is not connected", peer);
    /* a reclaim in progress (DOUBT) may still back off when the owner
     * answers: no verdict yet */
    enum ivshm_proc_state ps =
        ivshm__owner_state(ep, p);
    if (ps == PROC_GONE)
        return ivshm__fail(IVSHM_ERR_PEER_DEAD, "peer %u's lease ended", peer);
    if (ps == PROC_DOUBT)
        return IVSHM_OK;
    struct ivshm_reg_slot *s = ivshm__reg(ep->r, p->owner_slot);
    uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
    uint64_t now = ivshm__now_ns();
    bool by_pid;
    /* the slot's word read once: a slot taken by a new lease meanwhile is
     * no verdict on this peer (ivshm_ep_peer_alive answers it next time) */
    if (w != SLOT_WORD(p->owner_gen, SLOT_ALIVE))
        return IVSHM_OK;
    switch (ivshm__lease_verdict(ep->r, s, w, now, &by_pid)) {
    case VERDICT_DEAD:
        return ivshm__fail(IVSHM_ERR_PEER_DEAD,
                           "peer %u's process is gone (pid table)", peer);
    case VERDICT_DOUBT: {
        uint64_t hb = atomic_load_explicit(&s->heartbeat_ns,
                                           memory_order_acquire);
        *silent_ms = now > hb ? (now - hb) / 1000000u : 0;
        return IVSHM_OK;
    }
    default:
        return IVSHM_OK;
    }
}
