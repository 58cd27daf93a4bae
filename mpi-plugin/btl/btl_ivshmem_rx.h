/*
 * The region route's receive gate: what mca_btl_ivshmem_recv accepts of a
 * piece the channel handed it. The channel has checked the piece against
 * its own cell and fragment geometry; the fields checked here are the
 * BTL's protocol, written by the sender into shared memory, so they are
 * untrusted: a tag outside ob1's table, a piece that is not one whole
 * message (our sends never split one), or a sender index outside our peer
 * table is dropped and counted by reason, never delivered. No Open MPI
 * types here, so that tests/unit/test_btl_rx.c checks it without MPI.
 */
#ifndef BTL_IVSHMEM_RX_H
#define BTL_IVSHMEM_RX_H

#include <ivshm/channel.h>

#include <stdbool.h>
#include <stdint.h>

enum ivshmem_rx_drop {
    IVSHMEM_RX_BAD_TAG,        /* tag >= the BTL's tag range */
    IVSHMEM_RX_BAD_LENGTH,     /* offset != 0 or len != total */
    IVSHMEM_RX_UNKNOWN_SENDER, /* sender outside the peer table */
    IVSHMEM_RX_NDROP
};

/* True if a whole message (the channel's whole handler) of this sender
 * and tag is to be delivered; *slot is then its sender's entry of the
 * peer table (NULL for a rank add_procs has not shown us yet: its
 * messages are delivered, ob1 finds the rank in its own header).
 * Otherwise the drop is counted in dropped[reason]. */
static inline bool ivshmem_rx_accept_whole(uint32_t sender, uint32_t tag,
                                           uint32_t tag_max,
                                           void *const *peers,
                                           uint32_t npeers,
                                           uint64_t dropped[IVSHMEM_RX_NDROP],
                                           void **slot)
{
    enum ivshmem_rx_drop why;
    if (tag >= tag_max)
        why = IVSHMEM_RX_BAD_TAG;
    else if (sender >= npeers)
        why = IVSHMEM_RX_UNKNOWN_SENDER;
    else {
        *slot = peers[sender];
        return true;
    }
    dropped[why]++;
    return false;
}

/* The same for any piece: one that is not a whole message is dropped
 * (our sends never split one); a bad tag is reported first. */
static inline bool ivshmem_rx_accept(const ivshm_msg_t *m, uint32_t tag_max,
                                     void *const *peers, uint32_t npeers,
                                     uint64_t dropped[IVSHMEM_RX_NDROP],
                                     void **slot)
{
    if (m->tag < tag_max && (m->offset != 0 || m->len != m->total)) {
        dropped[IVSHMEM_RX_BAD_LENGTH]++;
        return false;
    }
    return ivshmem_rx_accept_whole(m->sender, m->tag, tag_max, peers, npeers,
                                   dropped, slot);
}

#endif
