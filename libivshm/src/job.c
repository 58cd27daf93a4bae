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

static unsigned count_members(ivshm_region_t *r, uint32_t idx, uint32_t gen)
{
    unsigned n = 0;
    for (uint32_t k = 0; k < r->g.reg_slots; k++) {
        struct ivshm_reg_slot *p = ivshm__reg(r, k);
        uint64_t w = atomic_load(&p->word);
        if ((SLOT_STATE(w) == SLOT_ALIVE || SLOT_STATE(w) == SLOT_CLAIMING) &&
            ivshm__is_member(p, idx, gen))
            n++;
    }
    return n;
}

/* Frees a job slot we hold in RECLAIMING (or CLAIMING, as its creator). */
static unsigned release_job(ivshm_region_t *r, uint32_t idx, uint64_t w)
{
    struct ivshm_job_slot *s = ivshm__jobs(r, idx);
    unsigned n =
        ivshm__free_owned_by(r, OWNER_TAG(OWNER_JOB, idx, JOB_GEN(w)));
    atomic_store(&s->area_off, 0);
    atomic_store(&s->creator, 0);
    memset(s->key, 0, sizeof(s->key));
    atomic_store_explicit(&s->word, JOB_WORD(0, JOB_GEN(w) + 1, SLOT_FREE),
                          memory_order_release);
    return n;
}

unsigned ivshm__job_gc(ivshm_region_t *r, unsigned *chunks)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < r->g.job_slots; i++) {
        struct ivshm_job_slot *s = ivshm__jobs(r, i);
        uint64_t w = atomic_load(&s->word);
        unsigned st = JOB_STATE(w);
        if (st == SLOT_CLAIMING) {
            uint64_t c = atomic_load(&s->creator);
            if (c == 0 || ivshm__proc_live(r, OWNER_IDX(c), OWNER_GEN(c)))
                continue;
        } else if (st != SLOT_ALIVE || count_members(r, i, JOB_GEN(w)) != 0) {
            continue;
        }
        uint64_t mine = JOB_WORD(JOB_HASH(w), JOB_GEN(w), SLOT_RECLAIMING);
        if (!atomic_compare_exchange_strong(&s->word, &w, mine))
            continue;
        /* J1: recount after the claim; pairs with J0 in join. */
        if (st == SLOT_ALIVE && count_members(r, i, JOB_GEN(w)) != 0) {
            atomic_compare_exchange_strong(&s->word, &mine, w);
            continue;
        }
        *chunks += release_job(r, i, w);
        n++;
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
        uint64_t c = atomic_load(&s->creator);
        if (c && !ivshm__proc_live(r, OWNER_IDX(c), OWNER_GEN(c))) {
            unsigned chunks = 0;
            ivshm__job_gc(r, &chunks);
        }
        ivshm__backoff(&spins);
    }
    return true;
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
            uint64_t claim = JOB_WORD(h, JOB_GEN(w), SLOT_CLAIMING);
            if (atomic_compare_exchange_strong(&s->word, &w, claim)) {
                atomic_store(&s->creator,
                             OWNER_TAG(OWNER_PROC, r->slot, r->gen));
                w = claim;
                mine = (int)i;
            }
        }
        if (mine < 0) {
            unsigned chunks = 0;
            if (ivshm__job_gc(r, &chunks) > 0)
                continue;
            free(j);
            return ivshm__fail(IVSHM_ERR_NOSPACE,
                               "all %u job slots are in use; run 'ivshm gc' "
                               "or reformat with more --jobs",
                               r->g.job_slots);
        }
        sr = scan(r, key, h, mine, j);
        if (sr != SCAN_NONE) {
            release_job(r, (uint32_t)mine, w);
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
            release_job(r, (uint32_t)mine, w);
            free(j);
            return st;
        }
        if (!set_membership(r, (uint32_t)mine, gen)) {
            ivshm__free_owned_by(r, OWNER_TAG(OWNER_JOB, mine, gen));
            release_job(r, (uint32_t)mine, w);
            goto too_many;
        }
        memset((char *)r->base + off, 0, area_size);
        memset(s->key, 0, sizeof(s->key));
        memcpy(s->key, key, klen);
        s->area_size = area_size;
        atomic_store(&s->area_off, off);
        /* J2: publish; joiners acquire the word and then read the slot. */
        atomic_store_explicit(&s->word, JOB_WORD(h, gen, SLOT_ALIVE),
                              memory_order_release);
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
    if (r->attached) {
        clear_membership(r, j->idx, j->gen);
        unsigned chunks = 0;
        ivshm__job_gc(r, &chunks);
    }
    free(j);
}

uint64_t ivshm_job_area_off(const ivshm_job_t *j) { return j->area_off; }
uint64_t ivshm_job_area_size(const ivshm_job_t *j) { return j->area_size; }
uint32_t ivshm_job_index(const ivshm_job_t *j) { return j->idx; }
uint32_t ivshm__job_gen(const ivshm_job_t *j) { return j->gen; }
