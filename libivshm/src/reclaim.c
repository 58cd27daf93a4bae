/*
 * Reclaim: the one place that gives back what dead owners held, above the
 * registry, the allocator and the job table (it calls all three; none of
 * them calls it). Attach collects once when the registry is full; detach
 * releases our own slot; gc takes the slots of leases whose owner is
 * proven dead (registry.c's verdict: a process of this VM whose pid is
 * gone or reused), jobs without live members and chunks whose owner is
 * gone. A lease of another VM whose heartbeat expired, or a claim that
 * expired, is in doubt, not dead (its VM may be paused): it is
 * kept, with its chunks and job memberships, until an admin forces
 * (ivshm_gc_force). Every take is a CAS on (generation, state), so a slow
 * owner is never raced, and a reclaimed process' chunks cool for one
 * lease timeout before they are handed out (docs/lifetimes.md).
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
    char doubts[256] = "";
    if (ivshm__describe_doubts(r, false, doubts, sizeof(doubts)) > 0)
        return ivshm__fail(IVSHM_ERR_REGISTRY_FULL,
                           "all %u registry slots of %s hold leases; these "
                           "are in doubt (heartbeat older than the lease "
                           "timeout, owner in another VM or not done "
                           "attaching, maybe paused):%s; "
                           "if their VMs are gone, run 'ivshm gc --force'",
                           r->g.reg_slots, r->uri, doubts);
    return ivshm__fail(IVSHM_ERR_REGISTRY_FULL,
                       "all %u registry slots of %s hold live leases; end "
                       "idle processes, run 'ivshm gc', or reformat with "
                       "more --procs",
                       r->g.reg_slots, r->uri);
}

/* Stamps the heartbeat of a slot we took (its word: mine) with the time
 * of the take, so that another collector finishes our release only after
 * we stalled for two timeouts, not at once where the owner's last
 * heartbeat is old. By CAS, and only while the word is still ours: a late
 * stamp must not land in the next owner's slot. */
static void stamp_take(struct ivshm_reg_slot *s, uint64_t mine)
{
    uint64_t hb = atomic_load(&s->heartbeat_ns);
    uint64_t now = ivshm__now_ns();
    while (atomic_load(&s->word) == mine &&
           !atomic_compare_exchange_strong(&s->heartbeat_ns, &hb, now))
        ;
}

/* Frees what the slot's life gen owns and releases the slot with a new
 * generation. The caller holds the slot in RECLAIMING: its word is held
 * (the life's own word, or the next generation's where the release of a
 * collector that died is finished). A reclaimer (cool) moves the chunks
 * to cooling: peers may be in the middle of a copy into them that checked
 * the owner's life just before it began; the owner's own detach frees
 * them at once.
 *
 * Another collector finishes the release of a slot that reads RECLAIMING
 * two lease timeouts after its heartbeat, which every take stamps
 * (stamp_take): a collector stalled that long (a paused VM) may find the
 * slot finished, freed and claimed again while it was still releasing it,
 * and must not touch the new owner. Nothing here writes the slot's fields:
 * the claim writes every one of them before the slot reads alive
 * (ivshm__try_claim), and readers take a claiming slot's as unknown
 * (ivshm_region_proc). The heartbeat is zeroed, so that no other
 * collector finishes the release from here on, by a CAS from the value
 * read while the word was still held, so a stamp by whoever took the slot
 * since (a finisher's take, a new owner) is never overwritten; then the
 * word is freed by a CAS from held. A collector that finds its word gone
 * stops (its chunk releases are CASes on the old life's tag, which match
 * nothing by then). A releaser that stops between the two CASes leaves a
 * reclaiming slot with no heartbeat: gc starts its clock, as for a claim,
 * and finishes it two timeouts later; where the releaser was only slow,
 * that clock stays in the free slot, and the next claim restarts it
 * (ivshm__try_claim). */
static unsigned release_slot(ivshm_region_t *r, uint32_t i, uint32_t gen,
                             uint64_t held, bool cool)
{
    struct ivshm_reg_slot *s = ivshm__reg(r, i);
    uint64_t tag = OWNER_TAG(OWNER_PROC, i, gen);
    /* every release counts (K0), before anything is freed or cooled: a
     * detach's, a collector's, and one that finishes the release of a
     * collector that died. While a slot only reads "reclaiming", its
     * memory is still its owner's, and sends to it may go on */
    ivshm__life_ended(r);
    unsigned freed = cool ? ivshm__cool_owned_by(r, tag)
                          : ivshm__free_owned_by(r, tag);
    IVSHM_TEST_STEP("slot-release");
    uint64_t hb = atomic_load(&s->heartbeat_ns);
    do {
        if (atomic_load(&s->word) != held)
            return freed; /* finished for us: not ours to touch */
        IVSHM_TEST_STEP("slot-held");
    } while (!atomic_compare_exchange_strong(&s->heartbeat_ns, &hb, 0));
    IVSHM_TEST_STEP("slot-free");
    /* R2: free with a new generation; stale CASes by the old owner fail. */
    atomic_compare_exchange_strong_explicit(&s->word, &held,
                                            SLOT_WORD(gen + 1, SLOT_FREE),
                                            memory_order_release,
                                            memory_order_relaxed);
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
    const uint64_t held = SLOT_WORD(r->gen, SLOT_RECLAIMING);
    r->attached = false;
    /* A collector judging us (its claim, then its back-off once it sees
     * our fresh heartbeat: L1) holds the word for a moment: waited for,
     * as the connect waits for a peer in doubt, then taken back */
    uint64_t deadline = 0;
    unsigned spins = 0;
    for (;;) {
        uint64_t w = SLOT_WORD(r->gen, SLOT_ALIVE);
        if (atomic_compare_exchange_strong(&s->word, &w, held))
            break;
        if (w != held)
            return ivshm__fail(IVSHM_ERR_LEASE_LOST,
                               "registry slot %u was reclaimed before detach",
                               r->slot);
        if (!ivshm__doubt_wait(r, r->slot, r->gen, &deadline, &spins))
            return ivshm__fail(IVSHM_ERR_LEASE_LOST,
                               "registry slot %u was still being judged by a "
                               "collector a second into the detach: its "
                               "memory is left to that collector",
                               r->slot);
    }
    stamp_take(s, held);
    release_slot(r, r->slot, r->gen, held, false);
    unsigned chunks = 0;
    ivshm__job_gc(r, false, &chunks); /* our job may have lost its last member */
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
    if (kind == OWNER_COOL)
        return true; /* ivshm__sweep_cooled's */
    *valid = false;
    return true; /* a malformed tag is left for `ivshm check` to report */
}

/* Releases chunks whose owner's lease is gone: allocations that raced
 * with their owner's reclaim, or whose owner died between claim and
 * publish. A process' chunks cool, as its reclaimer's would. */
static unsigned sweep_orphans(ivshm_region_t *r)
{
    unsigned n = 0;
    uint64_t cool = COOL_TAG(ivshm__now_ns() / 1000000u);
    for (uint32_t c = 0; c < r->g.chunk_count; c++) {
        struct ivshm_chunk *k = ivshm__chunk(r, c);
        uint64_t t = atomic_load(&k->owner);
        bool valid;
        if (t == 0 || owner_live(r, t, &valid) || !valid)
            continue;
        n += ivshm__release_chunk(k, t, OWNER_KIND(t) == OWNER_PROC ? cool : 0);
    }
    return n;
}

/* Takes the slots of leases proven dead and, with force (the admin's
 * proof), of leases in doubt, describing each of those to released. */
static unsigned reclaim_procs(ivshm_region_t *r, bool force,
                              ivshm_gc_release_fn released, void *arg,
                              ivshm_gc_stats_t *stats)
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
            /* a reclaimer that died mid-way (it had its proof of death
             * when it took the slot): finish two timeouts after its take
             * (stamp_take). A heartbeat of 0: a releaser between its two
             * last CASes (release_slot), or one that died there: start
             * the clock, as for a claim */
            uint64_t hb = atomic_load(&s->heartbeat_ns);
            if (!hb) {
                atomic_compare_exchange_strong(&s->heartbeat_ns, &hb, now);
                continue;
            }
            if (now <= hb || now - hb <= 2 * timeout_ns)
                continue;
            /* counted before the generation moves on, which makes the
             * old life read gone to others (K0): release_slot counts too
             * late if we die between the two */
            ivshm__life_ended(r);
            uint64_t mine = SLOT_WORD(gen + 1, SLOT_RECLAIMING);
            if (atomic_compare_exchange_strong(&s->word, &w, mine)) {
                stamp_take(s, mine);
                stats->chunks_freed += release_slot(r, i, gen, mine, true);
                n++;
            }
            continue;
        }
        if (st != SLOT_ALIVE && st != SLOT_CLAIMING)
            continue;
        if (atomic_load(&s->heartbeat_ns) == 0) {
            /* Claimed but not yet stamped (between a claim's R0 and its
             * stamp; a region of an older library): start the clock now
             * so that a claimer that died here expires one timeout later. */
            uint64_t zero = 0;
            atomic_compare_exchange_strong(&s->heartbeat_ns, &zero, now);
            continue;
        }
        bool by_pid;
        enum ivshm_verdict v = ivshm__lease_verdict(r, s, w, now, &by_pid);
        if (v == VERDICT_LIVE)
            continue;
        if (v == VERDICT_DOUBT && !force) {
            stats->procs_in_doubt++; /* D0: a paused VM is alive */
            continue;
        }
        if (!atomic_compare_exchange_strong(&s->word, &w,
                                            SLOT_WORD(gen, SLOT_RECLAIMING)))
            continue;
        /* L1: re-read the heartbeat after our claim; see L0. An owner in
         * doubt that answers now is alive after all, forced or not. */
        uint64_t hb = atomic_load(&s->heartbeat_ns);
        now = ivshm__now_ns();
        if (!by_pid && hb > now - timeout_ns) {
            uint64_t mine = SLOT_WORD(gen, SLOT_RECLAIMING);
            atomic_compare_exchange_strong(&s->word, &mine, w);
            continue;
        }
        stamp_take(s, SLOT_WORD(gen, SLOT_RECLAIMING));
        if (v == VERDICT_DOUBT && released) {
            ivshm_proc_info_t p;
            if (ivshm_region_proc(r, i, &p) == IVSHM_OK) {
                if (st == SLOT_CLAIMING)
                    ivshm__proc_info_unknown(&p); /* as ivshm_region_proc */
                /* the owner's heartbeat, as L1 read it, not our stamp */
                p.heartbeat_age_ms = hb ? (int64_t)(now - hb) / 1000000 : -1;
                released(arg, &p);
            }
        }
        stats->chunks_freed +=
            release_slot(r, i, gen, SLOT_WORD(gen, SLOT_RECLAIMING), true);
        atomic_fetch_add(&ivshm__hdr(r)->reclaims, 1);
        n++;
    }
    return n;
}

static ivshm_status_t collect(ivshm_region_t *r, bool force,
                              ivshm_gc_release_fn released, void *arg,
                              ivshm_gc_stats_t *stats)
{
    if (!r->valid || r->rdonly)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "cannot collect on an invalid or read-only region");
    ivshm_gc_stats_t local = {0};
    local.procs_reclaimed = reclaim_procs(r, force, released, arg, &local);
    /* the jobs that a forced release left without members: a member that
     * was only paused may resume and copy into the area (lifetimes.md) */
    local.jobs_reclaimed =
        ivshm__job_gc(r, force && local.procs_reclaimed > 0,
                      &local.chunks_freed);
    local.chunks_freed += sweep_orphans(r);
    ivshm__sweep_cooled(r);
    if (stats)
        *stats = local;
    return IVSHM_OK;
}

ivshm_status_t ivshm_gc(ivshm_region_t *r, ivshm_gc_stats_t *stats)
{
    return collect(r, false, NULL, NULL, stats);
}

ivshm_status_t ivshm_gc_force(ivshm_region_t *r, ivshm_gc_release_fn released,
                              void *arg, ivshm_gc_stats_t *stats)
{
    return collect(r, true, released, arg, stats);
}
