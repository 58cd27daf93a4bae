/*
 * coll ivshmem: writes into comm rank 0's area, checked against rank 0's
 * lease. Open MPI free, so that the multi-process test runs this very code
 * against a real region with a real owner killed and its chunks taken
 * (tests/mp/test_coll_hold.c).
 *
 * The area is rank 0's memory. Once rank 0's lease is released (its pid
 * proven dead, or an admin's gc --force after its VM crashed), its chunks
 * cool for one lease timeout and are then handed out (docs/lifetimes.md).
 * A rank that computed longer than that before its next collective would
 * otherwise store its slot and its counter into another process' memory.
 * So every store into the area follows a check that rank 0 still held the
 * whole area at most a quarter of a lease timeout earlier: the check that
 * passed was before the release, and the store comes before the cooling
 * ends. The fast path is one clock read; the check itself (the owner tags
 * of the area's chunks) runs at most once per quarter lease.
 *
 * Remaining window: a writer paused between a passing check and its store
 * for longer than three quarters of a lease timeout, while rank 0's lease
 * is released and the chunks are handed out meanwhile.
 */
#ifndef COLL_IVSHMEM_HOLD_H
#define COLL_IVSHMEM_HOLD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "coll_ivshmem_read.h"

typedef struct civ_hold {
    const ivshm_identity_t *owner; /* comm rank 0 */
    uint64_t off, len;             /* the area */
    uint64_t every_ms;             /* re-check once the last is this old */
    uint64_t checked_ms;           /* the last check that passed */
    bool lost;                     /* a check failed: for good */
} civ_hold_t;

/* a coarse clock is enough for a bound of a quarter lease (>= 1 ms
 * granularity against hundreds of ms), and costs a few ns */
static inline uint64_t civ_hold_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* checks at the next civ_hold_check; lease_ms: the region's lease timeout */
static inline void civ_hold_init(civ_hold_t *h, const ivshm_identity_t *owner,
                                 uint64_t off, uint64_t len, uint32_t lease_ms)
{
    h->owner = owner;
    h->off = off;
    h->len = len;
    h->every_ms = lease_ms / 4;
    h->checked_ms = 0;
    h->lost = false;
}

/* Whether the owner still holds the whole area: true at once while the
 * last passing check is younger than every_ms. */
static inline bool civ_hold_check(civ_hold_t *h, civ_map_fn map)
{
    if (h->lost)
        return false;
    /* taken before the check: the bound counts from no later than it */
    uint64_t now = civ_hold_now_ms();
    if (h->checked_ms && now - h->checked_ms < h->every_ms)
        return true;
    void *addr;
    if (map(h->owner, h->off, h->len, &addr) != IVSHM_OK) {
        h->lost = true;
        return false;
    }
    h->checked_ms = now;
    return true;
}

/* Stores a step counter of the area (release: the step's data this rank
 * wrote is published with it) if the owner still holds the area. */
static inline bool civ_hold_post(civ_hold_t *h, civ_map_fn map,
                                 _Atomic uint64_t *counter, uint64_t state)
{
    if (!civ_hold_check(h, map))
        return false;
    atomic_store_explicit(counter, state, memory_order_release);
    return true;
}

#endif
