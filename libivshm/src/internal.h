/*
 * Shared layout of format version 4 and the private region handle.
 *
 * Region map:  [header page][registry][job table][chunk owner table][heap]
 * Every structure here lives in memory that other VMs write: fields are
 * copied into locals once, validated, then used. No pointers are stored in
 * the region, only offsets checked against the private copy of its size.
 */
#ifndef IVSHM_INTERNAL_H
#define IVSHM_INTERNAL_H

#include "ivshm/ivshm.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* The library's own functions (ivshm__*) are hidden: the copies of libivshm
 * linked into a component (the BTL, the UCT transport) then call them
 * directly, not through the PLT that a default-visibility symbol of a
 * shared object needs, and export only the public API. */
#pragma GCC visibility push(hidden)

#define IVSHM_CACHELINE 64
#define IVSHM_MAGIC 0x314752534d485649ull /* "IVSHMRG1" */
#define IVSHM_HDR_SIZE 4096u
#define IVSHM_HDR_SUM_BYTES 120u /* bytes of header covered by hdr_sum */

#define IVSHM_ALIGNED __attribute__((aligned(IVSHM_CACHELINE)))
#define IVSHM_JOBS_PER_PROC 4
/* The lease timeouts a region may be formatted with (header field
 * lease_timeout_ms): 100 ms to 1 h. */
#define IVSHM_LEASE_MIN_MS 100u
#define IVSHM_LEASE_MAX_MS 3600000u
/* The other ranged header fields: chunk sizes 4 KiB to 1 GiB, slots. */
#define IVSHM_CHUNK_SHIFT_MIN 12u
#define IVSHM_CHUNK_SHIFT_MAX 30u
#define IVSHM_REG_SLOTS_MAX 65536u
#define IVSHM_JOB_SLOTS_MAX 4096u

enum ivshm_hdr_state {
    HDR_EMPTY = 0,
    HDR_FORMATTING = 0x464f524du, /* "FORM" */
    HDR_READY = 0x52454459u,      /* "REDY" */
};

struct ivshm_hdr {
    /* line 0-1: written once by the formatter, then read-only */
    uint64_t magic;
    uint32_t version;
    uint32_t hdr_size;
    uint64_t region_size;
    uint8_t uuid[16];
    uint64_t created_ns;
    uint32_t chunk_shift;
    uint32_t chunk_count;
    uint32_t reg_slots;
    uint32_t job_slots;
    uint64_t reg_off;
    uint64_t job_off;
    uint64_t chunk_tab_off;
    uint64_t heap_off;
    uint32_t lease_timeout_ms;
    uint32_t flags;
    uint8_t reserved0[16];
    uint64_t hdr_sum; /* FNV-1a 64 over bytes [0, IVSHM_HDR_SUM_BYTES) */
    /* line 2: format state machine */
    _Atomic uint32_t state IVSHM_ALIGNED;
    uint32_t pad0;
    _Atomic uint64_t format_nonce;
    /* line 3: region-wide counters (informative) */
    _Atomic uint64_t attaches IVSHM_ALIGNED;
    _Atomic uint64_t reclaims;
    /* line 4: lives ended (ivshm__life_ended), read by every send */
    _Atomic uint64_t lives_ended IVSHM_ALIGNED;
};
_Static_assert(offsetof(struct ivshm_hdr, hdr_sum) == IVSHM_HDR_SUM_BYTES,
               "checksum covers every immutable header field");
_Static_assert(offsetof(struct ivshm_hdr, state) == 128, "state line");
_Static_assert(offsetof(struct ivshm_hdr, attaches) == 192, "stats line");
_Static_assert(offsetof(struct ivshm_hdr, lives_ended) == 256, "lives line");
_Static_assert(sizeof(struct ivshm_hdr) <= IVSHM_HDR_SIZE, "header page");

/* Slot word: generation in bits 8..63, state in bits 0..7. The generation
 * advances on every free, so a stale owner's CAS fails. */
enum ivshm_slot_state {
    SLOT_FREE = 0,
    SLOT_CLAIMING = 1,
    SLOT_ALIVE = 2,
    SLOT_RECLAIMING = 3,
};
#define SLOT_WORD(gen, st) (((uint64_t)(gen) << 8) | (uint64_t)(st))
#define SLOT_GEN(w) ((uint32_t)((w) >> 8))
#define SLOT_STATE(w) ((unsigned)((w)&0xffu))

struct ivshm_reg_slot {
    _Atomic uint64_t word;
    _Atomic uint64_t heartbeat_ns; /* CLOCK_REALTIME; 0 = not yet written */
    uint64_t vm_id;
    uint64_t start_time; /* process start (clock ticks since boot) */
    uint32_t pid;
    /* chunks of region-heap blocks this process holds (quota.c), written by
     * the owner only; zero from each claim on (zero padding before) */
    _Atomic uint32_t heap_chunks;
    /* job memberships, each (job generation << 32 | job slot + 1); 0 free.
     * Written by the owner only, one atomic word each. */
    _Atomic uint64_t jobs[IVSHM_JOBS_PER_PROC];
    char host[32];
    char comm[16];
    /* the job (MEMBER_WORD) this process holds in reclaiming, 0 none;
     * written by the owner only, before it takes the job slot */
    _Atomic uint64_t holding;
};
#define MEMBER_WORD(idx, gen) (((uint64_t)(gen) << 32) | ((uint64_t)(idx) + 1))
_Static_assert(sizeof(struct ivshm_reg_slot) == 2 * IVSHM_CACHELINE,
               "registry slot is two lines");
_Static_assert(offsetof(struct ivshm_reg_slot, heap_chunks) == 36,
               "the heap counter took the padding after pid");

/* Job word: key hash in bits 32..63, generation in 8..31, state in 0..7. */
#define JOB_WORD(hash, gen, st)                                              \
    (((uint64_t)(hash) << 32) | (((uint64_t)(gen)&0xffffffu) << 8) |          \
     (uint64_t)(st))
#define JOB_HASH(w) ((uint32_t)((w) >> 32))
#define JOB_GEN(w) ((uint32_t)(((w) >> 8) & 0xffffffu))
#define JOB_STATE(w) ((unsigned)((w)&0xffu))

struct ivshm_job_slot {
    _Atomic uint64_t word;
    _Atomic uint64_t area_off; /* 0 until the area exists */
    uint64_t area_size;
    _Atomic uint64_t creator; /* owner tag of the creating process; its
                               * liveness is its membership (C0, job.c) */
    char key[IVSHM_JOB_KEY_MAX + 1];
    uint8_t reserved[48];
};
_Static_assert(sizeof(struct ivshm_job_slot) == 2 * IVSHM_CACHELINE,
               "job slot is two lines");

/* Chunk owner tag: kind in bits 56..63, slot index in 32..55, generation in
 * 0..31. 0 means free. A cooling chunk (OWNER_COOL) belonged to an owner
 * whose lease a reclaimer released: it carries the release time (CLOCK_
 * REALTIME ms, bits 0..55) and is handed out only one lease timeout later,
 * when a copy that checked the owner's life before it began has ended
 * (docs/lifetimes.md). */
enum { OWNER_PROC = 1, OWNER_JOB = 2, OWNER_COOL = 3 };
#define COOL_TAG(ms) (((uint64_t)OWNER_COOL << 56) | ((ms) & ((1ull << 56) - 1)))
#define COOL_MS(t) ((t) & ((1ull << 56) - 1))
#define OWNER_TAG(kind, idx, gen)                                            \
    (((uint64_t)(kind) << 56) | (((uint64_t)(idx)&0xffffffu) << 32) |         \
     (uint64_t)(uint32_t)(gen))
#define OWNER_KIND(t) ((unsigned)((t) >> 56))
#define OWNER_IDX(t) ((uint32_t)(((t) >> 32) & 0xffffffu))
#define OWNER_GEN(t) ((uint32_t)(t))
/* The first chunk of an allocation carries its length in a parallel field
 * so that free() needs only the offset. */
struct ivshm_chunk {
    _Atomic uint64_t owner;
    _Atomic uint64_t run; /* chunks in the allocation starting here, else 0 */
};

/* Private, validated copy of the geometry: the fast paths never reload it
 * from shared memory. */
struct ivshm_geom {
    uint64_t size;
    uint32_t chunk_shift, chunk_count;
    uint32_t reg_slots, job_slots;
    uint64_t reg_off, job_off, chunk_tab_off, heap_off;
    uint32_t lease_timeout_ms;
    uint8_t uuid[16];
};

struct ivshm_provider;

struct ivshm_region {
    char *uri;
    const struct ivshm_provider *prov;
    void *base;
    uint64_t map_size;
    int fd;
    bool rdonly;
    bool valid; /* header validated */
    struct ivshm_geom g;
    /* attachment */
    bool attached;
    uint32_t slot;
    uint32_t gen;
    /* our registry word and the value it holds while our lease lives,
     * kept from the claim: a held lease is one load and one compare */
    _Atomic uint64_t *own_word;
    uint64_t own_alive;
    uint64_t vm_id;
    _Atomic uint64_t last_renew_ns; /* monotonic; rate-limits renew */
    _Atomic bool lease_lost; /* set once: the slot was reclaimed */
    int guard_slot;          /* guard.c: 1 + its SIGBUS guard, 0: none */
    /* ranges of the mapping the caller replaced with its own memory
     * (ivshm_region_keep_range): unmapping leaves them alone */
    struct ivshm_range { uintptr_t start, end; } *keep;
    size_t nkeep;
    pthread_t hb_thread;
    bool hb_running;
    _Atomic bool hb_stop;
    uint64_t serial; /* this handle among the process' handles, from 1 */
    /* per registry slot: 1 + the generation of a life whose doubt
     * outlasted one wait (ivshm__doubt_wait); NULL where not allocated */
    _Atomic uint32_t *doubt_gave_up;
};

/* providers (provider.c) */
struct ivshm_provider {
    const char *scheme; /* "file", "pci" */
    ivshm_status_t (*open)(const char *rest, bool rdonly, bool create,
                           uint64_t create_size, int *fd, uint64_t *size,
                           char **resolved);
};
ivshm_status_t ivshm__provider_open(const char *uri, bool rdonly, bool create,
                                    uint64_t create_size,
                                    const struct ivshm_provider **prov,
                                    int *fd, uint64_t *size, char **resolved);

bool ivshm__provider_is_dev(const struct ivshm_provider *p);
/* How the region's memory is mapped (see ivshm_region_memtype). */
const char *ivshm__provider_memtype(const struct ivshm_provider *p, int fd);
/* the guest driver's view of a dev: region's device (ivshmem_uapi.h) */
struct ivshmem_info;
ivshm_status_t ivshm__dev_info(int fd, const char *path,
                               struct ivshmem_info *info);

/* guard.c */
void ivshm__guard_release(ivshm_region_t *r);

/* status.c */
ivshm_status_t ivshm__fail(ivshm_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
ivshm_status_t ivshm__fail_errno(int err, const char *what, const char *path);
/* Messages this thread has set (ivshm__fail): tells whether the one a
 * caller set is still the thread's last. */
unsigned long ivshm__fails(void);

/* util.c */
/* Fault-injection seam for the tests (tests/mp/test_chan_faults.c): called
 * with the name of the step a process is at (claim, lend, publish, grant,
 * ack, create, destroy, renew, job-claim, job-reclaim, attach-claim,
 * chunk-release, slot-release, slot-held, slot-free); NULL in
 * production. */
extern void (*ivshm__test_step)(const char *step);
#define IVSHM_TEST_STEP(name)                                                \
    do {                                                                     \
        if (ivshm__test_step)                                                \
            ivshm__test_step(name);                                          \
    } while (0)
uint64_t ivshm__fnv1a(const void *p, size_t n, uint64_t h);
#define IVSHM_FNV_INIT 0xcbf29ce484222325ull
uint64_t ivshm__now_ns(void);      /* CLOCK_REALTIME, comparable across VMs */
uint64_t ivshm__mono_ns(void);     /* CLOCK_MONOTONIC, local waits */
/* How long a decision that lasts the job (connect, which transport
 * reaches a peer) waits for a peer's lease in doubt to be settled */
#define DOUBT_WAIT_NS 1000000000ull
/* One round of a wait for the doubt of a peer's life (slot, gen) to end:
 * false once it has lasted DOUBT_WAIT_NS from the first round (*deadline
 * 0 before it), and at once for a life that outlasted a wait before. */
bool ivshm__doubt_wait(ivshm_region_t *r, uint32_t slot, uint32_t gen,
                       uint64_t *deadline, unsigned *spins);
/* Should lines be taken ahead for writing (ivshm__prefetch_own): has
 * this processor PREFETCHW, or the architecture a write hint? */
bool ivshm__cpu_prefetchw(void);
/* Test seam (tests/unit/test_chan.c): where set, the channel reports each
 * span it would take ahead for writing (ivshm__fbox_own_ahead,
 * ivshm__frag_own_next) here instead of prefetching it; NULL in
 * production. */
extern void (*ivshm__test_own)(const char *from, const char *to);
static inline uint64_t ivshm__ms_to_ns(uint64_t ms)
{
    return ms * 1000000ull;
}
void ivshm__random(void *buf, size_t n);
uint64_t ivshm__proc_start_time(pid_t pid); /* 0 if unknown / gone */
bool ivshm__pid_dead(uint32_t pid, uint64_t start_time);
void ivshm__cpu_relax(void);
void ivshm__backoff(unsigned *spins);

/* region.c */
/* Is [off, off+len) inside the heap described by g (validated geometry)? */
static inline bool ivshm__in_heap(const struct ivshm_geom *g, uint64_t off,
                                  uint64_t len)
{
    uint64_t end = g->heap_off + ((uint64_t)g->chunk_count << g->chunk_shift);
    return off >= g->heap_off && off < end && len <= end - off;
}
ivshm_status_t ivshm__validate_header(const struct ivshm_hdr *h,
                                      uint64_t map_size,
                                      struct ivshm_geom *g);
static inline struct ivshm_hdr *ivshm__hdr(const ivshm_region_t *r)
{
    return (struct ivshm_hdr *)r->base;
}
/* A life ended: a registry slot's release (or its generation moving on),
 * a directory entry leaving READY, a process finding its lease lost, or a
 * forced format. Counted (release) so that a reader whose acquire load
 * finds the count it saw before its own checks of those words knows none
 * of them ended since (K0; docs/channels.md, "One count for the life
 * checks"). */
static inline void ivshm__life_ended(ivshm_region_t *r)
{
    atomic_fetch_add_explicit(&ivshm__hdr(r)->lives_ended, 1,
                              memory_order_release);
}
static inline struct ivshm_reg_slot *ivshm__reg(const ivshm_region_t *r,
                                                uint32_t i)
{
    return (struct ivshm_reg_slot *)((char *)r->base + r->g.reg_off) + i;
}
static inline struct ivshm_job_slot *ivshm__jobs(const ivshm_region_t *r,
                                                 uint32_t i)
{
    return (struct ivshm_job_slot *)((char *)r->base + r->g.job_off) + i;
}
static inline struct ivshm_chunk *ivshm__chunk(const ivshm_region_t *r,
                                               uint32_t i)
{
    return (struct ivshm_chunk *)((char *)r->base + r->g.chunk_tab_off) + i;
}

/* registry.c */
/* What a lease (slot idx, generation gen) is now. DOUBT: a reclaimer holds
 * it for a moment (it may still back off): neither use nor free what the
 * owner lent, wait. */
enum ivshm_proc_state { PROC_GONE = 0, PROC_LIVE = 1, PROC_DOUBT = 2 };
/* Every state; ivshm__proc_state answers the common one inline. */
enum ivshm_proc_state ivshm__proc_state_slow(ivshm_region_t *r, uint32_t idx,
                                             uint32_t gen);
/* Inline: a live lease is one load of its registry word (unchanged while
 * it lives, so a cache hit) and one compare, without a call. A peer record
 * makes the same load through the pointer it keeps (ivshm__owner_state,
 * chan_internal.h), which a send asks per message. */
static inline enum ivshm_proc_state ivshm__proc_state(ivshm_region_t *r,
                                                      uint32_t idx,
                                                      uint32_t gen)
{
    if (idx < r->g.reg_slots &&
        atomic_load(&ivshm__reg(r, idx)->word) == SLOT_WORD(gen, SLOT_ALIVE))
        return PROC_LIVE;
    return ivshm__proc_state_slow(r, idx, gen);
}
/* not provably gone (live or in doubt) */
bool ivshm__proc_live(ivshm_region_t *r, uint32_t idx, uint32_t gen);
/* What a gc may do with another process' lease, word w read from slot s
 * (docs/lifetimes.md): LIVE keep it; DEAD release it (death proven: this
 * VM's pid table, or a claim that expired owning nothing); DOUBT its
 * heartbeat expired but its owner may be paused: keep it, unless an admin
 * forces. *by_pid: the proof is the pid table (no heartbeat re-check). */
enum ivshm_verdict { VERDICT_LIVE, VERDICT_DEAD, VERDICT_DOUBT };
enum ivshm_verdict ivshm__lease_verdict(const ivshm_region_t *r,
                                        struct ivshm_reg_slot *s, uint64_t w,
                                        uint64_t now, bool *by_pid);
/* Claims a free registry slot for this process (reclaim.c's attach). */
ivshm_status_t ivshm__try_claim(ivshm_region_t *r);
/* IVSHM_OK while this process still holds its lease; IVSHM_ERR_LEASE_LOST
 * (once reported, then sticky) after a reclaim took it: from then on the
 * process must not touch region memory it owned. One load when held. */
ivshm_status_t ivshm__lease_check(ivshm_region_t *r);
/* Inline for the same reason as ivshm__proc_state: the held lease is the
 * fast path (every send, every progress pass); the rest is
 * ivshm__lease_check. */
static inline ivshm_status_t ivshm__lease_held(ivshm_region_t *r)
{
    if (!atomic_load_explicit(&r->lease_lost, memory_order_relaxed) &&
        r->attached &&
        atomic_load_explicit(r->own_word, memory_order_acquire) ==
            r->own_alive)
        return IVSHM_OK;
    return ivshm__lease_check(r);
}
ivshm_status_t ivshm__require_attached(const ivshm_region_t *r);

/* alloc.c */
ivshm_status_t ivshm__alloc_owned(ivshm_region_t *r, uint64_t tag,
                                  uint64_t size, uint64_t *off);
/* The same without the full region's explanation (a scan of every lease
 * and chunk): for callers that fall back on NOSPACE at once and drop the
 * message, as the region heap does on every large malloc of a full
 * region. */
ivshm_status_t ivshm__alloc_owned_quiet(ivshm_region_t *r, uint64_t tag,
                                        uint64_t size, uint64_t *off);
unsigned ivshm__free_owned_by(ivshm_region_t *r, uint64_t tag);
/* Gives chunk k the owner to (0: free) if tag still owns it, clearing its
 * run; false if another took it first. The one way a collector releases a
 * chunk. */
bool ivshm__release_chunk(struct ivshm_chunk *k, uint64_t tag, uint64_t to);
/* Moves the chunks of tag (an owner proven dead) to cooling, stamped now. */
unsigned ivshm__cool_owned_by(ivshm_region_t *r, uint64_t tag);
/* Frees cooling chunks whose lease timeout has passed. */
unsigned ivshm__sweep_cooled(ivshm_region_t *r);
/* Has cooling tag's lease timeout passed at now_ms? */
bool ivshm__cool_expired(const ivshm_region_t *r, uint64_t tag,
                         uint64_t now_ms);
ivshm_status_t ivshm__free_tagged(ivshm_region_t *r, uint64_t off,
                                  uint64_t tag);
/* Does owner tag hold every chunk of [off, off+len) (len > 0 or one
 * chunk)? The one ownership check of ranges read from shared memory. */
bool ivshm__range_owned(const ivshm_region_t *r, uint64_t off, uint64_t len,
                        uint64_t tag);

/* quota.c */
/* Slot p's count of region-heap chunks, clamped (it is untrusted). */
uint32_t ivshm__heap_count(const ivshm_region_t *r, struct ivshm_reg_slot *p);
/* Does slot p hold a lease whose blocks still count (alive, or held by a
 * reclaimer that has not freed them yet)? A claiming slot's count is not
 * zeroed yet. */
bool ivshm__lease_counts_heap(struct ivshm_reg_slot *p);

/* inspect.c: the messages of a full region or registry */
/* Appends to buf (a NUL-terminated string of cap bytes) why the region is
 * full: who holds its heap in region-heap blocks, by job and process, the
 * leases in doubt that hold chunks, and what to do about each; nothing
 * when neither holds any. */
void ivshm__full_region_cause(ivshm_region_t *r, char *buf, size_t cap);
/* Blanks the identity of p (pid, VM, jobs, host, command): a claiming
 * slot's fields may still be the last life's until the claim wrote them
 * (release_slot writes none). */
void ivshm__proc_info_unknown(ivshm_proc_info_t *p);
/* Appends the leases in doubt (with holding: those that hold chunks, and
 * how much) to buf, at most a few; returns how many there are. */
unsigned ivshm__describe_doubts(ivshm_region_t *r, bool holding, char *buf,
                                size_t cap);

/* job.c */
/* Releases jobs without live members, their areas freed (cool: cooled,
 * after a forced release of members); returns how many. */
unsigned ivshm__job_gc(ivshm_region_t *r, bool cool, unsigned *chunks);
uint32_t ivshm__job_gen(const ivshm_job_t *j);
/* Reads job slot i's area once and checks that job (i, gen) owns every
 * chunk of it. */
ivshm_status_t ivshm__job_area(ivshm_region_t *r, uint32_t i, uint32_t gen,
                               uint64_t *off, uint64_t *size);
bool ivshm__is_member(struct ivshm_reg_slot *p, uint32_t idx, uint32_t gen);
/* Members of job (idx, gen) whose lease is alive or in doubt (job gc's
 * count; `ivshm info` shows it). */
unsigned ivshm__job_members(ivshm_region_t *r, uint32_t idx, uint32_t gen);

#pragma GCC visibility pop

#endif
