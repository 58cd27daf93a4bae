/*
 * Inspection of a mapped region, behind `ivshm info` and `ivshm check`
 * (chan_domain.c finds the jobs of `ivshm stat` through it too): the
 * header and usage counts, one registry or job slot at a time, and the
 * full layout check (registry, job table, chunk table), and the messages
 * that say why a region or its registry is full. It reads regions
 * that may be damaged or written while it looks: strings are copied with
 * their bytes made printable, and every index, offset and run is checked
 * against the validated geometry before it is followed. Nothing here
 * writes to the region.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static ivshm_status_t require_valid(const ivshm_region_t *r)
{
    return r->valid ? IVSHM_OK
                    : ivshm__fail(IVSHM_ERR_CORRUPT,
                                  "region header is not valid");
}

/* Is the lease (or claim) in slot s, word w, in doubt (registry.c)? */
static bool in_doubt(const ivshm_region_t *r, struct ivshm_reg_slot *s,
                     uint64_t w, uint64_t now)
{
    bool by_pid;
    unsigned st = SLOT_STATE(w);
    return (st == SLOT_ALIVE || st == SLOT_CLAIMING) &&
           ivshm__lease_verdict(r, s, w, now, &by_pid) == VERDICT_DOUBT;
}

ivshm_status_t ivshm_region_info(ivshm_region_t *r, ivshm_region_info_t *i)
{
    ivshm_status_t st = require_valid(r);
    if (st != IVSHM_OK)
        return st;
    memset(i, 0, sizeof(*i));
    memcpy(i->uuid, r->g.uuid, 16);
    i->version = IVSHM_LAYOUT_VERSION;
    i->size = r->g.size;
    i->created_ns = ivshm__hdr(r)->created_ns;
    i->chunk_size = 1u << r->g.chunk_shift;
    i->chunk_count = r->g.chunk_count;
    i->reg_slots = r->g.reg_slots;
    i->job_slots = r->g.job_slots;
    i->lease_timeout_ms = r->g.lease_timeout_ms;
    i->heap_off = r->g.heap_off;
    for (uint32_t k = 0; k < r->g.chunk_count; k++) {
        uint64_t t = atomic_load(&ivshm__chunk(r, k)->owner);
        i->chunks_used += t != 0;
        i->chunks_cooling += OWNER_KIND(t) == OWNER_COOL;
    }
    for (uint32_t k = 0; k < r->g.reg_slots; k++) {
        uint64_t w = atomic_load(&ivshm__reg(r, k)->word);
        i->reg_used += SLOT_STATE(w) != 0;
        i->reg_in_doubt += in_doubt(r, ivshm__reg(r, k), w, ivshm__now_ns());
    }
    for (uint32_t k = 0; k < r->g.job_slots; k++)
        i->job_used += JOB_STATE(atomic_load(&ivshm__jobs(r, k)->word)) != 0;
    return IVSHM_OK;
}

static void copy_str(char *dst, const char *src, size_t n)
{
    /* shared strings may lack a terminator or hold control bytes */
    size_t k = 0;
    for (; k + 1 < n && src[k]; k++)
        dst[k] = (src[k] >= 0x20 && src[k] < 0x7f) ? src[k] : '?';
    dst[k] = '\0';
}

void ivshm__proc_info_unknown(ivshm_proc_info_t *p)
{
    p->pid = 0;
    p->vm_id = 0;
    p->job = 0;
    p->host[0] = '\0';
    p->comm[0] = '\0';
}

ivshm_status_t ivshm_region_proc(ivshm_region_t *r, uint32_t i,
                                 ivshm_proc_info_t *p)
{
    ivshm_status_t st = require_valid(r);
    if (st != IVSHM_OK)
        return st;
    if (i >= r->g.reg_slots)
        return IVSHM_ERR_NOT_FOUND;
    struct ivshm_reg_slot *s = ivshm__reg(r, i);
    memset(p, 0, sizeof(*p));
    uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
    p->slot = i;
    p->gen = SLOT_GEN(w);
    p->state = (int)SLOT_STATE(w);
    if (p->state == SLOT_FREE) {
        p->heartbeat_age_ms = -1;
        return IVSHM_OK; /* its fields are the last life's (release_slot) */
    }
    p->pid = s->pid;
    p->vm_id = s->vm_id;
    uint64_t hb = atomic_load(&s->heartbeat_ns);
    uint64_t now = ivshm__now_ns();
    p->heartbeat_age_ms = hb ? (int64_t)(now - hb) / 1000000 : -1;
    p->in_doubt = in_doubt(r, s, w, now);
    for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++)
        p->job += atomic_load(&s->jobs[k]) != 0;
    copy_str(p->host, s->host, sizeof(p->host));
    copy_str(p->comm, s->comm, sizeof(p->comm));
    uint64_t tag = OWNER_TAG(OWNER_PROC, i, p->gen);
    for (uint32_t k = 0; k < r->g.chunk_count; k++)
        p->chunks += atomic_load(&ivshm__chunk(r, k)->owner) == tag;
    if (p->state == SLOT_CLAIMING)
        ivshm__proc_info_unknown(p); /* maybe still the last life's */
    return IVSHM_OK;
}

ivshm_status_t ivshm_region_job(ivshm_region_t *r, uint32_t i,
                                ivshm_job_info_t *j)
{
    ivshm_status_t st = require_valid(r);
    if (st != IVSHM_OK)
        return st;
    if (i >= r->g.job_slots)
        return IVSHM_ERR_NOT_FOUND;
    struct ivshm_job_slot *s = ivshm__jobs(r, i);
    memset(j, 0, sizeof(*j));
    uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
    j->slot = i;
    j->gen = JOB_GEN(w);
    j->state = (int)JOB_STATE(w);
    if (j->state == SLOT_FREE)
        return IVSHM_OK; /* a released slot keeps its last job's fields */
    copy_str(j->key, s->key, sizeof(j->key));
    j->area_off = atomic_load(&s->area_off);
    j->area_size = s->area_size;
    j->members = ivshm__job_members(r, i, j->gen); /* as job gc counts */
    return IVSHM_OK;
}

#define REPORT(st_, ...)                                                     \
    do {                                                                     \
        char m_[256];                                                        \
        snprintf(m_, sizeof(m_), __VA_ARGS__);                               \
        if (report)                                                          \
            report(arg, (st_), m_);                                          \
        if ((st_) != IVSHM_OK && first == IVSHM_OK)                          \
            first = (st_);                                                   \
    } while (0)

ivshm_status_t ivshm_region_check(ivshm_region_t *r, ivshm_report_fn report,
                                  void *arg)
{
    ivshm_status_t first = IVSHM_OK;
    struct ivshm_geom g;
    ivshm_status_t st = ivshm__validate_header(r->base, r->map_size, &g);
    if (st != IVSHM_OK) {
        REPORT(st, "header: %s", ivshm_last_error());
        return first;
    }
    for (uint32_t i = 0; i < g.reg_slots; i++) {
        uint64_t w = atomic_load(&ivshm__reg(r, i)->word);
        if (SLOT_STATE(w) > SLOT_RECLAIMING)
            REPORT(IVSHM_ERR_CORRUPT, "registry slot %u: state %u unknown", i,
                   SLOT_STATE(w));
        for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++) {
            uint32_t job = (uint32_t)atomic_load(&ivshm__reg(r, i)->jobs[k]);
            if (job > g.job_slots)
                REPORT(IVSHM_ERR_CORRUPT,
                       "registry slot %u: job index %u out of range", i, job);
        }
    }
    for (uint32_t i = 0; i < g.job_slots; i++) {
        struct ivshm_job_slot *s = ivshm__jobs(r, i);
        uint64_t w = atomic_load(&s->word);
        uint64_t off = atomic_load(&s->area_off);
        uint64_t size = s->area_size;
        if (JOB_STATE(w) > SLOT_RECLAIMING) {
            REPORT(IVSHM_ERR_CORRUPT, "job slot %u: state %u unknown", i,
                   JOB_STATE(w));
            continue;
        }
        if (JOB_STATE(w) != SLOT_ALIVE || off == 0)
            continue;
        if (!ivshm__in_heap(&g, off, size) ||
            (off - g.heap_off) % (1ull << g.chunk_shift)) {
            REPORT(IVSHM_ERR_CORRUPT,
                   "job slot %u: area [%llu, +%llu) outside the heap", i,
                   (unsigned long long)off, (unsigned long long)size);
            continue;
        }
        uint32_t c = (uint32_t)((off - g.heap_off) >> g.chunk_shift);
        uint64_t tag = OWNER_TAG(OWNER_JOB, i, JOB_GEN(w));
        if (atomic_load(&ivshm__chunk(r, c)->owner) != tag)
            REPORT(IVSHM_ERR_CORRUPT,
                   "job slot %u: its area's first chunk %u has another owner",
                   i, c);
    }
    /* chunk table: runs are contiguous, owners exist */
    for (uint32_t c = 0; c < g.chunk_count;) {
        struct ivshm_chunk *k = ivshm__chunk(r, c);
        uint64_t tag = atomic_load(&k->owner);
        uint64_t run = atomic_load(&k->run);
        if (tag == 0 || OWNER_KIND(tag) == OWNER_COOL) {
            if (run != 0)
                REPORT(IVSHM_ERR_CORRUPT, "chunk %u: %s but has run %llu",
                       c, tag ? "cooling" : "free", (unsigned long long)run);
            c++;
            continue;
        }
        if (run == 0 || run > g.chunk_count - c) {
            REPORT(IVSHM_ERR_CORRUPT,
                   "chunk %u: allocation of %llu chunks is out of range", c,
                   (unsigned long long)run);
            c++;
            continue;
        }
        for (uint64_t n = 1; n < run; n++) {
            struct ivshm_chunk *kn = ivshm__chunk(r, c + (uint32_t)n);
            if (atomic_load(&kn->owner) != tag || atomic_load(&kn->run) != 0)
                REPORT(IVSHM_ERR_CORRUPT,
                       "chunk %llu: inside the allocation at %u but owned "
                       "differently",
                       (unsigned long long)(c + n), c);
        }
        unsigned kind = OWNER_KIND(tag);
        uint32_t idx = OWNER_IDX(tag);
        if ((kind != OWNER_PROC && kind != OWNER_JOB) ||
            (kind == OWNER_PROC && idx >= g.reg_slots) ||
            (kind == OWNER_JOB && idx >= g.job_slots)) {
            REPORT(IVSHM_ERR_CORRUPT, "chunk %u: owner tag 0x%016llx invalid",
                   c, (unsigned long long)tag);
        } else {
            uint64_t w = kind == OWNER_PROC
                             ? atomic_load(&ivshm__reg(r, idx)->word)
                             : atomic_load(&ivshm__jobs(r, idx)->word);
            uint32_t gen = kind == OWNER_PROC ? SLOT_GEN(w) : JOB_GEN(w);
            unsigned state = kind == OWNER_PROC ? SLOT_STATE(w) : JOB_STATE(w);
            if (state == SLOT_FREE || gen != OWNER_GEN(tag))
                REPORT(IVSHM_OK,
                       "chunk %u: %llu chunks held by a %s that is gone "
                       "(run 'ivshm gc')",
                       c, (unsigned long long)run,
                       kind == OWNER_PROC ? "process" : "job");
        }
        c += (uint32_t)run;
    }
    return first;
}

/* ---- why the region is full, or its registry: the messages ---- */

#define HOLDERS_SHOWN 3 /* jobs named in the message; the rest summed */

struct holder {
    uint64_t member; /* MEMBER_WORD of the job, 0: no job */
    uint64_t chunks;
    unsigned procs;
    uint32_t first_slot; /* the registry slot that names the job */
};

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
            copy_str(shown, key, sizeof(shown));
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

static void heap_holders(ivshm_region_t *r, char *buf, size_t cap)
{
    struct holder h[HOLDERS_SHOWN + 1];
    unsigned nh = 0;
    uint64_t total = 0, others = 0;
    for (uint32_t i = 0; i < r->g.reg_slots; i++) {
        struct ivshm_reg_slot *p = ivshm__reg(r, i);
        uint32_t c = ivshm__heap_count(r, p);
        if (c == 0 || !ivshm__lease_counts_heap(p))
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
        copy_str(host, p->host, sizeof(host));
        copy_str(comm, p->comm, sizeof(comm));
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

unsigned ivshm__describe_doubts(ivshm_region_t *r, bool holding, char *buf,
                                size_t cap)
{
    unsigned n = 0;
    size_t at = strlen(buf);
    for (uint32_t i = 0; i < r->g.reg_slots; i++) {
        ivshm_proc_info_t p;
        if (ivshm_region_proc(r, i, &p) != IVSHM_OK || !p.in_doubt ||
            (holding && p.chunks == 0))
            continue;
        char held[32] = "";
        if (holding)
            snprintf(held, sizeof(held), ", %.1f MiB", mib(r, p.chunks));
        char who[64] = "a claim not completed"; /* its identity unknown */
        if (p.state != SLOT_CLAIMING)
            snprintf(who, sizeof(who), "vm %016llx, pid %u",
                     (unsigned long long)p.vm_id, p.pid);
        if (n++ < 4 && at < cap)
            at += (size_t)snprintf(buf + at, cap - at,
                                   "%s slot %u (%s, heartbeat %lld ms ago%s)",
                                   n > 1 ? "," : "", i, who,
                                   (long long)p.heartbeat_age_ms, held);
    }
    return n;
}

void ivshm__full_region_cause(ivshm_region_t *r, char *buf, size_t cap)
{
    /* other processes' malloc'd arrays */
    heap_holders(r, buf, cap);
    /* memory of owners that may be paused, kept until proven dead */
    size_t at = strlen(buf);
    if (at + 1 >= cap)
        return;
    const char *lead = "; leases in doubt (heartbeat older than the lease "
                       "timeout, maybe paused) hold chunks:";
    snprintf(buf + at, cap - at, "%s", lead);
    if (ivshm__describe_doubts(r, true, buf, cap) == 0) {
        buf[at] = '\0';
        return;
    }
    at = strlen(buf);
    if (at < cap)
        snprintf(buf + at, cap - at,
                 "; if their VMs are gone, run 'ivshm gc --force'");
}
