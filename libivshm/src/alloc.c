/*
 * Chunk allocator: the heap is cut into fixed chunks, each with an owner
 * tag (kind, slot, generation) in the chunk table. An allocation claims a
 * run of free chunks one CAS at a time (rolling back on conflict) and then
 * publishes its length in the run's first entry. Owners are leases, so the
 * chunks of a dead process or job are found and freed by tag; those of a
 * process that a reclaimer declared dead cool first (one lease timeout),
 * so that a peer's copy that checked the owner's life just before it
 * began cannot land in the next owner's memory. Every allocation is
 * zeroed for its new owner, as the kernel does with pages: what a chunk
 * held, and what a late writer put there while it cooled, never changes
 * hands (docs/lifetimes.md).
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static uint32_t chunks_for(const ivshm_region_t *r, uint64_t size)
{
    /* whole chunks, rounded up without wrapping: a size near 2^64 is more
     * than any region holds, never a few chunks */
    uint64_t n = (size >> r->g.chunk_shift) +
                 ((size & ((1ull << r->g.chunk_shift) - 1)) != 0);
    return n == 0 ? 1 : (n > r->g.chunk_count ? UINT32_MAX : (uint32_t)n);
}

/* Does chunk c lie in pages this process replaced with memory of its own
 * (ivshm_region_keep_range: the heap kept a block there past its detach)?
 * Its view of them is private: it must not own them, nor scrub the
 * region through them; other processes may take them. */
static bool kept_here(const ivshm_region_t *r, uint32_t c)
{
    uintptr_t a = (uintptr_t)r->base + (uintptr_t)r->g.heap_off +
                  ((uintptr_t)c << r->g.chunk_shift);
    uintptr_t end = a + ((uintptr_t)1 << r->g.chunk_shift);
    for (size_t i = 0; i < r->nkeep; i++)
        if (a < r->keep[i].end && r->keep[i].start < end)
            return true;
    return false;
}

/* Claims a run of n free chunks for tag; false when none is free. */
static bool claim_run(ivshm_region_t *r, uint64_t tag, uint32_t n,
                      uint32_t *first)
{
    uint32_t count = r->g.chunk_count;
    for (uint32_t start = 0; start + n <= count;) {
        uint32_t k;
        for (k = 0; k < n; k++)
            if (atomic_load_explicit(&ivshm__chunk(r, start + k)->owner,
                                     memory_order_relaxed) != 0 ||
                (r->nkeep && kept_here(r, start + k)))
                break;
        if (k < n) {
            start += k + 1;
            continue;
        }
        for (k = 0; k < n; k++) {
            uint64_t zero = 0;
            if (!atomic_compare_exchange_strong(
                    &ivshm__chunk(r, start + k)->owner, &zero, tag))
                break;
        }
        if (k < n) {
            /* lost a race: hand back what we took, move past the conflict */
            while (k-- > 0) {
                uint64_t ours = tag; /* only ours: never another's claim */
                atomic_compare_exchange_strong(
                    &ivshm__chunk(r, start + k)->owner, &ours, 0);
            }
            start++;
            continue;
        }
        /* A0: run length published after every owner CAS; readers of the
         * table (check, gc) acquire-load it. */
        atomic_store_explicit(&ivshm__chunk(r, start)->run, n,
                              memory_order_release);
        *first = start;
        return true;
    }
    return false;
}

ivshm_status_t ivshm__alloc_owned_quiet(ivshm_region_t *r, uint64_t tag,
                                        uint64_t size, uint64_t *off)
{
    uint32_t n = chunks_for(r, size);
    uint32_t start;
    if (n <= r->g.chunk_count &&
        (claim_run(r, tag, n, &start) ||
         (ivshm__sweep_cooled(r) > 0 && claim_run(r, tag, n, &start)))) {
        *off = r->g.heap_off + ((uint64_t)start << r->g.chunk_shift);
        /* S0: scrub for the new owner, after the chunks are its own (no
         * other taker) and before it can read them */
        memset((char *)r->base + *off, 0, (uint64_t)n << r->g.chunk_shift);
        return IVSHM_OK;
    }
    return ivshm__fail(IVSHM_ERR_NOSPACE,
                       "region %s has no %llu free contiguous bytes",
                       r->uri, (unsigned long long)size);
}

ivshm_status_t ivshm__alloc_owned(ivshm_region_t *r, uint64_t tag,
                                  uint64_t size, uint64_t *off)
{
    ivshm_status_t st = ivshm__alloc_owned_quiet(r, tag, size, off);
    if (st != IVSHM_ERR_NOSPACE)
        return st;
    uint32_t n = chunks_for(r, size);
    char cause[640] = "";
    ivshm__full_region_cause(r, cause, sizeof(cause));
    return ivshm__fail(IVSHM_ERR_NOSPACE,
                       "region %s has no %llu free contiguous bytes (%u "
                       "chunks of %u bytes); run 'ivshm gc' or use a larger "
                       "region%s",
                       r->uri, (unsigned long long)size, n,
                       1u << r->g.chunk_shift, cause);
}

bool ivshm__range_owned(const ivshm_region_t *r, uint64_t off, uint64_t len,
                        uint64_t tag)
{
    const struct ivshm_geom *g = &r->g;
    if (!ivshm__in_heap(g, off, len))
        return false;
    uint32_t first = (uint32_t)((off - g->heap_off) >> g->chunk_shift);
    uint32_t last = (uint32_t)((off + (len ? len - 1 : 0) - g->heap_off) >>
                               g->chunk_shift);
    for (uint32_t c = first; c <= last; c++)
        if (atomic_load_explicit(&ivshm__chunk(r, c)->owner,
                                 memory_order_relaxed) != tag)
            return false;
    return true;
}

ivshm_status_t ivshm_alloc(ivshm_region_t *r, uint64_t size, uint64_t *off)
{
    ivshm_status_t st = ivshm__require_attached(r);
    if (st == IVSHM_OK)
        st = ivshm__lease_held(r); /* a lost lease allocates nothing */
    if (st != IVSHM_OK)
        return st;
    return ivshm__alloc_owned(r, OWNER_TAG(OWNER_PROC, r->slot, r->gen), size,
                              off);
}

ivshm_status_t ivshm__free_tagged(ivshm_region_t *r, uint64_t off,
                                  uint64_t tag)
{
    uint64_t csize = 1ull << r->g.chunk_shift;
    if (off < r->g.heap_off || (off - r->g.heap_off) % csize ||
        ((off - r->g.heap_off) >> r->g.chunk_shift) >= r->g.chunk_count)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "offset %llu is not the start of a chunk",
                           (unsigned long long)off);
    uint32_t c = (uint32_t)((off - r->g.heap_off) >> r->g.chunk_shift);
    struct ivshm_chunk *k = ivshm__chunk(r, c);
    uint64_t run = atomic_load_explicit(&k->run, memory_order_acquire);
    if (atomic_load(&k->owner) != tag || run == 0 ||
        run > r->g.chunk_count - c)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "offset %llu is not an allocation of this owner",
                           (unsigned long long)off);
    atomic_store(&k->run, 0);
    for (uint64_t i = 0; i < run; i++) {
        uint64_t t = tag;
        atomic_compare_exchange_strong(&ivshm__chunk(r, c + (uint32_t)i)->owner,
                                       &t, 0);
    }
    return IVSHM_OK;
}

ivshm_status_t ivshm_free(ivshm_region_t *r, uint64_t off)
{
    ivshm_status_t st = ivshm__require_attached(r);
    if (st == IVSHM_OK)
        st = ivshm__lease_held(r); /* the chunks are someone else's now */
    if (st != IVSHM_OK)
        return st;
    return ivshm__free_tagged(r, off, OWNER_TAG(OWNER_PROC, r->slot, r->gen));
}

ivshm_status_t ivshm_region_owned(ivshm_region_t *r,
                                  const ivshm_identity_t *owner, uint64_t off,
                                  uint64_t len)
{
    /* settled: an owner a collector is judging (it may back off) is not
     * yet dead, and the caller keeps what it maps (coll ivshmem's areas) */
    ivshm_locality_t loc = ivshm_peer_locality_settled(r, owner);
    if (loc == IVSHM_PEER_REMOTE)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "the owner does not map this region");
    if (loc == IVSHM_PEER_STALE)
        return ivshm__fail(IVSHM_ERR_PEER_DEAD,
                           "the owner's lease (slot %u) ended", owner->slot);
    if (!ivshm__range_owned(r, off, len,
                            OWNER_TAG(OWNER_PROC, owner->slot, owner->gen)))
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "[%llu, +%llu) is not memory of the lease on slot %u",
                           (unsigned long long)off, (unsigned long long)len,
                           owner->slot);
    return IVSHM_OK;
}

uint64_t ivshm_region_offset_of(const ivshm_region_t *r, const void *p,
                                uint64_t len)
{
    uintptr_t base = (uintptr_t)ivshm_region_base(r), a = (uintptr_t)p;
    uint64_t size = ivshm_region_size(r);
    if (len == 0)
        len = 1;
    if (a < base || len > size || a - base > size - len)
        return UINT64_MAX;
    return (uint64_t)(a - base);
}

ivshm_status_t ivshm_region_locate(ivshm_region_t *r, const void *p,
                                   uint64_t len, uint64_t *off,
                                   ivshm_identity_t *owner)
{
    uint64_t o = ivshm_region_offset_of(r, p, len);
    if (len == 0 || o == UINT64_MAX)
        return ivshm__fail(IVSHM_ERR_INVAL, "%p (+%llu) is not in region %s",
                           p, (unsigned long long)len, r->uri);
    ivshm_status_t st = ivshm_self_identity(r, owner);
    if (st == IVSHM_OK)
        st = ivshm_region_owned(r, owner, o, len);
    if (st != IVSHM_OK)
        return IVSHM_ERR_INVAL;
    *off = o;
    return IVSHM_OK;
}

bool ivshm__release_chunk(struct ivshm_chunk *k, uint64_t tag, uint64_t to)
{
    /* The owner moves first, and the run is cleared only while the chunk
     * is still in our hands: once it is free, a new owner may publish its
     * own run there (A0), which a late clear by a slow collector would
     * erase. A chunk set free passes through cooling (which only the
     * sweep frees, a lease timeout later) while its run is cleared. */
    uint64_t held = to ? to : COOL_TAG(ivshm__now_ns() / 1000000u);
    uint64_t t = tag;
    IVSHM_TEST_STEP("chunk-release");
    if (!atomic_compare_exchange_strong(&k->owner, &t, held))
        return false;
    atomic_store(&k->run, 0);
    if (to == 0)
        atomic_compare_exchange_strong(&k->owner, &held, 0);
    return true;
}

/* Gives every chunk of owner tag the tag to (0: free). */
static unsigned retag_owned_by(ivshm_region_t *r, uint64_t tag, uint64_t to)
{
    unsigned n = 0;
    for (uint32_t c = 0; c < r->g.chunk_count; c++) {
        struct ivshm_chunk *k = ivshm__chunk(r, c);
        if (atomic_load_explicit(&k->owner, memory_order_relaxed) == tag)
            n += ivshm__release_chunk(k, tag, to);
    }
    return n;
}

unsigned ivshm__free_owned_by(ivshm_region_t *r, uint64_t tag)
{
    return retag_owned_by(r, tag, 0);
}

unsigned ivshm__cool_owned_by(ivshm_region_t *r, uint64_t tag)
{
    return retag_owned_by(r, tag, COOL_TAG(ivshm__now_ns() / 1000000u));
}

bool ivshm__cool_expired(const ivshm_region_t *r, uint64_t tag, uint64_t now_ms)
{
    uint64_t t = COOL_MS(tag);
    return now_ms >= t && now_ms - t > r->g.lease_timeout_ms;
}

unsigned ivshm__sweep_cooled(ivshm_region_t *r)
{
    uint64_t now_ms = ivshm__now_ns() / 1000000u;
    unsigned n = 0;
    for (uint32_t c = 0; c < r->g.chunk_count; c++) {
        _Atomic uint64_t *owner = &ivshm__chunk(r, c)->owner;
        uint64_t t = atomic_load_explicit(owner, memory_order_relaxed);
        if (OWNER_KIND(t) != OWNER_COOL)
            continue;
        if (ivshm__cool_expired(r, t, now_ms)) {
            n += atomic_compare_exchange_strong(owner, &t, 0);
        } else if (COOL_MS(t) > now_ms + r->g.lease_timeout_ms) {
            /* a stamp from further ahead than the clocks of one host
             * disagree (region-format.md) is damage: cool from now, so
             * that it pins the chunk one period, not for ever */
            atomic_compare_exchange_strong(owner, &t, COOL_TAG(now_ms));
        }
    }
    return n;
}
