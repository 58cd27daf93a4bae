/*
 * Fast boxes: a single-producer ring of bytes a receiver grants to one hot
 * sender (asked for by a CELL_FBOX_REQ after fbox_threshold sends). The
 * receiver owns the memory (banks of FBOX_BANK bytes) and sizes every box
 * by its own published geometry (fbox_ring_bytes); the grant
 * word names the life (epoch) of the sender it was made for. Entries are
 * packed at 16 bytes (chan_layout.h): a small message shares its line with
 * the next, as in Open MPI's vader, where a cell a message would cost a
 * line (and the sender its transfer) each.
 *
 *  F0 sender writes an entry, zeroes the word after it where that is free,
 *     then release-stores the entry's word (kind and seq);
 *  F1 receiver release-stores the box's tail (bytes) after consuming
 *     entries; the sender acquire-loads it only when the box looks full;
 *  F2 receiver zeroes the box, then release-stores the grant; the sender
 *     acquire-loads the grant before its first write.
 *
 * A reader finds an entry by its word only: a word of an earlier lap has
 * another seq (a lap holds at most ring/16 entries), and bytes of an
 * earlier lap's payload are never read as a word, since the writer zeroes
 * the word after each entry (or that place is the reader's own tail, an
 * entry of the earlier lap, or the ring's start, where every lap begins,
 * or a line start the writer zeroed ahead after an earlier publish:
 * ivshm__fbox_zero_ahead).
 */
#include "chan_fbox_read.h"

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
    uint64_t ring = fbox_ring_bytes(p->g.fbox_cells, p->g.cell_size);
    uint64_t bytes = sizeof(struct fbox_hdr) + ring + FBOX_SLACK;
    if (GRANT_EPOCH(w) != (ep->epoch & 0xffffffu))
        return; /* made for an earlier life of our index: not ours */
    if (!p->g.fbox_cells || ring > FBOX_MAX ||
        !ivshm__owned_by(ep->r, off, bytes, p->owner_slot, p->owner_gen)) {
        BUMP(ep, invalid, 1);
        p->fbox_asked = true; /* do not look again */
        return;
    }
    p->tx_fbox_hdr = (struct fbox_hdr *)((char *)ivshm_region_base(ep->r) + off);
    p->tx_fbox = (char *)p->tx_fbox_hdr + sizeof(struct fbox_hdr);
    p->tx_fbox_pos = 0;
    p->tx_fbox_tail = 0;
    p->tx_fbox_off = 0;
    p->tx_fbox_ring = (uint32_t)ring;
    p->tx_fbox_seq = 0;
    p->tx_fbox_zeroed = 0;
    int32_t msg_max = fbox_msg_limit(&p->g);
    p->tx_fbox_msg = msg_max >= 0;
    p->tx_fbox_msg_max = msg_max >= 0 ? (uint32_t)msg_max : 0;
    p->tx_fbox_long_above = p->g.cell_size - CELL_SHORT_HDR;
    p->tx_long_skip = 0;
    p->tx_long_pseq_in = p->pseq_in - 1; /* the first may */
    ivshm__tx_usual_update(p);
    BUMP(ep, fbox_used, 1);
}

static inline _Atomic uint64_t *entry_word(char *at)
{
    return (_Atomic uint64_t *)at;
}

char *ivshm__fbox_entry(struct peer *p, uint32_t len, uint16_t *seq)
{
    if (!p->tx_fbox)
        return NULL;
    uint32_t ring = p->tx_fbox_ring, off = p->tx_fbox_off;
    uint32_t size = fbox_entry_size(off, len), skip = 0;
    /* an entry never wraps: the ring's end is skipped where it is short */
    if (ring - off < size) {
        skip = ring - off;
        size = fbox_entry_size(0, len);
    }
    uint64_t need = (uint64_t)skip + size;
    /* the tail is the receiver's word: one that claims more than a ring
     * in use (or less than nothing) leaves no room */
    uint64_t used = p->tx_fbox_pos - p->tx_fbox_tail;
    if (used > ring || ring - used < need) {
        p->tx_fbox_tail = atomic_load_explicit(&p->tx_fbox_hdr->tail,
                                               memory_order_acquire); /* F1 */
        used = p->tx_fbox_pos - p->tx_fbox_tail;
        if (used > ring || ring - used < need)
            return NULL;
    }
    if (skip) {
        ivshm__publish_word(entry_word(p->tx_fbox + off),
                            FBOX_WORD(++p->tx_fbox_seq, FBOX_SKIP, 0, 0, 0));
        off = 0;
    }
    char *at = p->tx_fbox + off;
    p->tx_fbox_pos += need;
    off += size;
    /* F0: the word after this entry reads "nothing yet" before this
     * entry's own word is published (stores in order, its word last) */
    if (off < ring && ring - (used + need) > 0)
        atomic_store_explicit(entry_word(p->tx_fbox + off), 0,
                              memory_order_relaxed);
    p->tx_fbox_off = off == ring ? 0 : off;
    *seq = ++p->tx_fbox_seq;
    return at;
}

struct cell *ivshm__fbox_claim(struct peer *p, uint32_t bytes, uint64_t *pos)
{
    uint16_t seq;
    if (p->tx_box_held)
        return NULL; /* behind a reservation: the FIFO (see tx_box_held) */
    /* room for a whole header: a cancelled reservation publishes a NOP
     * (a full header) where the short form was claimed */
    if (bytes < CELL_HDR)
        bytes = CELL_HDR;
    char *at = ivshm__fbox_entry_fast(p, bytes, &seq);
    if (!at)
        return NULL;
    *pos = FBOX_POS(seq, bytes);
    return (struct cell *)(at + 8);
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
    p->rx_fbox_off = 0;
    p->rx_fbox_seq = 0;
    p->rx_fbox_bad = false;
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

/* Bytes the entry with word w at offset off takes, 0 if it breaks the
 * rules of our boxes (its sender wrote it: untrusted). */
static uint32_t entry_size(const ivshm_ep_t *ep, uint64_t w, uint32_t off)
{
    switch (FBOX_KIND(w)) {
    case FBOX_SKIP:
        return ep->fbox_ring - off;
    case FBOX_MSG:
        return msg_entry_size(ep, w, off);
    case FBOX_CELL:
        if (FBOX_LEN(w) < CELL_SHORT_HDR || FBOX_LEN(w) > ep->g.cell_size)
            return 0;
        return size_in_ring(ep, w, off);
    default:
        return 0;
    }
}

int ivshm__fbox_poll(ivshm_ep_t *ep, int budget)
{
    int n = 0;
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
        int k = 0; /* entries read, skips included (they bound the loop) */
        bool drained = false, waits = false;
        while (n < budget && k < budget) {
            uint64_t w;
            if (!ivshm__fbox_head_entry(p, &w)) {
                drained = true;
                break;
            }
            uint32_t off = p->rx_fbox_off;
            uint32_t size = entry_size(ep, w, off);
            if (!size) {
                /* its entries can no longer be found: the pair's later
                 * pieces come through the FIFO, after a resync */
                ivshm__drop(ep);
                p->rx_fbox_bad = true;
                drained = true;
                break;
            }
            char *at = p->rx_fbox + off;
            bool done = true;
            if (usual_entry(p, w)) {
                /* the usual entry, the pair's next message */
                ivshm__hand_over_msg(ep, p, idx, w, at + 8, ep->whole);
            } else if (FBOX_KIND(w) == FBOX_MSG)
                done = ivshm__deliver_msg(ep, idx, w, at + 8,
                                          &p->rx_fbox_wait);
            else if (FBOX_KIND(w) == FBOX_CELL)
                done = ivshm__deliver(ep, (const struct cell *)(at + 8),
                                      (int)idx, FBOX_LEN(w),
                                      &p->rx_fbox_wait);
            if (!done) {
                waits = true; /* its head waits: looked at to the end */
                break;        /* its FIFO predecessors first */
            }
            box_advance(ep, p, size);
            if (FBOX_KIND(w) != FBOX_SKIP)
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
        /* (k == 0 too: an earlier pass may have ended on the budget with
         * bytes read but not released) */
        if (p->rx_fbox)
            box_release(ep, p, n < budget);
    }
    return n;
}

bool ivshm__fbox_ready(ivshm_ep_t *ep)
{
    uint64_t w;
    for (uint32_t i = 0; i < ep->nactive; i++) {
        const struct peer *p = ep->peers[ep->active[i]];
        if (p && p->rx_fbox && ivshm__fbox_head_entry(p, &w))
            return true;
    }
    return false;
}
