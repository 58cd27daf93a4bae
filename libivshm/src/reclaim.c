/*
 * Reclaim: the one place that gives back what dead owners held, above the
 * registry, the allocator and the job table (it calls all three; none of
 * them calls it). Attach collects once when the registry is full; detach
 * releases our own slot; gc takes the slots of dead or expired leases
 * (a process of this VM is dead when its pid is gone or reused, one of
 * another VM when its heartbeat is older than the region's lease timeout),
 * jobs without live members and chunks whose owner is gone. Every take is
 * a CAS on (generation, state), so a slow owner is never raced.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

ivshm_status_t ivshm_attach(ivshm_region_t *r)
{
    if (r->attached)
        return IVSHM_OK;
    if (!r->valid || r->rdonly)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "cannot attach to an invalid or read-only region");
    if (ivshm__try_claim(r) == IVSHM_OK)
        return IVSHM_OK;
    ivshm_gc(r, NULL);
    if (ivshm__try_claim(r) == IVSHM_OK)
        return IVSHM_OK;
    return ivshm__fail(IVSHM_ERR_REGISTRY_FULL,
                       "all %u registry slots of %s hold live leases; end "
                       "idle processes, run 'ivshm gc', or reformat with "
                       "more --procs",
                       r->g.reg_slots, r->uri);
}

/* Frees what the slot owns and releases it with a new generation. Caller
 * holds the slot in RECLAIMING (or is its owner in ALIVE). */
static unsigned release_slot(ivshm_region_t *r, uint32_t i, uint32_t gen)
{
    struct ivshm_reg_slot *s = ivshm__reg(r, i);
    unsigned freed = ivshm__free_owned_by(r, OWNER_TAG(OWNER_PROC, i, gen));
    for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++)
        atomic_store(&s->jobs[k], 0);
    atomic_store(&s->holding, 0);
    s->pid = 0;
    s->vm_id = 0;
    s->start_time = 0;
    atomic_store(&s->heartbeat_ns, 0);
    /* R2: free with a new generation; stale CASes by the old owner fail. */
    atomic_store_explicit(&s->word, SLOT_WORD(gen + 1, SLOT_FREE),
                          memory_order_release);
    return freed;
}

ivshm_status_t ivshm_detach(ivshm_region_t *r)
{
    if (!r->attached)
        return IVSHM_OK;
    if (r->hb_running) {
        atomic_store(&r->hb_stop, true);
        pthread_join(r->hb_thread, NULL);
        r->hb_running = false;
    }
    struct ivshm_reg_slot *s = ivshm__reg(r, r->slot);
    uint64_t w = SLOT_WORD(r->gen, SLOT_ALIVE);
    r->attached = false;
    if (!atomic_compare_exchange_strong(&s->word, &w,
                                        SLOT_WORD(r->gen, SLOT_RECLAIMING)))
        return ivshm__fail(IVSHM_ERR_LEASE_LOST,
                           "registry slot %u was reclaimed before detach",
                           r->slot);
    release_slot(r, r->slot, r->gen);
    unsigned chunks = 0;
    ivshm__job_gc(r, &chunks); /* our job may have lost its last member */
    return IVSHM_OK;
}

static bool owner_live(ivshm_region_t *r, uint64_t tag, bool *valid)
{
    unsigned kind = OWNER_KIND(tag);
    uint32_t idx = OWNER_IDX(tag);
    *valid = true;
    if (kind == OWNER_PROC && idx < r->g.reg_slots)
        return ivshm__proc_live(r, idx, OWNER_GEN(tag));
    if (kind == OWNER_JOB && idx < r->g.job_slots) {
        /* a job in reclaiming may still be handed back (J1): its
         * collector frees the area after releasing the slot */
        uint64_t w = atomic_load(&ivshm__jobs(r, idx)->word);
        return JOB_GEN(w) == OWNER_GEN(tag) && JOB_STATE(w) != SLOT_FREE;
    }
    *valid = false;
    return true; /* a malformed tag is left for `ivshm check` to report */
}

/* Frees chunks whose owner's lease is gone: allocations that raced with
 * their owner's reclaim, or whose owner died between claim and publish. */
static unsigned sweep_orphans(ivshm_region_t *r)
{
    unsigned n = 0;
    for (uint32_t c = 0; c < r->g.chunk_count; c++) {
        struct ivshm_chunk *k = ivshm__chunk(r, c);
        uint64_t t = atomic_load(&k->owner);
        bool valid;
        if (t == 0 || owner_live(r, t, &valid) || !valid)
            continue;
        atomic_store(&k->run, 0);
        if (atomic_compare_exchange_strong(&k->owner, &t, 0))
            n++;
    }
    return n;
}

/* Decides whether a slot may be reclaimed; see file comment. The identity
 * fields (vm_id, pid, start_time) are only complete once ALIVE is
 * published, so a CLAIMING slot expires by timeout alone. *by_pid says the
 * decision rests on this VM's pid table (no heartbeat re-check needed). */
static bool lease_dead(ivshm_region_t *r, struct ivshm_reg_slot *s,
                       unsigned state, uint64_t now, uint64_t timeout_ns,
                       bool *by_pid)
{
    *by_pid = false;
    uint64_t hb = atomic_load_explicit(&s->heartbeat_ns, memory_order_acquire);
    if (hb == 0) {
        /* Claimed but not yet stamped: start the clock now so that a
         * claimer that died here expires one timeout later. */
        uint64_t zero = 0;
        atomic_compare_exchange_strong(&s->heartbeat_ns, &zero, now);
        return false;
    }
    /* read once: another VM may rewrite them while we decide */
    uint64_t vm = __atomic_load_n(&s->vm_id, __ATOMIC_RELAXED);
    uint64_t start = __atomic_load_n(&s->start_time, __ATOMIC_RELAXED);
    uint32_t pid = __atomic_load_n(&s->pid, __ATOMIC_RELAXED);
    if (state == SLOT_ALIVE && vm == r->vm_id && pid != 0 && pid <= INT32_MAX) {
        *by_pid = true;
        return ivshm__pid_dead(pid, start);
    }
    return now > hb && now - hb > timeout_ns;
}

static unsigned reclaim_procs(ivshm_region_t *r, unsigned *chunks)
{
    unsigned n = 0;
    uint64_t timeout_ns = ivshm__ms_to_ns(r->g.lease_timeout_ms);
    for (uint32_t i = 0; i < r->g.reg_slots; i++) {
        struct ivshm_reg_slot *s = ivshm__reg(r, i);
        uint64_t w = atomic_load(&s->word);
        unsigned st = SLOT_STATE(w);
        uint32_t gen = SLOT_GEN(w);
        uint64_t now = ivshm__now_ns();
        if (r->attached && i == r->slot)
            continue;
        if (st == SLOT_RECLAIMING) {
            /* a reclaimer that died mid-way: finish after two timeouts */
            uint64_t hb = atomic_load(&s->heartbeat_ns);
            if (hb && now > hb && now - hb > 2 * timeout_ns &&
                atomic_compare_exchange_strong(
                    &s->word, &w, SLOT_WORD(gen + 1, SLOT_RECLAIMING))) {
                *chunks += release_slot(r, i, gen);
                n++;
            }
            continue;
        }
        if (st != SLOT_ALIVE && st != SLOT_CLAIMING)
            continue;
        bool by_pid;
        if (!lease_dead(r, s, st, now, timeout_ns, &by_pid))
            continue;
        if (!atomic_compare_exchange_strong(&s->word, &w,
                                            SLOT_WORD(gen, SLOT_RECLAIMING)))
            continue;
        /* L1: re-read the heartbeat after our claim; see L0. */
        uint64_t hb = atomic_load(&s->heartbeat_ns);
        now = ivshm__now_ns();
        if (!by_pid && hb > now - timeout_ns) {
            uint64_t mine = SLOT_WORD(gen, SLOT_RECLAIMING);
            atomic_compare_exchange_strong(&s->word, &mine, w);
            continue;
        }
        *chunks += release_slot(r, i, gen);
        atomic_fetch_add(&ivshm__hdr(r)->reclaims, 1);
        n++;
    }
    return n;
}

ivshm_status_t ivshm_gc(ivshm_region_t *r, ivshm_gc_stats_t *stats)
{
    if (!r->valid || r->rdonly)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "cannot collect on an invalid or read-only region");
    ivshm_gc_stats_t local = {0};
    local.procs_reclaimed = reclaim_procs(r, &local.chunks_freed);
    local.jobs_reclaimed = ivshm__job_gc(r, &local.chunks_freed);
    local.chunks_freed += sweep_orphans(r);
    if (stats)
        *stats = local;
    return IVSHM_OK;
}
