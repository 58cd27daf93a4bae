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

#include <stdio.h>
#include <string.h>

/* a count read from another process' slot, clamped: it is untrusted */
static uint32_t heap_count(const ivshm_region_t *r, struct ivshm_reg_slot *p)
{
    uint32_t n = atomic_load(&p->heap_chunks);
    return n > r->g.chunk_count ? r->g.chunk_count : n;
}

/* Does slot p hold a lease whose blocks still count (alive, or held by a
 * reclaimer that has not freed them yet)? A claiming slot's count is not
 * zeroed yet. */
static bool counts(struct ivshm_reg_slot *p)
{
    unsigned st = SLOT_STATE(atomic_load(&p->word));
    return st == SLOT_ALIVE || st == SLOT_RECLAIMING;
}

/* The heap chunks of each job this process is in (mine[k], 0: none) or,
 * in none, its own: true when one of them passes quota_chunks. */
static bool over_quota(ivshm_region_t *r, uint64_t quota_chunks)
{
    struct ivshm_reg_slot *me = ivshm__reg(r, r->slot);
    uint64_t mine[IVSHM_JOBS_PER_PROC], sum[IVSHM_JOBS_PER_PROC] = {0};
    bool in_a_job = false;
    for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++) {
        mine[k] = atomic_load(&me->jobs[k]);
        in_a_job |= mine[k] != 0;
    }
    if (!in_a_job)
        return heap_count(r, me) > quota_chunks;
    for (uint32_t i = 0; i < r->g.reg_slots; i++) {
        struct ivshm_reg_slot *p = ivshm__reg(r, i);
        uint32_t h = heap_count(r, p);
        if (h == 0 || !counts(p))
            continue;
        for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++)
            for (int m = 0; m < IVSHM_JOBS_PER_PROC && mine[k]; m++)
                if (atomic_load(&p->jobs[m]) == mine[k]) {
                    sum[k] += h;
                    break;
                }
    }
    for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++)
        if (mine[k] && sum[k] > quota_chunks)
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
    _Atomic uint32_t *mine = &ivshm__reg(r, r->slot)->heap_chunks;
    /* Q0: reserve, then sum (seq_cst both); pairs with Q0 of every other
     * member */
    atomic_fetch_add(mine, (uint32_t)n);
    if (over_quota(r, quota_chunks)) {
        atomic_fetch_sub(mine, (uint32_t)n);
        return ivshm__fail(IVSHM_ERR_QUOTA,
                           "the region-heap blocks of this process' job "
                           "would pass its quota of %llu bytes",
                           (unsigned long long)quota);
    }
    st = ivshm_alloc(r, size, off);
    if (st != IVSHM_OK)
        atomic_fetch_sub(mine, (uint32_t)n);
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
    _Atomic uint32_t *mine = &ivshm__reg(r, r->slot)->heap_chunks;
    uint32_t cur = atomic_load(mine);
    /* never below zero, whatever was counted */
    while (!atomic_compare_exchange_weak(
        mine, &cur, cur > run ? cur - (uint32_t)run : 0))
        ;
    return IVSHM_OK;
}

/* ---- who holds the heap: the message of a full region ---- */

#define HOLDERS_SHOWN 3 /* jobs named in the message; the rest summed */

struct holder {
    uint64_t member; /* MEMBER_WORD of the job, 0: no job */
    uint64_t chunks;
    unsigned procs;
    uint32_t first_slot; /* the registry slot that names the job */
};

/* printable copy of a name from the region (untrusted bytes) */
static void copy_name(char *dst, const char *src, size_t n)
{
    size_t i;
    for (i = 0; i + 1 < n && src[i]; i++)
        dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? src[i] : '?';
    dst[i] = '\0';
}

static void job_name(ivshm_region_t *r, uint64_t member, char *out, size_t n)
{
    uint32_t idx = (uint32_t)member - 1, gen = (uint32_t)(member >> 32);
    if (member == 0) {
        snprintf(out, n, "no job");
        return;
    }
    if (idx < r->g.job_slots) {
        struct ivshm_job_slot *s = ivshm__jobs(r, idx);
        uint64_t w = atomic_load(&s->word);
        if (JOB_STATE(w) == SLOT_ALIVE && JOB_GEN(w) == (gen & 0xffffffu)) {
            char key[IVSHM_JOB_KEY_MAX + 1];
            memcpy(key, s->key, sizeof(key));
            key[IVSHM_JOB_KEY_MAX] = '\0';
            char shown[IVSHM_JOB_KEY_MAX + 1];
            copy_name(shown, key, sizeof(shown));
            snprintf(out, n, "job %s", shown);
            return;
        }
    }
    snprintf(out, n, "job slot %u", idx);
}

static double mib(const ivshm_region_t *r, uint64_t chunks)
{
    return (double)(chunks << r->g.chunk_shift) / (1024.0 * 1024.0);
}

void ivshm__heap_holders(ivshm_region_t *r, char *buf, size_t cap)
{
    struct holder h[HOLDERS_SHOWN + 1];
    unsigned nh = 0;
    uint64_t total = 0, others = 0;
    for (uint32_t i = 0; i < r->g.reg_slots; i++) {
        struct ivshm_reg_slot *p = ivshm__reg(r, i);
        uint32_t c = heap_count(r, p);
        if (c == 0 || !counts(p))
            continue;
        total += c;
        uint64_t member = 0;
        for (int k = 0; k < IVSHM_JOBS_PER_PROC && !member; k++)
            member = atomic_load(&p->jobs[k]);
        unsigned j;
        for (j = 0; j < nh && h[j].member != member; j++)
            ;
        if (j == nh && nh == HOLDERS_SHOWN) {
            others += c;
            continue;
        }
        if (j == nh)
            h[nh++] = (struct holder){member, 0, 0, i};
        h[j].chunks += c;
        h[j].procs++;
    }
    if (total == 0)
        return;
    size_t len = strlen(buf);
    len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0,
                            "; region-heap blocks (malloc'd arrays) hold "
                            "%.1f of its %.1f MiB:",
                            mib(r, total), mib(r, r->g.chunk_count));
    for (unsigned j = 0; j < nh && len < cap; j++) {
        char name[IVSHM_JOB_KEY_MAX + 16], host[33], comm[17];
        struct ivshm_reg_slot *p = ivshm__reg(r, h[j].first_slot);
        job_name(r, h[j].member, name, sizeof(name));
        copy_name(host, p->host, sizeof(host));
        copy_name(comm, p->comm, sizeof(comm));
        len += (size_t)snprintf(
            buf + len, cap - len, "%s %s %.1f MiB in %u process%s (%s pid %u on %s%s)",
            j ? "," : "", name, mib(r, h[j].chunks), h[j].procs,
            h[j].procs == 1 ? "" : "es", comm,
            __atomic_load_n(&p->pid, __ATOMIC_RELAXED), host,
            h[j].procs == 1 ? "" : ", ...");
    }
    if (others && len < cap)
        len += (size_t)snprintf(buf + len, cap - len, ", others %.1f MiB",
                                mib(r, others));
    if (len < cap)
        snprintf(buf + len, cap - len,
                 "; lower their btl_ivshmem_heap_quota or let them free "
                 "those arrays");
}
