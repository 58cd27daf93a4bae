/*
 * Job areas: a job (one MPI job, one benchmark) is a named slot in the job
 * table that owns an area of the heap. The first member creates it, others
 * join; it lives while any member's lease does.
 *
 * Creation is lock-free: a creator claims any free slot tagged with the key
 * hash, then looks for competing claims of the same hash. The lower slot
 * index wins; a creator that sees a higher competing claim waits for it to
 * either give way or publish (then joins it). Waits go only towards higher
 * indices, so they cannot form a cycle.
 *
 * A slot held in a passing state never depends on its holder living: a
 * creator is a member of the slot it claims before it claims it (C0), and
 * a collector records the slot in its registry slot's holding word before
 * taking it for release (H0). Both records die with the holder's lease, so
 * gc frees a claiming slot without live members and finishes the release
 * of a reclaiming slot without a live holder. Every release is a CAS on
 * the word, so two collectors finishing one release free it once.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define JOB_WAIT_MS 5000

struct ivshm_job {
    ivshm_region_t *r;
    uint32_t idx, gen;
    uint64_t area_off, area_size;
};

static uint32_t key_hash(const char *key)
{
    uint64_t h = ivshm__fnv1a(key, strlen(key), IVSHM_FNV_INIT);
    return (uint32_t)(h ^ (h >> 32));
}

/* Records membership in one of our registry slot's job words; false if
 * this process is already in IVSHM_JOBS_PER_PROC jobs. */
static bool set_membership(ivshm_region_t *r, uint32_t idx, uint32_t gen)
{
    struct ivshm_reg_slot *me = ivshm__reg(r, r->slot);
    for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++)
        if (atomic_load(&me->jobs[k]) == 0) {
            atomic_store(&me->jobs[k], MEMBER_WORD(idx, gen));
            return true;
        }
    return false;
}

static void clear_membership(ivshm_region_t *r, uint32_t idx, uint32_t gen)
{
    struct ivshm_reg_slot *me = ivshm__reg(r, r->slot);
    for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++)
        if (atomic_load(&me->jobs[k]) == MEMBER_WORD(idx, gen)) {
            atomic_store(&me->jobs[k], 0);
            return;
        }
}

bool ivshm__is_member(struct ivshm_reg_slot *p, uint32_t idx, uint32_t gen)
{
    for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++)
        if (atomic_load(&p->jobs[k]) == MEMBER_WORD(idx, gen))
            return true;
    return false;
}

/* Live processes (registry alive, or in doubt: reclaiming) that are
 * members of job (idx, gen) or, with holds, that hold it in reclaiming. A
 * reclaiming slot's fields are still its life's, and that life goes on
 * where the collector backs off (L1): its jobs stay until the slot is
 * released, as its chunks do. A claiming slot is not counted: it joins
 * nothing before it is alive, and its fields may still be the last life's
 * until the claim has written them (release_slot). */
static unsigned count_live(ivshm_region_t *r, uint32_t idx, uint32_t gen,
                           bool holds)
{
    unsigned n = 0;
    for (uint32_t k = 0; k < r->g.reg_slots; k++) {
        struct ivshm_reg_slot *p = ivshm__reg(r, k);
        uint64_t w = atomic_load(&p->word);
        if (SLOT_STATE(w) != SLOT_ALIVE && SLOT_STATE(w) != SLOT_RECLAIMING)
            continue;
        if (holds ? atomic_load(&p->holding) == MEMBER_WORD(idx, gen)
                  : ivshm__is_member(p, idx, gen))
            n++;
    }
    return n;
}

unsigned ivshm__job_members(ivshm_region_t *r, uint32_t idx, uint32_t gen)
{
    return count_live(r, idx, gen, false);
}

/* Frees job slot idx from word w, claiming or reclaiming, which we hold
 * or take over. The CAS commits; the area's chunks carry the old
 * generation, so they are freed (with cool: cooled) after it (none can be
 * taken meanwhile). */
static bool release_job(ivshm_region_t *r, uint32_t idx, uint64_t w,
                        bool cool, unsigned *chunks)
{
    struct ivshm_job_slot *s = ivshm__jobs(r, idx);
    uint32_t gen = JOB_GEN(w);
    if (!atomic_compare_exchange_strong(&s->word, &w,
                                        JOB_WORD(0, gen + 1, SLOT_FREE)))
        return false;
    uint64_t tag = OWNER_TAG(OWNER_JOB, idx, gen);
    *chunks += cool ? ivshm__cool_owned_by(r, tag)
                    : ivshm__free_owned_by(r, tag);
    return true;
}

/* Takes job slot i from w to mine (reclaiming), or with w == mine finishes
 * the release of a collector that is gone, under our hold; then releases
 * the job or, when a member joined meanwhile, hands it back. */
static bool reclaim_job(ivshm_region_t *r, uint32_t i, uint64_t w,
                        uint64_t mine, bool cool, unsigned *chunks)
{
    struct ivshm_job_slot *s = ivshm__jobs(r, i);
    uint32_t gen = JOB_GEN(w);
    /* no hold in a slot that may be a successor's (a lost lease) */
    _Atomic uint64_t *hold = r->attached && ivshm__lease_held(r) == IVSHM_OK
                                 ? &ivshm__reg(r, r->slot)->holding
                                 : NULL;
    /* H0: hold, then take (seq_cst both); pairs with the count of holds
     * in gc, so that a collector killed after the take is normally known
     * by its hold, which dies with its lease. The word is one per process:
     * two threads collecting at once, a collector that is not attached
     * (it leaves none), or a stalled one whose slot went to another process
     * can make a hold wrong or missing. None of these frees a job twice,
     * because every release is a CAS on the job word: at worst a release
     * waits for the next gc, or two collectors finish one alongside. */
    if (hold)
        atomic_store(hold, MEMBER_WORD(i, gen));
    bool taken = w == mine ? atomic_load(&s->word) == w
                           : atomic_compare_exchange_strong(&s->word, &w, mine);
    bool freed = false;
    if (taken) {
        IVSHM_TEST_STEP("job-reclaim");
        /* J1: recount after the take; pairs with J0 in join. */
        if (count_live(r, i, gen, false) != 0)
            atomic_compare_exchange_strong(
                &s->word, &mine, JOB_WORD(JOB_HASH(mine), gen, SLOT_ALIVE));
        else
            freed = release_job(r, i, mine, cool, chunks);
    }
    if (hold)
        atomic_store(hold, 0);
    return freed;
}

unsigned ivshm__job_gc(ivshm_region_t *r, bool cool, unsigned *chunks)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < r->g.job_slots; i++) {
        uint64_t w = atomic_load(&ivshm__jobs(r, i)->word);
        uint32_t gen = JOB_GEN(w);
        switch (JOB_STATE(w)) {
        case SLOT_CLAIMING:
            /* its creator joined before claiming (C0): no live member
             * means no creator; it never publishes (its CAS fails) */
            if (count_live(r, i, gen, false) == 0)
                n += release_job(r, i, w, cool, chunks);
            break;
        case SLOT_ALIVE:
            if (count_live(r, i, gen, false) == 0)
                n += reclaim_job(
                    r, i, w, JOB_WORD(JOB_HASH(w), gen, SLOT_RECLAIMING),
                    cool, chunks);
            break;
        case SLOT_RECLAIMING:
            if (count_live(r, i, gen, true) == 0)
                n += reclaim_job(r, i, w, w, cool, chunks);
            break;
        default:
            break;
        }
    }
    return n;
}

/* Validates a published job slot before anyone uses its area. */
ivshm_status_t ivshm__job_area(ivshm_region_t *r, uint32_t i, uint32_t gen,
                               uint64_t *off, uint64_t *size)
{
    struct ivshm_job_slot *s = ivshm__jobs(r, i);
    uint64_t o = atomic_load(&s->area_off);
    uint64_t sz = __atomic_load_n(&s->area_size, __ATOMIC_RELAXED); /* once */
    if (!ivshm__in_heap(&r->g, o, sz) || sz == 0 ||
        (o - r->g.heap_off) & ((1ull << r->g.chunk_shift) - 1))
        return ivshm__fail(IVSHM_ERR_CORRUPT,
                           "job slot %u: area [%llu, +%llu) is outside the "
                           "heap",
                           i, (unsigned long long)o, (unsigned long long)sz);
    if (!ivshm__range_owned(r, o, sz, OWNER_TAG(OWNER_JOB, i, gen)))
        return ivshm__fail(IVSHM_ERR_CORRUPT,
                           "job slot %u: its area is not owned by the job", i);
    *off = o;
    *size = sz;
    return IVSHM_OK;
}

static bool key_equals(struct ivshm_job_slot *s, const char *key)
{
    char local[IVSHM_JOB_KEY_MAX + 1];
    memcpy(local, s->key, sizeof(local));
    local[IVSHM_JOB_KEY_MAX] = '\0';
    return strcmp(local, key) == 0;
}

/* Waits until slot j leaves CLAIMING (bounded); false on timeout. */
static bool wait_claim(ivshm_region_t *r, uint32_t j, uint64_t w)
{
    struct ivshm_job_slot *s = ivshm__jobs(r, j);
    uint64_t deadline = ivshm__mono_ns() + ivshm__ms_to_ns(JOB_WAIT_MS);
    unsigned spins = 0;
    while (atomic_load(&s->word) == w) {
        if (ivshm__mono_ns() > deadline)
            return false;
        /* a creator gone before it published (C0): its claim is freed;
         * the scan of every registry slot once every 64 waits, at most
         * 3.2 ms apart once the wait sleeps */
        if ((spins & 63) == 0 && count_live(r, j, JOB_GEN(w), false) == 0) {
            unsigned chunks = 0;
            ivshm__job_gc(r, false, &chunks);
        }
        ivshm__backoff(&spins);
    }
    return true;
}

/* A creator's retreat: free its claim, then leave it (C0 in reverse). */
static void give_up_claim(ivshm_region_t *r, uint32_t mine, uint64_t w)
{
    unsigned chunks = 0;
    release_job(r, mine, w, false, &chunks);
    clear_membership(r, mine, JOB_GEN(w));
}

enum scan_result { SCAN_NONE, SCAN_JOINED, SCAN_RETRY, SCAN_BUSY, SCAN_FULL };

/* Looks for a published job with our key (join it) or a pending claim of
 * our hash. With mine >= 0, decides the race for our own claim at mine. */
static enum scan_result scan(ivshm_region_t *r, const char *key, uint32_t h,
                             int mine, ivshm_job_t *j)
{
    for (uint32_t i = 0; i < r->g.job_slots; i++) {
        if ((int)i == mine)
            continue;
        struct ivshm_job_slot *s = ivshm__jobs(r, i);
        uint64_t w = atomic_load(&s->word);
        if (JOB_HASH(w) != h)
            continue;
        if (JOB_STATE(w) == SLOT_ALIVE && key_equals(s, key)) {
            if (mine >= 0)
                return SCAN_RETRY; /* give way, join it on the next pass */
            /* J0: announce membership, then confirm the job still stands
             * (seq_cst both); pairs with J1 in job gc. */
            if (!set_membership(r, i, JOB_GEN(w)))
                return SCAN_FULL;
            if (atomic_load(&s->word) != w) {
                clear_membership(r, i, JOB_GEN(w));
                return SCAN_RETRY;
            }
            if (ivshm__job_area(r, i, JOB_GEN(w), &j->area_off, &j->area_size) !=
                IVSHM_OK) {
                clear_membership(r, i, JOB_GEN(w));
                return SCAN_BUSY;
            }
            j->idx = i;
            j->gen = JOB_GEN(w);
            return SCAN_JOINED;
        }
        if (JOB_STATE(w) == SLOT_CLAIMING) {
            if (mine >= 0 && (int)i < mine)
                return SCAN_RETRY;
            if (!wait_claim(r, i, w))
                return SCAN_BUSY;
            return mine >= 0 ? scan(r, key, h, mine, j) : SCAN_RETRY;
        }
    }
    return SCAN_NONE;
}

ivshm_status_t ivshm_job_join(ivshm_region_t *r, const char *key,
                              uint64_t area_size, ivshm_job_t **out)
{
    *out = NULL;
    ivshm_status_t st = ivshm__require_attached(r);
    if (st == IVSHM_OK) /* a lost lease's slot may be a successor's */
        st = ivshm__lease_held(r);
    if (st != IVSHM_OK)
        return st;
    size_t klen = key ? strlen(key) : 0;
    if (klen == 0 || klen > IVSHM_JOB_KEY_MAX)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "job key must have 1 to %d characters",
                           IVSHM_JOB_KEY_MAX);
    ivshm_job_t *j = calloc(1, sizeof(*j));
    if (!j)
        return ivshm__fail(IVSHM_ERR_SYS, "out of memory");
    j->r = r;
    uint32_t h = key_hash(key);
    for (int attempt = 0; attempt < 1000; attempt++) {
        enum scan_result sr = scan(r, key, h, -1, j);
        if (sr == SCAN_JOINED)
            goto done;
        if (sr == SCAN_BUSY)
            break;
        if (sr == SCAN_FULL)
            goto too_many;
        if (sr == SCAN_RETRY)
            continue;
        /* no such job: claim a free slot */
        int mine = -1;
        uint64_t w = 0;
        for (uint32_t i = 0; i < r->g.job_slots && mine < 0; i++) {
            struct ivshm_job_slot *s = ivshm__jobs(r, i);
            w = atomic_load(&s->word);
            if (JOB_STATE(w) != SLOT_FREE)
                continue;
            uint32_t gen = JOB_GEN(w);
            uint64_t claim = JOB_WORD(h, gen, SLOT_CLAIMING);
            /* C0: member first, then claim (seq_cst both), so that a
             * creator killed at any later step leaves a claim that gc
             * frees once this lease is gone. */
            if (!set_membership(r, i, gen))
                goto too_many;
            if (!atomic_compare_exchange_strong(&s->word, &w, claim)) {
                clear_membership(r, i, gen);
                continue;
            }
            IVSHM_TEST_STEP("job-claim");
            atomic_store(&s->creator, OWNER_TAG(OWNER_PROC, r->slot, r->gen));
            atomic_store(&s->area_off, 0);
            memset(s->key, 0, sizeof(s->key));
            w = claim;
            mine = (int)i;
        }
        if (mine < 0) {
            unsigned chunks = 0;
            if (ivshm__job_gc(r, false, &chunks) > 0)
                continue;
            free(j);
            return ivshm__fail(IVSHM_ERR_NOSPACE,
                               "all %u job slots are in use; run 'ivshm gc' "
                               "or reformat with more --jobs",
                               r->g.job_slots);
        }
        sr = scan(r, key, h, mine, j);
        if (sr != SCAN_NONE) {
            give_up_claim(r, (uint32_t)mine, w);
            if (sr == SCAN_BUSY)
                break;
            continue;
        }
        struct ivshm_job_slot *s = ivshm__jobs(r, (uint32_t)mine);
        uint32_t gen = JOB_GEN(w);
        uint64_t off;
        st = ivshm__alloc_owned(r, OWNER_TAG(OWNER_JOB, mine, gen), area_size,
                                &off);
        if (st != IVSHM_OK) {
            give_up_claim(r, (uint32_t)mine, w);
            free(j);
            return st;
        }
        /* the area comes zeroed from the allocator (S0) */
        memcpy(s->key, key, klen);
        s->area_size = area_size;
        atomic_store(&s->area_off, off);
        /* J2: publish; joiners acquire the word and then read the slot.
         * By CAS: gc frees a claim whose creator lost its lease (C0). */
        if (!atomic_compare_exchange_strong_explicit(
                &s->word, &w, JOB_WORD(h, gen, SLOT_ALIVE),
                memory_order_release, memory_order_relaxed)) {
            clear_membership(r, (uint32_t)mine, gen);
            continue;
        }
        j->idx = (uint32_t)mine;
        j->gen = gen;
        j->area_off = off;
        j->area_size = area_size;
        goto done;
    }
    free(j);
    return ivshm__fail(IVSHM_ERR_BUSY,
                       "job '%s' could not be created or joined: another "
                       "creator holds it or its slot is damaged",
                       key);
too_many:
    free(j);
    return ivshm__fail(IVSHM_ERR_NOSPACE,
                       "this process is already in %d jobs of the region",
                       IVSHM_JOBS_PER_PROC);
done:
    *out = j;
    return IVSHM_OK;
}

void ivshm_job_leave(ivshm_job_t *j)
{
    if (!j)
        return;
    ivshm_region_t *r = j->r;
    /* a lost lease: the slot may be a successor's, with our very member
     * word if it joined the same job; it is not ours to write (our
     * membership counts no more once the slot is released: job gc counts
     * alive and reclaiming slots only), and we collect nothing */
    if (r->attached && ivshm__lease_held(r) == IVSHM_OK) {
        clear_membership(r, j->idx, j->gen);
        unsigned chunks = 0;
        ivshm__job_gc(r, false, &chunks);
    }
    free(j);
}

uint64_t ivshm_job_area_off(const ivshm_job_t *j) { return j->area_off; }
uint64_t ivshm_job_area_size(const ivshm_job_t *j) { return j->area_size; }
uint32_t ivshm_job_index(const ivshm_job_t *j) { return j->idx; }
uint32_t ivshm__job_gen(const ivshm_job_t *j) { return j->gen; }
