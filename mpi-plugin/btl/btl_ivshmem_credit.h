/*
 * The verbs route's credit rules. A sender holds one credit per receive
 * buffer its peer has posted for it and spends one per message; every
 * message carries back the credits for the buffers its sender has reposted
 * since (what it "owes"). A data message never spends the last credit:
 * that one is kept for an explicit credit message, which goes when enough
 * is owed and no data message can carry it now. Two peers that both burst
 * past each other's buffers at first contact therefore still hand credits
 * back, instead of each waiting for the other's data (the deadlock a
 * credit message held back behind unsendable data caused).
 *
 * Open MPI free, so that tests/unit/test_verbs_credit.c drives these very
 * rules through random bursts between two modelled peers.
 */
#ifndef BTL_IVSHMEM_CREDIT_H
#define BTL_IVSHMEM_CREDIT_H

#include <stdbool.h>
#include <stdint.h>

/* A data message may go: it leaves the last credit for a credit message. */
static inline bool ivshmem_credit_data_ok(int32_t credits)
{
    return credits > 1;
}

/* An explicit credit message is due: at least half the buffers are owed, a
 * credit is left, and no data message can carry them now (data_waiting:
 * sends are queued for credits). */
static inline bool ivshmem_credit_msg_due(int32_t credits, uint32_t owed,
                                          uint32_t rq_depth, bool data_waiting)
{
    return owed >= rq_depth / 2 && credits >= 1 &&
           !(data_waiting && ivshmem_credit_data_ok(credits));
}

/* What the next message carries back (the header's 16 bits at most). */
static inline uint16_t ivshmem_credit_give(uint32_t owed)
{
    return (uint16_t)(owed > 0xffff ? 0xffff : owed);
}

/* The message that carried `give` was posted: one credit spent. */
static inline void ivshmem_credit_spent(int32_t *credits, uint32_t *owed,
                                        uint16_t give)
{
    *owed -= give;
    (*credits)--;
}

/* Credits that came in a message: never more than the peer's buffers (the
 * header is the peer's, untrusted). */
static inline void ivshmem_credit_take(int32_t *credits, uint16_t given,
                                       uint32_t peer_buffers)
{
    int64_t cr = (int64_t)*credits + given;
    *credits = cr > (int64_t)peer_buffers ? (int32_t)peer_buffers : (int32_t)cr;
}

#endif
