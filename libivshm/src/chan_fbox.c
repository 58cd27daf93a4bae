/*
 * Fast boxes: a single-producer ring a receiver grants to one hot sender
 * (asked for by a CELL_FBOX_REQ after fbox_threshold sends). The receiver
 * owns the memory (banks of FBOX_BANK bytes) and sizes every box by its
 * own published geometry (fbox_cells x cell_size); the grant word names
 * the life (epoch) of the sender it was made for.
 *
 *  F0 sender writes a cell, then release-stores its seq (as C1);
 *  F1 receiver release-stores the box's tail after consuming cells;
 *     the sender acquire-loads it only when the box looks full;
 *  F2 receiver zeroes the box, then release-stores the grant; the sender
 *     acquire-loads the grant before its first write.
 */
#include "chan_internal.h"

#include <stdlib.h>
#include <string.h>

/* Picks up a fast box the peer granted us (validated once). */
void ivshm__fbox_check_grant(ivshm_ep_t *ep, struct peer *p)
{
    uint64_t w = atomic_load_explicit(&p->grants[ep->index],
                                      memory_order_acquire); /* F2 */
    if (!w)
        return;
    uint64_t off = GRANT_OFF(w);
    uint64_t bytes = sizeof(struct fbox_hdr) +
                     (uint64_t)p->g.fbox_cells * p->g.cell_size;
    if (GRANT_EPOCH(w) != (ep->epoch & 0xffffffu))
        return; /* made for an earlier life of our index: not ours */
    if (!p->g.fbox_cells ||
        !ivshm__owned_by(ep->r, off, bytes, p->owner_slot, p->owner_gen)) {
        BUMP(ep, invalid, 1);
        p->fbox_asked = true; /* do not look again */
        return;
    }
    p->tx_fbox_hdr = (struct fbox_hdr *)((char *)ivshm_region_base(ep->r) + off);
    p->tx_fbox = (char *)p->tx_fbox_hdr + sizeof(struct fbox_hdr);
    p->tx_fbox_pos = 0;
    p->tx_fbox_tail = 0;
    BUMP(ep, fbox_used, 1);
}

/* A cell of the box the peer granted us, NULL if it has none or is full.
 * Sized by the receiver's published geometry, never ours. */
struct cell *ivshm__fbox_claim(struct peer *p, uint64_t *pos)
{
    if (!p->tx_fbox)
        return NULL;
    uint32_t n = p->g.fbox_cells;
    if (ring_full(p->tx_fbox_pos, p->tx_fbox_tail, n))
        p->tx_fbox_tail = atomic_load_explicit(&p->tx_fbox_hdr->tail,
                                               memory_order_acquire); /* F1 */
    if (ring_full(p->tx_fbox_pos, p->tx_fbox_tail, n))
        return NULL;
    *pos = p->tx_fbox_pos++;
    return (struct cell *)(p->tx_fbox + (*pos & (n - 1)) * p->g.cell_size);
}

/* Grants a fast box to sender p (index idx) if the budget allows. */
void ivshm__fbox_grant(ivshm_ep_t *ep, struct peer *p, uint32_t idx)
{
    if (p->rx_fbox || !ep->cfg.fbox_cells ||
        ep->fbox_granted >= ep->cfg.fbox_budget)
        return;
    uint32_t per_bank = FBOX_BANK / ep->fbox_bytes;
    if (per_bank > 32)
        per_bank = 32;
    if (per_bank == 0)
        per_bank = 1; /* a box larger than a bank is a bank of its own */
    uint32_t bank_bytes =
        ep->fbox_bytes > FBOX_BANK ? ep->fbox_bytes : FBOX_BANK;
    int bank = -1, slot = -1;
    for (uint32_t b = 0; b < ep->nbanks && bank < 0; b++)
        for (uint32_t s = 0; s < per_bank; s++)
            if (!(ep->banks[b].used_mask & (1u << s))) {
                bank = (int)b;
                slot = (int)s;
                break;
            }
    if (bank < 0) {
        uint64_t off;
        if (ivshm_alloc(ep->r, bank_bytes, &off) != IVSHM_OK ||
            off + bank_bytes > GRANT_OFF_MAX)
            return; /* region full: the pair stays on the FIFO */
        struct fbox_bank *nb =
            realloc(ep->banks, (ep->nbanks + 1) * sizeof(*nb));
        if (!nb) {
            ivshm_free(ep->r, off);
            return;
        }
        ep->banks = nb;
        ep->banks[ep->nbanks] = (struct fbox_bank){off, 0};
        bank = (int)ep->nbanks++;
        slot = 0;
    }
    ep->banks[bank].used_mask |= 1u << slot;
    uint64_t off = ep->banks[bank].off + (uint64_t)slot * ep->fbox_bytes;
    char *fb = (char *)ivshm_region_base(ep->r) + off;
    memset(fb, 0, ep->fbox_bytes);
    p->rx_fbox_hdr = (struct fbox_hdr *)fb;
    p->rx_fbox = fb + sizeof(struct fbox_hdr);
    p->rx_fbox_pos = 0;
    p->rx_fbox_released = 0;
    p->rx_fbox_wait = 0;
    p->rx_fbox_slot = bank * 32 + slot;
    ep->active[ep->nactive++] = idx;
    ep->fbox_granted++;
    BUMP(ep, fbox_granted, 1);
    /* F2: the zeroed fast box happens-before the sender's first write */
    atomic_store_explicit(&ep->grants[idx], GRANT_WORD(p->epoch, off),
                          memory_order_release);
    IVSHM_TEST_STEP("grant");
}

void ivshm__fbox_release(ivshm_ep_t *ep, struct peer *p, uint32_t idx)
{
    if (!p->rx_fbox)
        return;
    atomic_store(&ep->grants[idx], 0);
    int b = p->rx_fbox_slot / 32, s = p->rx_fbox_slot % 32;
    if (b < (int)ep->nbanks)
        ep->banks[b].used_mask &= ~(1u << s);
    p->rx_fbox = NULL;
    p->rx_fbox_hdr = NULL;
    for (uint32_t i = 0; i < ep->nactive; i++)
        if (ep->active[i] == idx) {
            ep->active[i] = ep->active[--ep->nactive];
            break;
        }
    ep->fbox_granted--;
}

int ivshm__fbox_poll(ivshm_ep_t *ep, int budget)
{
    int n = 0;
    uint32_t cells = ep->cfg.fbox_cells;
    ep->pass_fbox_whole = true;
    for (uint32_t i = 0; i < ep->nactive; i++) {
        if (n >= budget) {
            ep->pass_fbox_whole = false; /* boxes left unread */
            break;
        }
        uint32_t idx = ep->active[i];
        struct peer *p = ep->peers[idx];
        if (!p || !p->rx_fbox)
            continue;
        int k = 0;
        bool drained = false, waits = false;
        while (n < budget) {
            uint64_t pos = p->rx_fbox_pos;
            struct cell *c = (struct cell *)(p->rx_fbox +
                                             (pos & (cells - 1)) *
                                                 ep->g.cell_size);
            if (atomic_load_explicit(&c->seq, memory_order_acquire) != pos + 1) {
                drained = true; /* F0 (reader) */
                break;
            }
            if (!ivshm__deliver(ep, c, (int)idx, &p->rx_fbox_wait)) {
                waits = true; /* its head waits: looked at to the end */
                break; /* its FIFO predecessors first */
            }
            p->rx_fbox_wait = 0;
            p->rx_fbox_pos++;
            n++;
            k++;
            if (!p->rx_fbox)
                break; /* sender died in the handler's wake */
        }
        if (!drained && !waits && p->rx_fbox)
            ep->pass_fbox_whole = false; /* the budget ran out in this box */
        if (p->rx_fbox && p->dead && drained) {
            ivshm__fbox_release(ep, p, idx); /* last active moves to i */
            i--;
            continue;
        }
        if (p->rx_fbox && k &&
            (p->rx_fbox_pos - p->rx_fbox_released >= cells / 4 || n < budget)) {
            /* F1: release consumed fast-box cells */
            atomic_store_explicit(&p->rx_fbox_hdr->tail, p->rx_fbox_pos,
                                  memory_order_release);
            p->rx_fbox_released = p->rx_fbox_pos;
        }
    }
    return n;
}

/* Is a cell published at the head of p's box? */
static bool head_published(const ivshm_ep_t *ep, const struct peer *p)
{
    uint64_t pos = p->rx_fbox_pos;
    const struct cell *c =
        (const struct cell *)(p->rx_fbox + (pos & (ep->cfg.fbox_cells - 1)) *
                                               ep->g.cell_size);
    return atomic_load_explicit(&c->seq, memory_order_acquire) ==
           pos + 1; /* F0 (reader) */
}

bool ivshm__fbox_ready(ivshm_ep_t *ep)
{
    for (uint32_t i = 0; i < ep->nactive; i++) {
        const struct peer *p = ep->peers[ep->active[i]];
        if (p && p->rx_fbox && head_published(ep, p))
            return true;
    }
    return false;
}

bool ivshm__fbox_idle(ivshm_ep_t *ep)
{
    for (uint32_t i = 0; i < ep->nactive; i++) {
        const struct peer *p = ep->peers[ep->active[i]];
        /* a dead sender's drained box is released by the poll */
        if (p && p->rx_fbox && (p->dead || head_published(ep, p)))
            return false;
    }
    return true;
}
