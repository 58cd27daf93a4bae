/*
 * Region-heap blocks and their quota: the malloc'd arrays that the region
 * heap (docs/heap.md) places in the region are bounded per job, so that
 * one job's ordinary arrays cannot take the room other jobs need for their
 * channels and areas.
 *
 * Each process counts the chunks of its own blocks in its registry slot
 * (heap_chunks, written by the owner only). A job's usage is the sum over
 * the live leases that are its members: a member that dies stops counting
 * when its lease ends, and nothing it left half-written is ever trusted,
 * because no counter is shared between writers. The next claim of the slot
 * zeroes the count before the lease is published (registry.c).
 *
 * An allocation first adds its chunks to its own count, then sums (seq_cst
 * both): of two members that allocate at once, at least the later one sees
 * the other's reservation, so the sum never passes the quota (Dekker, as
 * job joins do); both may refuse, never both pass.
 */
#include "internal.h"

uint32_t ivshm__heap_count(const ivshm_region_t *r, struct ivshm_reg_slot *p)
{
    uint32_t n = atomic_load(&p->heap_chunks);
    return n > r->g.chunk_count ? r->g.chunk_count : n;
}

bool ivshm__lease_counts_heap(struct ivshm_reg_slot *p)
{
    unsigned st = SLOT_STATE(atomic_load(&p->word));
    return st == SLOT_ALIVE || st == SLOT_RECLAIMING;
}

/* The heap chunks of each job this process is in (my_jobs[k], 0: none)
 * or, in none, its own: true when one of them passes quota_chunks. */
static bool over_quota(ivshm_region_t *r, uint64_t quota_chunks)
{
    struct ivshm_reg_slot *me = ivshm__reg(r, r->slot);
    uint64_t my_jobs[IVSHM_JOBS_PER_PROC], sum[IVSHM_JOBS_PER_PROC] = {0};
    bool in_a_job = false;
    for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++) {
        my_jobs[k] = atomic_load(&me->jobs[k]);
        in_a_job |= my_jobs[k] != 0;
    }
    if (!in_a_job)
        return ivshm__heap_count(r, me) > quota_chunks;
    for (uint32_t i = 0; i < r->g.reg_slots; i++) {
        struct ivshm_reg_slot *p = ivshm__reg(r, i);
        uint32_t h = ivshm__heap_count(r, p);
        if (h == 0 || !ivshm__lease_counts_heap(p))
            continue;
        for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++)
            for (int m = 0; m < IVSHM_JOBS_PER_PROC && my_jobs[k]; m++)
                if (atomic_load(&p->jobs[m]) == my_jobs[k]) {
                    sum[k] += h;
                    break;
                }
    }
    for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++)
        if (my_jobs[k] && sum[k] > quota_chunks)
            return true;
    return false;
}

ivshm_status_t ivshm_alloc_heap_block(ivshm_region_t *r, uint64_t size,
                                      uint64_t quota, uint64_t *off)
{
    ivshm_status_t st = ivshm__require_attached(r);
    if (st == IVSHM_OK)
        st = ivshm__lease_held(r); /* the slot may be another's now */
    if (st != IVSHM_OK)
        return st;
    uint64_t csize = 1ull << r->g.chunk_shift;
    uint64_t n = size / csize + (size % csize != 0);
    if (n == 0)
        n = 1;
    uint64_t quota_chunks = quota >> r->g.chunk_shift;
    if (n > quota_chunks)
        return ivshm__fail(IVSHM_ERR_QUOTA,
                           "a block of %llu bytes is larger than the "
                           "region-heap quota (%llu bytes)",
                           (unsigned long long)size,
                           (unsigned long long)quota);
    _Atomic uint32_t *my_count = &ivshm__reg(r, r->slot)->heap_chunks;
    /* Q0: reserve, then sum (seq_cst both); pairs with Q0 of every other
     * member */
    atomic_fetch_add(my_count, (uint32_t)n);
    if (over_quota(r, quota_chunks)) {
        atomic_fetch_sub(my_count, (uint32_t)n);
        return ivshm__fail(IVSHM_ERR_QUOTA,
                           "the region-heap blocks of this process' job "
                           "would pass its quota of %llu bytes",
                           (unsigned long long)quota);
    }
    /* quiet: a full region sends the block to private memory, and the
     * heap asks again on every large malloc meanwhile */
    st = ivshm__alloc_owned_quiet(r, OWNER_TAG(OWNER_PROC, r->slot, r->gen),
                                  size, off);
    if (st != IVSHM_OK)
        atomic_fetch_sub(my_count, (uint32_t)n);
    return st;
}

ivshm_status_t ivshm_free_heap_block(ivshm_region_t *r, uint64_t off)
{
    ivshm_status_t st = ivshm__require_attached(r);
    if (st != IVSHM_OK)
        return st;
    /* the run's length, read while the chunks are ours (ivshm_free checks
     * the offset and the owner again, and fails without freeing) */
    uint64_t run = 0;
    if (ivshm__in_heap(&r->g, off, 1))
        run = atomic_load(
            &ivshm__chunk(r, (uint32_t)((off - r->g.heap_off) >>
                                        r->g.chunk_shift))
                 ->run);
    st = ivshm_free(r, off);
    if (st != IVSHM_OK)
        return st;
    _Atomic uint32_t *my_count = &ivshm__reg(r, r->slot)->heap_chunks;
    uint32_t cur = atomic_load(my_count);
    /* never below zero, whatever was counted */
    while (!atomic_compare_exchange_weak(
        my_count, &cur, cur > run ? cur - (uint32_t)run : 0))
        ;
    return IVSHM_OK;
}
