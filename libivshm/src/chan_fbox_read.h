/*
 * The steps of a fast box's reader, inline: chan_fbox.c's poll takes them
 * for every entry, and ivshm_ep_progress (chan_recv.c) for the usual one,
 * the pair's next message at the head of a receiver's only box, without
 * a call of the poll (docs/channels.md, "The usual path").
 */
#ifndef IVSHM_CHAN_FBOX_READ_H
#define IVSHM_CHAN_FBOX_READ_H

#include "chan_internal.h"

#pragma GCC visibility push(hidden) /* as internal.h */

/* The bytes of an entry with word w at offset off if it ends inside the
 * ring, else 0. */
static inline uint32_t size_in_ring(const ivshm_ep_t *ep, uint64_t w,
                                    uint32_t off)
{
    uint32_t size = fbox_entry_size(off, FBOX_LEN(w));
    return size <= ep->fbox_ring - off ? size : 0;
}

/* Bytes of the FBOX_MSG entry with word w at offset off, 0 if it breaks
 * the rules of our boxes (its sender wrote it: untrusted). */
static inline uint32_t msg_entry_size(const ivshm_ep_t *ep, uint64_t w,
                                      uint32_t off)
{
    if ((int32_t)FBOX_LEN(w) > ep->fbox_msg_max)
        return 0;
    return size_in_ring(ep, w, off);
}

/* The box moves past the entry of `size` bytes at its head, delivered. */
static inline void box_advance(const ivshm_ep_t *ep, struct peer *p,
                               uint32_t size)
{
    uint32_t next = p->rx_fbox_off + size;
    p->rx_fbox_wait = 0;
    p->rx_fbox_pos += size;
    p->rx_fbox_off = next == ep->fbox_ring ? 0 : next;
    p->rx_fbox_seq++;
}

/* F1: releases the bytes read, in batches of a quarter ring, or all of
 * them where the pass did not end on its budget. */
static inline void box_release(const ivshm_ep_t *ep, struct peer *p, bool all)
{
    if (p->rx_fbox_pos != p->rx_fbox_released &&
        (p->rx_fbox_pos - p->rx_fbox_released >= ep->fbox_ring / 4 || all)) {
        atomic_store_explicit(&p->rx_fbox_hdr->tail, p->rx_fbox_pos,
                              memory_order_release);
        p->rx_fbox_released = p->rx_fbox_pos;
    }
}

/* The word of the entry at the head of p's box (F0, reader: acquire). */
static inline uint64_t box_head_word(const struct peer *p)
{
    return atomic_load_explicit(
        (_Atomic uint64_t *)(p->rx_fbox + p->rx_fbox_off),
        memory_order_acquire);
}

/* Is the entry with word w the usual one, a message that is the pair's
 * next piece (it goes to the handler as it is)? Its seq, its kind and its
 * 16 bits of the pair's sequence in one compare. */
static inline bool usual_entry(const struct peer *p, uint64_t w)
{
    return (w & FBOX_USUAL_MASK) == ivshm__fbox_usual_word(p);
}

/* Takes the usual entries at the head of p's box (index idx), the first
 * with word w, up to the budget, handing them to whole (ep->whole);
 * returns how many. It stops at anything else (a cell, a skip, a piece
 * out of order, an entry that breaks the rules): the whole poll takes
 * that. It releases what it read (F1), all of it where the budget did not
 * end the loop: a sender judges its room by the tail (a long entry only
 * while at most a quarter of the ring is unreleased; chan_send.c,
 * long_entry_ok), and a release left to a later call made a stream's long
 * messages go by fragments (docs/channels.md, "The usual path"). */
static inline __attribute__((always_inline)) int
box_take_usual(ivshm_ep_t *ep, struct peer *p, uint32_t idx, uint64_t w,
               int budget, ivshm_whole_handler_t whole)
{
    int n = 0;
    for (;;) {
        uint32_t off = p->rx_fbox_off;
        uint32_t size = msg_entry_size(ep, w, off);
        if (!size)
            break;
        ivshm__hand_over_msg(ep, p, idx, w, p->rx_fbox + off + 8, whole);
        box_advance(ep, p, size);
        n++;
        if (!p->rx_fbox)
            return n; /* sender died in the handler's wake */
        if (n >= budget)
            break;
        w = box_head_word(p);
        if (!usual_entry(p, w))
            break;
    }
    box_release(ep, p, n < budget);
    return n;
}

#pragma GCC visibility pop

#endif
