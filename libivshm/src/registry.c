/*
 * The registry: one slot per attached process, each a lease made of a
 * generation-tagged state word and a heartbeat: claiming a slot, renewing
 * and checking one's own lease, the state of another's, identity and
 * co-residency. Taking slots of dead processes back is reclaim.c's (it
 * calls in here, never the other way), so a slow owner learns on its next
 * renew that it lost the lease instead of corrupting a successor.
 */
#include "internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

ivshm_status_t ivshm__require_attached(const ivshm_region_t *r)
{
    if (!r->valid)
        return ivshm__fail(IVSHM_ERR_CORRUPT, "region header is not valid");
    if (!r->attached)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "process is not attached (call ivshm_attach)");
    return IVSHM_OK;
}

enum ivshm_proc_state ivshm__proc_state_slow(ivshm_region_t *r, uint32_t idx,
                                             uint32_t gen)
{
    if (idx >= r->g.reg_slots)
        return PROC_GONE;
    uint64_t w = atomic_load(&ivshm__reg(r, idx)->word);
    if (SLOT_GEN(w) != gen)
        return PROC_GONE; /* released: the generation moved on */
    switch (SLOT_STATE(w)) {
    case SLOT_ALIVE:
    case SLOT_CLAIMING: return PROC_LIVE;
    case SLOT_RECLAIMING: return PROC_DOUBT; /* may still back off (L1) */
    default: return PROC_GONE;
    }
}

bool ivshm__proc_live(ivshm_region_t *r, uint32_t idx, uint32_t gen)
{
    return ivshm__proc_state(r, idx, gen) != PROC_GONE;
}

enum ivshm_verdict ivshm__lease_verdict(const ivshm_region_t *r,
                                        struct ivshm_reg_slot *s, uint64_t w,
                                        uint64_t now, bool *by_pid)
{
    *by_pid = false;
    uint64_t hb = atomic_load_explicit(&s->heartbeat_ns, memory_order_acquire);
    if (hb == 0)
        return VERDICT_LIVE; /* not stamped yet: the gc starts its clock */
    bool expired =
        now > hb && now - hb > ivshm__ms_to_ns(r->g.lease_timeout_ms);
    /* A claim that expired is in doubt, whatever its VM: its claimer may
     * be paused between its R0 CAS and its publish, and on resuming it
     * stores its identity into the slot with plain stores, which would
     * land in the lease of whoever took the slot next. Its pid is no
     * proof either: the heartbeat may be the gc's (reclaim.c), not R1. */
    if (SLOT_STATE(w) == SLOT_CLAIMING)
        return expired ? VERDICT_DOUBT : VERDICT_LIVE;
    /* read once: another VM may rewrite them while we decide. The identity
     * is complete once ALIVE is published (R1). */
    uint64_t vm = __atomic_load_n(&s->vm_id, __ATOMIC_RELAXED);
    uint64_t start = __atomic_load_n(&s->start_time, __ATOMIC_RELAXED);
    uint32_t pid = __atomic_load_n(&s->pid, __ATOMIC_RELAXED);
    if (vm == r->vm_id && pid != 0 && pid <= INT32_MAX) {
        *by_pid = true;
        return ivshm__pid_dead(pid, start) ? VERDICT_DEAD : VERDICT_LIVE;
    }
    /* another VM: its pids mean nothing here, and a VM paused for minutes
     * is alive; an expired heartbeat proves nothing */
    return expired ? VERDICT_DOUBT : VERDICT_LIVE;
}

/* The reason, with every answer of a lost lease: the message lives per
 * thread, and the thread that first found the loss may be the heartbeat's
 * or a caller that returns nothing (ivshm_job_leave), so a later failure
 * must say it again rather than leave an older or another thread's
 * message in place. Said once per thread while nothing else is said
 * since: a progress pass or a send after the loss formats nothing. */
static _Thread_local uint64_t lost_said_r; /* the handle's serial */
static _Thread_local unsigned long lost_said_at;

static ivshm_status_t say_lease_lost(const ivshm_region_t *r)
{
    ivshm__fail(IVSHM_ERR_LEASE_LOST,
                "lease on registry slot %u of %s was reclaimed: this "
                "process was declared dead ('ivshm gc --force' after it "
                "stalled longer than the lease timeout, %u ms) and must "
                "stop using the region",
                r->slot, r->uri, r->g.lease_timeout_ms);
    lost_said_r = r->serial;
    lost_said_at = ivshm__fails();
    return IVSHM_ERR_LEASE_LOST;
}

static ivshm_status_t lease_lost_again(const ivshm_region_t *r)
{
    if (lost_said_r == r->serial && lost_said_at == ivshm__fails())
        return IVSHM_ERR_LEASE_LOST; /* the thread's last message */
    return say_lease_lost(r);
}

static ivshm_status_t lease_lost(ivshm_region_t *r)
{
    /* the first to find it: our sends take the full check again, which
     * now fails (K0): the slot may read alive again after we gave up */
    if (!atomic_exchange(&r->lease_lost, true))
        ivshm__life_ended(r);
    return say_lease_lost(r);
}

ivshm_status_t ivshm__lease_check(ivshm_region_t *r)
{
    if (atomic_load_explicit(&r->lease_lost, memory_order_relaxed))
        return lease_lost_again(r);
    if (!r->attached)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "process is not attached (call ivshm_attach)");
    /* our own slot's word: written only by a reclaimer, so it stays in our
     * cache and costs one load on the fast path */
    uint64_t w = atomic_load_explicit(&ivshm__reg(r, r->slot)->word,
                                      memory_order_acquire);
    if (w == SLOT_WORD(r->gen, SLOT_ALIVE))
        return IVSHM_OK;
    if (SLOT_GEN(w) != r->gen || SLOT_STATE(w) != SLOT_RECLAIMING)
        return lease_lost(r);
    /* a reclaimer is deciding: answer with a fresh heartbeat (L0) */
    atomic_store(&r->last_renew_ns, 0);
    ivshm_status_t st = ivshm_lease_renew(r);
    return st == IVSHM_ERR_LEASE_LOST ? lease_lost(r) : st;
}

struct self_desc {
    uint32_t pid;
    uint64_t start_time;
    char host[32];
    char comm[16];
};

/* Gathered before the claim so that the CLAIMING window holds only a few
 * stores: a process killed there is reclaimed only after a lease timeout. */
static void describe_self(struct self_desc *d)
{
    memset(d, 0, sizeof(*d));
    d->pid = (uint32_t)getpid();
    d->start_time = ivshm__proc_start_time(getpid());
    char host[64] = "";
    gethostname(host, sizeof(host));
    memcpy(d->host, host, strnlen(host, sizeof(d->host) - 1));
    char comm[32] = "";
    FILE *f = fopen("/proc/self/comm", "r");
    if (f) {
        if (!fgets(comm, sizeof(comm), f))
            comm[0] = '\0';
        fclose(f);
        comm[strcspn(comm, "\n")] = '\0';
    }
    memcpy(d->comm, comm, strnlen(comm, sizeof(d->comm) - 1));
}

ivshm_status_t ivshm__try_claim(ivshm_region_t *r)
{
    struct self_desc d;
    describe_self(&d);
    for (uint32_t i = 0; i < r->g.reg_slots; i++) {
        struct ivshm_reg_slot *s = ivshm__reg(r, i);
        uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);
        if (SLOT_STATE(w) != SLOT_FREE)
            continue;
        uint32_t gen = SLOT_GEN(w);
        uint64_t hb = atomic_load(&s->heartbeat_ns);
        /* R0: the CAS makes the slot ours; the generation came with it. */
        if (!atomic_compare_exchange_strong(&s->word, &w,
                                            SLOT_WORD(gen, SLOT_CLAIMING)))
            continue;
        /* the claim's clock starts now: a free slot's heartbeat may be a
         * clock a gc started for its release (release_slot). By CAS from
         * what it read before R0: a stamp by whoever took the slot since
         * stays (a gc that started the clock, or the next claim) */
        atomic_compare_exchange_strong(&s->heartbeat_ns, &hb,
                                       ivshm__now_ns());
        IVSHM_TEST_STEP("attach-claim");
        s->vm_id = r->vm_id;
        s->pid = d.pid;
        s->start_time = d.start_time;
        for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++)
            atomic_store(&s->jobs[k], 0);
        atomic_store(&s->holding, 0);
        atomic_store(&s->heap_chunks, 0); /* counted while ALIVE (quota.c) */
        memcpy(s->host, d.host, sizeof(s->host));
        memcpy(s->comm, d.comm, sizeof(s->comm));
        /* R1: heartbeat last among the identity fields: a reclaimer that
         * sees it non-zero (acquire) also sees pid and vm_id. */
        atomic_store_explicit(&s->heartbeat_ns, ivshm__now_ns(),
                              memory_order_release);
        /* R1b: publish by CAS: a reclaimer may have judged this claim stale
         * (it only may after a full lease timeout); then claim again. */
        uint64_t claiming = SLOT_WORD(gen, SLOT_CLAIMING);
        if (!atomic_compare_exchange_strong_explicit(
                &s->word, &claiming, SLOT_WORD(gen, SLOT_ALIVE),
                memory_order_release, memory_order_relaxed))
            continue;
        r->slot = i;
        r->gen = gen;
        r->own_word = &s->word;
        r->own_alive = SLOT_WORD(gen, SLOT_ALIVE);
        r->attached = true;
        atomic_store(&r->last_renew_ns, ivshm__mono_ns());
        atomic_fetch_add(&ivshm__hdr(r)->attaches, 1);
        return IVSHM_OK;
    }
    return IVSHM_ERR_REGISTRY_FULL;
}

ivshm_status_t ivshm_lease_renew(ivshm_region_t *r)
{
    if (!r->attached)
        return ivshm__fail(IVSHM_ERR_LEASE_LOST, "not attached");
    if (atomic_load(&r->lease_lost))
        return lease_lost_again(r);
    uint64_t mono = ivshm__mono_ns();
    uint64_t period = ivshm__ms_to_ns(r->g.lease_timeout_ms) / 8;
    if (mono - atomic_load_explicit(&r->last_renew_ns, memory_order_relaxed) <
        period)
        return IVSHM_OK;
    struct ivshm_reg_slot *s = ivshm__reg(r, r->slot);
    /* L0: heartbeat first, then check the word (both seq_cst). Pairs with
     * the reclaimer's CAS then heartbeat re-read (L1): either it sees our
     * heartbeat and backs off, or we see its claim. */
    atomic_store(&s->heartbeat_ns, ivshm__now_ns());
    IVSHM_TEST_STEP("renew");
    /* a reclaimer backs off while our heartbeat is younger than the lease
     * timeout (L1): one that has not within that time of our heartbeat
     * has decided, or stopped where it cannot tell us, and we give the
     * lease up. By the clock, not by a count of sleeps, whose length the
     * machine decides. */
    uint64_t beat = ivshm__mono_ns();
    uint64_t wait = ivshm__ms_to_ns(r->g.lease_timeout_ms);
    unsigned spins = 0;
    for (;;) {
        uint64_t w = atomic_load(&s->word);
        if (w == SLOT_WORD(r->gen, SLOT_ALIVE))
            break;
        if (w != SLOT_WORD(r->gen, SLOT_RECLAIMING) ||
            ivshm__mono_ns() - beat > wait)
            return lease_lost(r);
        ivshm__backoff(&spins);
    }
    atomic_store_explicit(&r->last_renew_ns, mono, memory_order_relaxed);
    return IVSHM_OK;
}

static void *hb_main(void *arg)
{
    ivshm_region_t *r = arg;
    uint64_t period_ms = r->g.lease_timeout_ms / 4;
    while (!atomic_load(&r->hb_stop)) {
        for (uint64_t t = 0; t < period_ms && !atomic_load(&r->hb_stop);
             t += 20) {
            struct timespec ts = {0, 20 * 1000000};
            nanosleep(&ts, NULL);
        }
        atomic_store(&r->last_renew_ns, 0); /* force a real renew */
        if (ivshm_lease_renew(r) == IVSHM_ERR_LEASE_LOST)
            break; /* lease_lost is set: every later use fails */
    }
    return NULL;
}

ivshm_status_t ivshm_lease_start_thread(ivshm_region_t *r)
{
    ivshm_status_t st = ivshm__require_attached(r);
    if (st != IVSHM_OK || r->hb_running)
        return st;
    atomic_store(&r->hb_stop, false);
    int e = pthread_create(&r->hb_thread, NULL, hb_main, r);
    if (e)
        return ivshm__fail(IVSHM_ERR_SYS, "cannot start heartbeat thread: %s",
                           strerror(e));
    r->hb_running = true;
    return IVSHM_OK;
}

ivshm_status_t ivshm_self_identity(const ivshm_region_t *r,
                                   ivshm_identity_t *id)
{
    ivshm_status_t st = ivshm__require_attached(r);
    if (st != IVSHM_OK)
        return st;
    memset(id, 0, sizeof(*id));
    memcpy(id->region_uuid, r->g.uuid, 16);
    id->vm_id = r->vm_id;
    id->slot = r->slot;
    id->gen = r->gen;
    id->pid = (uint32_t)getpid();
    return IVSHM_OK;
}

ivshm_locality_t ivshm_peer_locality(ivshm_region_t *r,
                                     const ivshm_identity_t *peer)
{
    if (!r->valid || memcmp(peer->region_uuid, r->g.uuid, 16) != 0)
        return IVSHM_PEER_REMOTE;
    if (peer->slot >= r->g.reg_slots)
        return IVSHM_PEER_STALE;
    struct ivshm_reg_slot *s = ivshm__reg(r, peer->slot);
    uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
    /* single loads: another VM may rewrite the slot while we compare */
    uint64_t vm = __atomic_load_n(&s->vm_id, __ATOMIC_RELAXED);
    uint32_t pid = __atomic_load_n(&s->pid, __ATOMIC_RELAXED);
    if (w != SLOT_WORD(peer->gen, SLOT_ALIVE) || vm != peer->vm_id ||
        pid != peer->pid)
        return IVSHM_PEER_STALE;
    if (r->attached && peer->slot == r->slot && peer->gen == r->gen)
        return IVSHM_PEER_SELF;
    return peer->vm_id == r->vm_id ? IVSHM_PEER_SAME_VM : IVSHM_PEER_OTHER_VM;
}

bool ivshm__doubt_wait(ivshm_region_t *r, uint32_t slot, uint32_t gen,
                       uint64_t *deadline, unsigned *spins)
{
    _Atomic uint32_t *gave_up = r->doubt_gave_up && slot < r->g.reg_slots
                                    ? &r->doubt_gave_up[slot]
                                    : NULL;
    /* a life given up on once is not waited for again: UCP asks for every
     * lane it weighs, the BTL for each of its routes */
    if (gave_up && atomic_load(gave_up) == gen + 1)
        return false;
    uint64_t now = ivshm__mono_ns();
    if (!*deadline) {
        *deadline = now + DOUBT_WAIT_NS;
    } else if (now > *deadline) {
        if (gave_up)
            atomic_store(gave_up, gen + 1);
        return false;
    }
    ivshm__backoff(spins);
    return true;
}

/* A life given up on (ivshm__doubt_wait) that reads alive again: its
 * collector backed off after all, and a later doubt is waited for anew
 * (ivshm_region_owned asks at every access, not once per job). */
static void doubt_forget(ivshm_region_t *r, uint32_t slot, uint32_t gen)
{
    if (!r->doubt_gave_up || slot >= r->g.reg_slots)
        return;
    uint32_t mark = gen + 1;
    if (atomic_load_explicit(&r->doubt_gave_up[slot], memory_order_relaxed) ==
        mark)
        atomic_compare_exchange_strong(&r->doubt_gave_up[slot], &mark, 0);
}

/* The settled locality's answer loc; a life that reads alive is
 * forgotten as given up on. */
static ivshm_locality_t settled_alive(ivshm_region_t *r,
                                      const ivshm_identity_t *peer,
                                      ivshm_locality_t loc)
{
    if (loc >= IVSHM_PEER_OTHER_VM)
        doubt_forget(r, peer->slot, peer->gen);
    return loc;
}

ivshm_locality_t ivshm_peer_locality_settled(ivshm_region_t *r,
                                             const ivshm_identity_t *peer)
{
    uint64_t deadline = 0;
    unsigned spins = 0;
    for (;;) {
        ivshm_locality_t loc = ivshm_peer_locality(r, peer);
        if (loc != IVSHM_PEER_STALE || peer->slot >= r->g.reg_slots)
            return settled_alive(r, peer, loc);
        /* in doubt: that life's word, held by a collector (L1); one that
         * backed off since the answer above is asked again */
        IVSHM_TEST_STEP("locality-doubt");
        uint64_t w = atomic_load(&ivshm__reg(r, peer->slot)->word);
        if (w != SLOT_WORD(peer->gen, SLOT_RECLAIMING))
            return w == SLOT_WORD(peer->gen, SLOT_ALIVE)
                       ? settled_alive(r, peer, ivshm_peer_locality(r, peer))
                       : loc;
        if (!ivshm__doubt_wait(r, peer->slot, peer->gen, &deadline, &spins))
            return loc;
    }
}

const char *ivshm_locality_str(ivshm_locality_t l)
{
    switch (l) {
    case IVSHM_PEER_REMOTE: return "remote";
    case IVSHM_PEER_STALE: return "stale";
    case IVSHM_PEER_OTHER_VM: return "other-vm";
    case IVSHM_PEER_SAME_VM: return "same-vm";
    case IVSHM_PEER_SELF: return "self";
    }
    return "?";
}
