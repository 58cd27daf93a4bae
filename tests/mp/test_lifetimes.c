/*
 * Lifetimes of region memory (docs/lifetimes.md), through real processes
 * sharing one /dev/shm region; a "VM" is a process with its own
 * IVSHM_VM_ID. A lease whose heartbeat expired is only in doubt: its owner
 * may be paused, so its memory is never handed out on that alone. A lease
 * is released on proof of death (a gc of the owner's VM finds its pid
 * gone, an admin's `ivshm gc --force`, the owner's detach); the chunks of
 * a dead owner cool for one lease timeout before anybody takes them, and
 * every chunk is zeroed before its new owner gets it.
 */
#define _GNU_SOURCE /* unshare */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "internal.h"
#include "../testutil.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define MIB (1u << 20)
#define REGION_SIZE (16u * MIB)
#define LEASE_MS 300u
#define PAST_LEASE_US (3 * LEASE_MS * 1000u) /* well past the lease */
#define MAX_TAKEN 4096

static char path[256];

static int setup_lease(uint32_t lease_ms)
{
    tu_region_path(path, sizeof(path), "life");
    return tu_format(path, REGION_SIZE, 8, lease_ms) == IVSHM_OK ? 0 : -1;
}
static int setup(void **state)
{
    (void)state;
    return setup_lease(LEASE_MS);
}
/* long enough that taking every chunk surely ends inside it, even on a
 * loaded machine; the test does not wait it out (it ages the stamps) */
#define COOL_LEASE_MS 10000u
static int setup_cool(void **state)
{
    (void)state;
    return setup_lease(COOL_LEASE_MS);
}

static int teardown(void **state)
{
    (void)state;
    unsetenv(IVSHM_ENV_VM_ID);
    unlink(path);
    return 0;
}

/* Opens and attaches the region as VM vm (NULL: this machine's id). */
static ivshm_region_t *open_as(const char *vm)
{
    if (vm)
        setenv(IVSHM_ENV_VM_ID, vm, 1);
    else
        unsetenv(IVSHM_ENV_VM_ID);
    ivshm_region_t *r;
    if (ivshm_region_open(tu_uri(path), 0, &r) != IVSHM_OK)
        return NULL;
    unsetenv(IVSHM_ENV_VM_ID);
    if (ivshm_attach(r) != IVSHM_OK) {
        ivshm_region_close(r);
        return NULL;
    }
    return r;
}

/* ---- a child process driven through two pipes ---- */

struct child {
    pid_t pid;
    int to, from; /* our ends */
};

/* What a child reports once it holds its memory. */
struct holding {
    ivshm_identity_t id;
    uint64_t off, len;
    uint32_t job_idx;
};

typedef int (*child_fn)(ivshm_region_t *r, int in, int out);

/* The library step at which the next child started stops itself (SIGSTOP,
 * as a paused VM), NULL: none. */
static const char *child_stop_step;

static void stop_at_step(const char *step)
{
    if (child_stop_step && strcmp(step, child_stop_step) == 0) {
        child_stop_step = NULL;
        raise(SIGSTOP);
    }
}

static void start(struct child *c, const char *vm, child_fn fn)
{
    int down[2], up[2];
    assert_int_equal(pipe(down), 0);
    assert_int_equal(pipe(up), 0);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(down[1]);
        close(up[0]);
        if (child_stop_step)
            ivshm__test_step = stop_at_step;
        ivshm_region_t *r = open_as(vm);
        _exit(r ? fn(r, down[0], up[1]) : 90);
    }
    close(down[0]);
    close(up[1]);
    c->to = down[1];
    c->from = up[0];
}

static void get_holding(struct child *c, struct holding *h)
{
    assert_int_equal(read(c->from, h, sizeof(*h)), (ssize_t)sizeof(*h));
}

static void go(struct child *c)
{
    assert_int_equal(write(c->to, "g", 1), 1);
}

static int wait_go(int in)
{
    char x;
    return read(in, &x, 1) == 1 ? 0 : 91;
}

static int finish(struct child *c)
{
    int ws;
    assert_int_equal(waitpid(c->pid, &ws, 0), c->pid);
    close(c->to);
    close(c->from);
    return ws;
}

static uint32_t chunk_size(ivshm_region_t *r)
{
    ivshm_region_info_t ri;
    assert_int_equal(ivshm_region_info(r, &ri), IVSHM_OK);
    return ri.chunk_size;
}

/* Takes every chunk the allocator gives, one at a time, and fills each
 * with fill; returns how many. */
static unsigned take_all(ivshm_region_t *r, uint64_t *offs, int fill)
{
    uint32_t cs = chunk_size(r);
    unsigned char *base = ivshm_region_base(r);
    unsigned n = 0;
    while (n < MAX_TAKEN && ivshm_alloc(r, cs, &offs[n]) == IVSHM_OK) {
        if (fill >= 0)
            memset(base + offs[n], fill, cs);
        n++;
    }
    return n;
}

static bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

/* fails if any taken chunk lies in [off, +len) */
static void expect_none_inside(const uint64_t *offs, unsigned n, uint32_t cs,
                               uint64_t off, uint64_t len, const char *what)
{
    for (unsigned i = 0; i < n; i++)
        if (overlaps(offs[i], cs, off, len))
            fail_msg("%s: chunk at %llu was handed out (the memory "
                     "[%llu, +%llu) of a lease not proven dead)",
                     what, (unsigned long long)offs[i],
                     (unsigned long long)off, (unsigned long long)len);
}

static void expect_filled(ivshm_region_t *r, const uint64_t *offs,
                          unsigned n, int fill)
{
    uint32_t cs = chunk_size(r);
    const unsigned char *base = ivshm_region_base(r);
    for (unsigned i = 0; i < n; i++)
        for (uint32_t k = 0; k < cs; k++)
            if (base[offs[i] + k] != fill)
                fail_msg("the bystander's chunk at %llu was written at +%u "
                         "(0x%02x)",
                         (unsigned long long)offs[i], k, base[offs[i] + k]);
}

/* ---- item 1: a paused owner resumes into memory that is still its own --- */

/* Holds 4 MiB with its lease thread running; stopped by the parent; when
 * resumed, writes the whole block with plain stores (no library call in
 * between), then checks that its lease simply goes on. */
static int paused_owner(ivshm_region_t *r, int in, int out)
{
    struct holding h = {.len = 4 * MIB};
    if (ivshm_lease_start_thread(r) != IVSHM_OK ||
        ivshm_alloc(r, h.len, &h.off) != IVSHM_OK ||
        ivshm_self_identity(r, &h.id) != IVSHM_OK)
        return 10;
    unsigned char *p = (unsigned char *)ivshm_region_base(r) + h.off;
    memset(p, 0xa1, h.len);
    if (write(out, &h, sizeof(h)) != sizeof(h) || wait_go(in))
        return 11;
    memset(p, 0xa2, h.len); /* the stores a paused rank makes on resuming */
    usleep(LEASE_MS * 1000); /* the lease thread renews meanwhile */
    /* nothing was taken, so nothing was lost: the lease goes on */
    if (ivshm_lease_renew(r) != IVSHM_OK ||
        ivshm_region_owned(r, &h.id, h.off, h.len) != IVSHM_OK)
        return 12;
    for (uint64_t k = 0; k < h.len; k++)
        if (p[k] != 0xa2)
            return 13;
    if (ivshm_free(r, h.off) != IVSHM_OK)
        return 14;
    return ivshm_detach(r) == IVSHM_OK ? 0 : 15;
}

static void test_paused_owner_keeps_memory(void **state)
{
    (void)state;
    struct child a;
    struct holding h;
    start(&a, "vm-a", paused_owner);
    get_holding(&a, &h);
    kill(a.pid, SIGSTOP);
    ivshm_region_t *b = open_as("vm-b");
    assert_non_null(b);
    usleep(PAST_LEASE_US);
    ivshm_gc_stats_t gs;
    assert_int_equal(ivshm_gc(b, &gs), IVSHM_OK);
    uint64_t *offs = calloc(MAX_TAKEN, sizeof(*offs));
    unsigned n = take_all(b, offs, 0x5b);
    assert_true(n > 0);
    /* the owner's memory is still its own, for every peer that checks */
    ivshm_status_t owned = ivshm_region_owned(b, &h.id, h.off, h.len);
    kill(a.pid, SIGCONT);
    go(&a);
    int ws = finish(&a);
    expect_filled(b, offs, n, 0x5b);
    assert_int_equal(owned, IVSHM_OK);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail_msg("the resumed owner ended with 0x%x (its lease did not go "
                 "on)", ws);
    expect_none_inside(offs, n, chunk_size(b), h.off, h.len, "paused owner");
    free(offs);
    ivshm_region_close(b);
}

/* ---- item 2: a paused rank 0's collective memory (library level) ---- */

/* Creates a job (its area) and holds 256 KiB of its own chunks, the place
 * coll ivshmem puts a communicator's slots (comm rank 0's chunks). */
static int paused_rank0(ivshm_region_t *r, int in, int out)
{
    struct holding h = {.len = 256 * 1024};
    ivshm_job_t *j;
    if (ivshm_job_join(r, "life-coll", 65536, &j) != IVSHM_OK ||
        ivshm_alloc(r, h.len, &h.off) != IVSHM_OK ||
        ivshm_self_identity(r, &h.id) != IVSHM_OK)
        return 20;
    h.job_idx = ivshm_job_index(j);
    if (write(out, &h, sizeof(h)) != sizeof(h) || wait_go(in))
        return 21;
    return 0;
}

/* A child in vm-a that made a job and holds chunks (paused_rank0), now
 * stopped as a paused VM; returns this process' view as vm-b. */
static ivshm_region_t *pause_rank0(struct child *a, struct holding *h)
{
    start(a, "vm-a", paused_rank0);
    get_holding(a, h);
    kill(a->pid, SIGSTOP);
    ivshm_region_t *b = open_as("vm-b");
    assert_non_null(b);
    return b;
}

/* Resumes a stopped child, lets it finish; its wait status. */
static int resume(struct child *a)
{
    kill(a->pid, SIGCONT);
    go(a);
    return finish(a);
}

static void test_paused_rank0_collective_memory(void **state)
{
    (void)state;
    struct child a;
    struct holding h;
    start(&a, "vm-a", paused_rank0);
    get_holding(&a, &h);
    ivshm_region_t *b = open_as("vm-b");
    assert_non_null(b);
    ivshm_job_t *jb;
    assert_int_equal(ivshm_job_join(b, "life-coll", 65536, &jb), IVSHM_OK);
    uint64_t area = ivshm_job_area_off(jb), area_len = ivshm_job_area_size(jb);
    kill(a.pid, SIGSTOP);
    usleep(PAST_LEASE_US);
    ivshm_job_leave(jb); /* the paused rank is the job's last member */
    ivshm_region_t *c = open_as("vm-c");
    assert_non_null(c);
    assert_int_equal(ivshm_gc(c, NULL), IVSHM_OK);
    uint64_t *offs = calloc(MAX_TAKEN, sizeof(*offs));
    unsigned n = take_all(c, offs, 0x6c);
    assert_true(n > 0);
    uint32_t cs = chunk_size(c);
    expect_none_inside(offs, n, cs, h.off, h.len, "rank 0's slots");
    expect_none_inside(offs, n, cs, area, area_len, "the job's area");
    /* a rank that checks the owner before a slot write still finds it */
    assert_int_equal(ivshm_region_owned(b, &h.id, h.off, h.len), IVSHM_OK);
    kill(a.pid, SIGCONT);
    go(&a);
    int ws = finish(&a);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    free(offs);
    ivshm_region_close(c);
    ivshm_region_close(b);
}

/* A job whose only member is in doubt at the moment of a gc (a paused
 * VM's rank, whose lease a collector holds in "reclaiming" between its
 * claim and its back-off) keeps its area: a reclaiming slot is still its
 * life's, and that life may go on. Before, the job scan counted alive
 * slots only, so one scan in that window freed the job's directory and
 * area under a member that resumed into them. */
static void test_job_of_reclaiming_member_kept(void **state)
{
    (void)state;
    struct child a;
    struct holding h;
    ivshm_region_t *b = pause_rank0(&a, &h);
    struct ivshm_reg_slot *sa = ivshm__reg(b, h.id.slot);
    _Atomic uint64_t *job = &ivshm__jobs(b, h.job_idx)->word;
    uint64_t alive = atomic_load(&sa->word), jw = atomic_load(job);
    assert_int_equal(JOB_STATE(jw), SLOT_ALIVE);
    /* a collector's claim on A's lease, not yet backed off; its take
     * stamps the heartbeat (stamp_take), so no other gc finishes it as a
     * dead collector's however slow this machine is */
    uint64_t held = SLOT_WORD(SLOT_GEN(alive), SLOT_RECLAIMING);
    atomic_store(&sa->word, held);
    atomic_store(&sa->heartbeat_ns, ivshm__now_ns());
    ivshm_status_t st = ivshm_gc(b, NULL);
    uint64_t after = atomic_load(job);
    /* it backs off */
    assert_true(atomic_compare_exchange_strong(&sa->word, &held, alive));
    assert_int_equal(st, IVSHM_OK);
    if (after != jw)
        fail_msg("a gc freed the job of a member in doubt (job word %#llx "
                 "-> %#llx)", (unsigned long long)jw,
                 (unsigned long long)after);
    int ws = resume(&a);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    ivshm_region_close(b);
}

/* ---- cooling and scrub: the chunks of a process killed holding them ---- */

static const char SECRET[] = "secret-marker-of-a-previous-owner";

static void mark(unsigned char *p, uint64_t len)
{
    for (uint64_t k = 0; k + sizeof(SECRET) <= len; k += 4096)
        memcpy(p + k, SECRET, sizeof(SECRET));
}

/* Holds 1 MiB marked with the secret until it is killed. */
static int killed_holder(ivshm_region_t *r, int in, int out)
{
    struct holding h = {.len = MIB};
    if (ivshm_alloc(r, h.len, &h.off) != IVSHM_OK)
        return 30;
    mark((unsigned char *)ivshm_region_base(r) + h.off, h.len);
    if (write(out, &h, sizeof(h)) != sizeof(h))
        return 31;
    wait_go(in);
    return 32;
}

/* Allocates blocks of 64 KiB .. 4 MiB, marks and frees them, and detaches
 * (its own frees and its own detach: no cooling). */
static int freeing_owner(ivshm_region_t *r, int in, int out)
{
    (void)in;
    for (uint64_t len = 64 * 1024; len <= 4 * MIB; len *= 4) {
        uint64_t off;
        if (ivshm_alloc(r, len, &off) != IVSHM_OK)
            return 40;
        mark((unsigned char *)ivshm_region_base(r) + off, len);
        if (ivshm_free(r, off) != IVSHM_OK)
            return 41;
    }
    uint64_t kept; /* alive at detach, as a heap block at MPI_Finalize */
    if (ivshm_alloc(r, 2 * MIB, &kept) != IVSHM_OK)
        return 42;
    mark((unsigned char *)ivshm_region_base(r) + kept, 2 * MIB);
    struct holding h = {.off = kept, .len = 2 * MIB};
    if (write(out, &h, sizeof(h)) != sizeof(h))
        return 43;
    return ivshm_detach(r) == IVSHM_OK ? 0 : 44;
}

/* A child of this VM that held 1 MiB and was killed (h: what it held);
 * returns its pid. */
static pid_t killed_holding(struct holding *h)
{
    struct child a;
    start(&a, NULL, killed_holder);
    get_holding(&a, h);
    kill(a.pid, SIGKILL);
    finish(&a);
    return a.pid;
}

/* A process of this VM killed holding chunks is reclaimed at once (its pid
 * is gone), but its chunks are handed out only after one lease timeout. */
static void test_dead_owner_chunks_cool(void **state)
{
    (void)state;
    struct holding h;
    killed_holding(&h);
    ivshm_region_t *b = open_as(NULL);
    assert_non_null(b);
    double t0 = tu_now_s();
    ivshm_gc_stats_t gs;
    assert_int_equal(ivshm_gc(b, &gs), IVSHM_OK);
    assert_int_equal(gs.procs_reclaimed, 1); /* by pid, not by timeout */
    uint64_t *offs = calloc(MAX_TAKEN, sizeof(*offs));
    unsigned n = take_all(b, offs, -1);
    if (tu_now_s() - t0 >= COOL_LEASE_MS / 1000.0)
        fail_msg("taking the free chunks outlasted the cooling period: "
                 "cannot judge");
    expect_none_inside(offs, n, chunk_size(b), h.off, h.len,
                       "a dead owner's chunks while they cool");
    /* as if the cooling period passed: each stamp one period older */
    uint32_t first = (uint32_t)((h.off - b->g.heap_off) >> b->g.chunk_shift);
    for (uint32_t c = first; c < first + h.len / chunk_size(b); c++) {
        _Atomic uint64_t *owner = &ivshm__chunk(b, c)->owner;
        uint64_t t = atomic_load(owner);
        assert_int_equal(OWNER_KIND(t), OWNER_COOL);
        atomic_store(owner, COOL_TAG(COOL_MS(t) - COOL_LEASE_MS - 1));
    }
    unsigned more = take_all(b, offs + n, -1);
    assert_true(more * (uint64_t)chunk_size(b) >= h.len);
    bool got = false;
    for (unsigned i = n; i < n + more; i++)
        got |= overlaps(offs[i], chunk_size(b), h.off, h.len);
    assert_true(got); /* after the cooling period they are free again */
    free(offs);
    ivshm_region_close(b);
}

/* ---- item 6: memory that changes hands is clean ---- */

static void test_memory_changes_hands_clean(void **state)
{
    (void)state;
    struct child a, d;
    struct holding h;
    start(&a, NULL, freeing_owner);
    get_holding(&a, &h);
    int ws = finish(&a);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    start(&d, NULL, killed_holder);
    get_holding(&d, &h);
    kill(d.pid, SIGKILL);
    finish(&d);
    ivshm_region_t *b = open_as(NULL);
    assert_non_null(b);
    assert_int_equal(ivshm_gc(b, NULL), IVSHM_OK);
    usleep(LEASE_MS * 1000 + 100 * 1000); /* past the killed one's cooling */
    uint64_t *offs = calloc(MAX_TAKEN, sizeof(*offs));
    unsigned n = take_all(b, offs, -1);
    ivshm_region_info_t ri;
    assert_int_equal(ivshm_region_info(b, &ri), IVSHM_OK);
    assert_int_equal(n, ri.chunk_count); /* every chunk changed hands */
    const unsigned char *base = ivshm_region_base(b);
    for (unsigned i = 0; i < n; i++)
        for (uint32_t k = 0; k < ri.chunk_size; k++)
            if (base[offs[i] + k] != 0)
                fail_msg("chunk at %llu holds a previous owner's byte at "
                         "+%u ('%c')",
                         (unsigned long long)offs[i], k, base[offs[i] + k]);
    free(offs);
    ivshm_region_close(b);
}

/* ---- a claim paused between its slot CAS and its publish ---- */

/* Attaches (stopping itself inside the claim), then reports its lease. */
static int paused_claimer(ivshm_region_t *r, int in, int out)
{
    struct holding h = {0};
    if (ivshm_self_identity(r, &h.id) != IVSHM_OK)
        return 60;
    if (write(out, &h, sizeof(h)) != sizeof(h) || wait_go(in))
        return 61;
    return ivshm_lease_renew(r) == IVSHM_OK ? 0 : 62;
}

/* A claim that expired is in doubt like any lease (its claimer may be
 * paused): were it released, the claimer's identity stores on resuming
 * would land in the slot of the lease that took it next. */
static void test_paused_claim_keeps_slot(void **state)
{
    (void)state;
    ivshm_region_t *b = open_as("vm-b");
    assert_non_null(b);
    struct child a;
    child_stop_step = "attach-claim";
    start(&a, "vm-a", paused_claimer);
    child_stop_step = NULL;
    int ws;
    assert_int_equal(waitpid(a.pid, &ws, WUNTRACED), a.pid);
    assert_true(WIFSTOPPED(ws));
    ivshm_gc_stats_t gs;
    /* the claim stamped its clock after R0 (a gc would start it where it
     * read 0) */
    assert_int_equal(ivshm_gc(b, &gs), IVSHM_OK);
    usleep(PAST_LEASE_US);
    assert_int_equal(ivshm_gc(b, &gs), IVSHM_OK);
    ivshm_region_t *c = open_as("vm-c");
    assert_non_null(c);
    ivshm_job_t *jc;
    assert_int_equal(ivshm_job_join(c, "life-claim", 65536, &jc), IVSHM_OK);
    ivshm_identity_t cid;
    assert_int_equal(ivshm_self_identity(c, &cid), IVSHM_OK);
    kill(a.pid, SIGCONT);
    struct holding h;
    get_holding(&a, &h);
    go(&a);
    ws = finish(&a);
    struct ivshm_reg_slot *s = ivshm__reg(b, cid.slot);
    bool in_job = false;
    for (int k = 0; k < IVSHM_JOBS_PER_PROC; k++)
        in_job |= atomic_load(&s->jobs[k]) != 0;
    if (ivshm_peer_locality(b, &cid) != IVSHM_PEER_OTHER_VM || !in_job)
        fail_msg("the resumed claimer wrote into the slot of the lease that "
                 "took it after gc (slot %u: pid %u, vm %016llx, in its job: "
                 "%s; the owner is pid %u, vm %016llx)",
                 cid.slot, s->pid, (unsigned long long)s->vm_id,
                 in_job ? "yes" : "no", cid.pid,
                 (unsigned long long)cid.vm_id);
    assert_int_equal(gs.procs_reclaimed, 0);
    assert_int_equal(gs.procs_in_doubt, 1);
    assert_true(h.id.slot != cid.slot);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    ivshm_job_leave(jc);
    ivshm_region_close(c);
    ivshm_region_close(b);
}

/* ---- a collector's late write to a chunk that changed hands ---- */

static ivshm_region_t *taker; /* takes the chunk inside the collector's step */
static uint64_t taken_off;
static ivshm_status_t taken_st = IVSHM_ERR_INVAL;

/* Runs in the collector between its look at the chunk and its release: as
 * another collector frees the orphan and a new owner takes the chunk. */
static void take_during_release(const char *step)
{
    if (strcmp(step, "chunk-release") != 0 || !taker)
        return;
    ivshm_region_t *t = taker;
    taker = NULL;
    struct ivshm_chunk *k = ivshm__chunk(t, 0);
    uint64_t tag = atomic_load(&k->owner);
    atomic_store(&k->run, 0);
    atomic_compare_exchange_strong(&k->owner, &tag, 0);
    taken_st = ivshm_alloc(t, chunk_size(t), &taken_off);
}

static void test_late_release_spares_new_owner(void **state)
{
    (void)state;
    ivshm_region_t *b = open_as("vm-b"), *c = open_as("vm-c");
    assert_non_null(b);
    assert_non_null(c);
    /* chunk 0 left by a job whose slot is free (an orphan) */
    struct ivshm_chunk *k = ivshm__chunk(b, 0);
    atomic_store(&k->run, 1);
    atomic_store(&k->owner, OWNER_TAG(OWNER_JOB, 0, 0));
    taker = c;
    ivshm__test_step = take_during_release;
    ivshm_status_t gst = ivshm_gc(b, NULL);
    ivshm__test_step = NULL;
    assert_int_equal(gst, IVSHM_OK);
    assert_null(taker); /* the step ran */
    assert_int_equal(taken_st, IVSHM_OK);
    assert_int_equal(taken_off, c->g.heap_off);
    uint64_t run = atomic_load(&k->run);
    ivshm_status_t fst = ivshm_free(c, taken_off);
    if (run != 1 || fst != IVSHM_OK)
        fail_msg("the collector's late release cleared the new owner's run "
                 "(run %llu; its free: %s)",
                 (unsigned long long)run, ivshm_last_error());
    ivshm_region_close(c);
    ivshm_region_close(b);
}

/* ---- a collector overtaken in a release by another ---- */

/* A collector takes the slot of a killed process and, while it releases
 * it, another collector runs gc and a new process attaches (the lowest
 * free slot). Where the first stalled for two lease timeouts, the other
 * finishes the release and the new process may take the slot: the first
 * must leave the new owner alone. */

/* A heartbeat past two of r's lease timeouts. */
static uint64_t old_stamp(const ivshm_region_t *r)
{
    return ivshm__now_ns() - 3ull * r->g.lease_timeout_ms * 1000000u;
}

static const char *overtake_at;   /* the release step where it happens */
static bool overtake_stalled;     /* the first stalled two timeouts there */
static ivshm_region_t *finisher;  /* the other collector */
static ivshm_region_t *successor; /* the new process */
static uint32_t stalled_slot;
static unsigned finished;         /* the other collector's reclaims */

static void overtake(const char *step)
{
    if (!finisher || strcmp(step, overtake_at) != 0)
        return;
    ivshm_region_t *f = finisher;
    finisher = NULL;
    /* a stall ages a stamp; a heartbeat of 0 stays 0 */
    _Atomic uint64_t *hb = &ivshm__reg(f, stalled_slot)->heartbeat_ns;
    if (overtake_stalled && atomic_load(hb) != 0)
        atomic_store(hb, old_stamp(f));
    ivshm_gc_stats_t gs;
    assert_int_equal(ivshm_gc(f, &gs), IVSHM_OK);
    finished = gs.procs_reclaimed;
    successor = open_as(NULL);
    assert_non_null(successor);
}

struct overtaken {
    ivshm_region_t *b, *c;    /* the first collector, the other */
    struct ivshm_reg_slot *s; /* the slot released */
    uint32_t gen;             /* its owner's generation */
};

/* The dead child's slot 0 (its owner killed long ago: its last heartbeat
 * old) released by b, overtaken at step `at`. */
static struct overtaken overtaken_release(const char *at, bool stalled)
{
    struct overtaken o;
    struct holding h;
    pid_t dead = killed_holding(&h);
    o.b = open_as(NULL);
    o.c = open_as(NULL);
    assert_non_null(o.b);
    assert_non_null(o.c);
    stalled_slot = o.b->g.reg_slots;
    for (uint32_t i = 0; i < o.b->g.reg_slots; i++)
        if (ivshm__reg(o.b, i)->pid == (uint32_t)dead)
            stalled_slot = i;
    assert_int_equal(stalled_slot, 0); /* the first claim */
    o.s = ivshm__reg(o.b, stalled_slot);
    o.gen = SLOT_GEN(atomic_load(&o.s->word));
    atomic_store(&o.s->heartbeat_ns, old_stamp(o.b));
    overtake_at = at;
    overtake_stalled = stalled;
    finisher = o.c;
    finished = 0;
    ivshm__test_step = overtake;
    ivshm_gc_stats_t gs;
    ivshm_status_t gst = ivshm_gc(o.b, &gs);
    ivshm__test_step = NULL;
    assert_int_equal(gst, IVSHM_OK);
    assert_null(finisher); /* the step ran */
    return o;
}

/* The new process holds its lease and memory; all closed. */
static void close_overtaken(struct overtaken *o)
{
    assert_int_equal(ivshm_lease_renew(successor), IVSHM_OK);
    uint64_t off;
    assert_int_equal(ivshm_alloc(successor, chunk_size(successor), &off),
                     IVSHM_OK);
    assert_int_equal(ivshm_free(successor, off), IVSHM_OK);
    ivshm_region_close(successor);
    successor = NULL;
    ivshm_region_close(o->c);
    ivshm_region_close(o->b);
}

/* Overtaken after a stall at step `at`: the other collector finished the
 * release, the new process took the slot, and the first went on. */
static void overtaken_spares_successor(const char *at)
{
    struct overtaken o = overtaken_release(at, true);
    assert_int_equal(finished, 1);
    assert_int_equal(successor->slot, stalled_slot);
    uint64_t w = atomic_load(&o.s->word);
    if (w != SLOT_WORD(o.gen + 1, SLOT_ALIVE) ||
        atomic_load(&o.s->heartbeat_ns) == 0 ||
        o.s->pid != (uint32_t)getpid())
        fail_msg("the overtaken collector's release (at %s) wrote over the "
                 "new owner's slot (word %#llx, want %#llx; heartbeat %llu, "
                 "pid %u)",
                 at, (unsigned long long)w,
                 (unsigned long long)SLOT_WORD(o.gen + 1, SLOT_ALIVE),
                 (unsigned long long)atomic_load(&o.s->heartbeat_ns),
                 (unsigned)o.s->pid);
    close_overtaken(&o);
}

/* after its chunks, before it read the heartbeat */
static void test_overtaken_after_chunks(void **state)
{
    (void)state;
    overtaken_spares_successor("slot-release");
}

/* after its check of the word, before its CAS of the heartbeat */
static void test_overtaken_before_heartbeat(void **state)
{
    (void)state;
    overtaken_spares_successor("slot-held");
}

/* Met at step `at` (after a stall, or none), the other collector did not
 * finish the release: the new process took another slot, and the first
 * collector freed its own. */
static void overtake_not_finished(const char *at, bool stalled)
{
    struct overtaken o = overtaken_release(at, stalled);
    assert_int_equal(finished, 0);
    assert_true(successor->slot != stalled_slot);
    assert_int_equal(atomic_load(&o.s->word), SLOT_WORD(o.gen + 1, SLOT_FREE));
    close_overtaken(&o);
}

/* The take stamps the heartbeat: though the owner's last one is old, the
 * other collector does not finish a release that did not stall (a lease
 * of 10 s: the release surely takes less than two, even on a loaded
 * machine). */
static void test_take_stamps_heartbeat(void **state)
{
    (void)state;
    overtake_not_finished("slot-release", false);
}

/* Past its heartbeat's zero no other collector finishes the release at
 * once (it starts the clock, as for a claim, and would finish two
 * timeouts later), and the first frees the slot. */
static void test_release_past_heartbeat_not_finished(void **state)
{
    (void)state;
    overtake_not_finished("slot-free", true);
}

/* A claim starts its own clock: a free slot's heartbeat may be a clock a
 * gc started for its release, long ago. */
static uint64_t claim_hb; /* the claiming slot's heartbeat at the step */
static ivshm_region_t *claim_watch;

static void watch_claim(const char *step)
{
    if (strcmp(step, "attach-claim") != 0 || !claim_watch)
        return;
    claim_hb = atomic_load(&ivshm__reg(claim_watch, 1)->heartbeat_ns);
    claim_watch = NULL;
}

static void test_claim_starts_clock(void **state)
{
    (void)state;
    ivshm_region_t *b = open_as(NULL); /* slot 0 */
    assert_non_null(b);
    struct ivshm_reg_slot *s = ivshm__reg(b, 1);
    assert_int_equal(SLOT_STATE(atomic_load(&s->word)), SLOT_FREE);
    atomic_store(&s->heartbeat_ns, old_stamp(b)); /* a clock left behind */
    uint64_t t0 = ivshm__now_ns();
    claim_watch = b;
    ivshm__test_step = watch_claim;
    ivshm_region_t *c = open_as(NULL); /* slot 1 */
    ivshm__test_step = NULL;
    assert_non_null(c);
    assert_null(claim_watch); /* the step ran */
    assert_int_equal(c->slot, 1);
    if (claim_hb < t0)
        fail_msg("a claim past its R0 kept a heartbeat %llu ms older than "
                 "the claim: it reads in doubt before it stamps it",
                 (unsigned long long)((t0 - claim_hb) / 1000000u));
    ivshm_region_close(c);
    ivshm_region_close(b);
}

/* A releaser that died between its heartbeat's zero and its free: gc
 * starts the slot's clock and finishes it two timeouts later. */
static void test_release_died_past_heartbeat(void **state)
{
    (void)state;
    struct holding h;
    killed_holding(&h);
    ivshm_region_t *b = open_as(NULL);
    assert_non_null(b);
    struct ivshm_reg_slot *s = ivshm__reg(b, 0); /* the first claim */
    uint64_t w = atomic_load(&s->word);
    assert_int_equal(SLOT_STATE(w), SLOT_ALIVE);
    uint32_t gen = SLOT_GEN(w);
    atomic_store(&s->word, SLOT_WORD(gen, SLOT_RECLAIMING));
    atomic_store(&s->heartbeat_ns, 0);
    ivshm_gc_stats_t gs;
    assert_int_equal(ivshm_gc(b, &gs), IVSHM_OK);
    assert_int_equal(gs.procs_reclaimed, 0);
    assert_true(atomic_load(&s->heartbeat_ns) != 0); /* the clock */
    atomic_store(&s->heartbeat_ns, old_stamp(b));
    assert_int_equal(ivshm_gc(b, &gs), IVSHM_OK);
    assert_int_equal(gs.procs_reclaimed, 1);
    assert_int_equal(atomic_load(&s->word), SLOT_WORD(gen + 1, SLOT_FREE));
    ivshm_region_close(b);
}

/* ---- the admin's proof: `ivshm gc --force`, and attach's message ---- */

/* Holds 1 MiB; once resumed after the admin released its lease, its next
 * call must say the lease is lost (it was declared dead: it must stop). */
static int declared_dead(ivshm_region_t *r, int in, int out)
{
    struct holding h = {.len = MIB};
    if (ivshm_alloc(r, h.len, &h.off) != IVSHM_OK ||
        ivshm_self_identity(r, &h.id) != IVSHM_OK)
        return 50;
    if (write(out, &h, sizeof(h)) != sizeof(h) || wait_go(in))
        return 51;
    uint64_t off;
    return ivshm_alloc(r, 4096, &off) == IVSHM_ERR_LEASE_LOST ? 0 : 52;
}

/* Runs the real tool: `ivshm gc [--force] --region URI`; its output. */
static void run_gc_tool(bool force, char *out, size_t len)
{
    const char *top = getenv("top_builddir");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s/libivshm/tools/ivshm' gc %s--region '%s'",
             top ? top : ".", force ? "--force " : "", tu_uri(path));
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    assert_int_equal(pclose(f), 0);
}

static void test_gc_force_releases_doubt(void **state)
{
    (void)state;
    struct child a;
    struct holding h;
    start(&a, "vm-a", declared_dead);
    get_holding(&a, &h);
    kill(a.pid, SIGSTOP);
    usleep(PAST_LEASE_US);
    char out[2048], want[256];
    run_gc_tool(false, out, sizeof(out));
    if (!strstr(out, "kept 1 leases in doubt") || !strstr(out, "--force"))
        fail_msg("plain gc: a lease in doubt not kept and named:\n%s", out);
    run_gc_tool(true, out, sizeof(out));
    snprintf(want, sizeof(want),
             "released lease in doubt: slot %u, vm %016llx, pid %u, "
             "heartbeat ",
             h.id.slot, (unsigned long long)h.id.vm_id, h.id.pid);
    const char *at = strstr(out, want);
    if (!at)
        fail_msg("gc --force did not name the lease it released (%s):\n%s",
                 want, out);
    /* the owner's heartbeat's age, not that of the collector's stamp */
    long long age = strtoll(at + strlen(want), NULL, 10);
    if (age < (long long)LEASE_MS)
        fail_msg("gc --force reported heartbeat %lld ms ago, not the "
                 "owner's (more than %u ms):\n%s", age, LEASE_MS, out);
    ivshm_region_t *b = open_as("vm-b");
    assert_non_null(b);
    assert_int_equal(ivshm_region_owned(b, &h.id, h.off, h.len),
                     IVSHM_ERR_PEER_DEAD);
    ivshm_region_info_t ri;
    assert_int_equal(ivshm_region_info(b, &ri), IVSHM_OK);
    assert_int_equal(ri.chunks_cooling, h.len / ri.chunk_size);
    kill(a.pid, SIGCONT);
    go(&a);
    int ws = finish(&a);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail_msg("the released owner ended with 0x%x (not told its lease "
                 "was lost)", ws);
    ivshm_region_close(b);
}

/* A job whose every member the admin's forced gc released: a member that
 * was only paused may resume and copy into the job's area, so the area
 * cools like the members' own chunks instead of being handed out at once. */
static void test_forced_job_area_cools(void **state)
{
    (void)state;
    struct child a;
    struct holding h;
    ivshm_region_t *b = pause_rank0(&a, &h);
    ivshm_job_info_t ji;
    assert_int_equal(ivshm_region_job(b, h.job_idx, &ji), IVSHM_OK);
    usleep(PAST_LEASE_US);
    ivshm_gc_stats_t gs;
    assert_int_equal(ivshm_gc_force(b, NULL, NULL, &gs), IVSHM_OK);
    assert_int_equal(gs.procs_reclaimed, 1);
    assert_int_equal(gs.jobs_reclaimed, 1);
    uint32_t cs = chunk_size(b), first =
        (uint32_t)((ji.area_off - b->g.heap_off) >> b->g.chunk_shift);
    unsigned cooling = 0, chunks = (unsigned)((ji.area_size + cs - 1) / cs);
    for (uint32_t c = first; c < first + chunks; c++)
        cooling += OWNER_KIND(atomic_load(&ivshm__chunk(b, c)->owner)) ==
                   OWNER_COOL;
    kill(a.pid, SIGCONT);
    go(&a);
    finish(&a);
    if (cooling != chunks)
        fail_msg("the area of a job whose members a forced gc released is "
                 "free at once: %u of its %u chunks cool",
                 cooling, chunks);
    ivshm_region_close(b);
}

/* Joins a job and holds; resumed after the admin released its lease,
 * joins the job again (which must fail: it would write the slot's next
 * owner's memberships), then leaves it. Every later failure still names
 * the loss: not only the first call that found it (the join, or the
 * heartbeat thread, whose message is its own), also an allocation after
 * the void leave and an unrelated failure. */
static int leaves_after_loss(ivshm_region_t *r, int in, int out)
{
    struct holding h = {.len = 0};
    ivshm_job_t *j;
    if (ivshm_job_join(r, "life-leave", 65536, &j) != IVSHM_OK ||
        ivshm_self_identity(r, &h.id) != IVSHM_OK)
        return 60;
    h.job_idx = ivshm_job_index(j);
    if (write(out, &h, sizeof(h)) != sizeof(h) || wait_go(in))
        return 61;
    ivshm_job_t *again;
    ivshm_status_t st = ivshm_job_join(r, "life-leave", 65536, &again);
    ivshm_job_leave(j);
    if (st != IVSHM_ERR_LEASE_LOST)
        return 62;
    ivshm_region_t *none;
    if (ivshm_region_open("/nonexistent/ivshm-region", 0, &none) == IVSHM_OK)
        return 63;
    uint64_t off;
    st = ivshm_alloc(r, 65536, &off);
    return st == IVSHM_ERR_LEASE_LOST &&
                   strstr(ivshm_last_error(), "was reclaimed")
               ? 0
               : 64;
}

/* A process whose lease the admin released, and whose registry slot a new
 * process then took and used to join the same job (the same member word),
 * joins and leaves that job when it resumes: the join must fail and the
 * leave must not clear the new owner's membership (the job's area would be
 * freed under it). */
static void test_leave_after_lease_lost(void **state)
{
    (void)state;
    struct child a;
    struct holding h;
    start(&a, "vm-a", leaves_after_loss);
    get_holding(&a, &h);
    ivshm_region_t *b = open_as("vm-b"); /* keeps the job standing */
    assert_non_null(b);
    ivshm_job_t *jb;
    assert_int_equal(ivshm_job_join(b, "life-leave", 65536, &jb), IVSHM_OK);
    assert_int_equal(ivshm_job_index(jb), h.job_idx);
    kill(a.pid, SIGSTOP);
    usleep(PAST_LEASE_US);
    ivshm_gc_stats_t gs;
    assert_int_equal(ivshm_gc_force(b, NULL, NULL, &gs), IVSHM_OK);
    assert_int_equal(gs.procs_reclaimed, 1);
    ivshm_region_t *c = open_as("vm-c");
    assert_non_null(c);
    ivshm_identity_t idc;
    assert_int_equal(ivshm_self_identity(c, &idc), IVSHM_OK);
    assert_int_equal(idc.slot, h.id.slot); /* the first free slot */
    ivshm_job_t *jc;
    assert_int_equal(ivshm_job_join(c, "life-leave", 65536, &jc), IVSHM_OK);
    assert_int_equal(ivshm_job_index(jc), h.job_idx);
    uint32_t gen = ivshm__job_gen(jc);
    assert_int_equal(ivshm__job_gen(jb), gen);
    kill(a.pid, SIGCONT);
    go(&a);
    int ws = finish(&a);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail_msg("the released member ended with 0x%x (62: its join after "
                 "the loss did not fail; 64: a later failure did not name "
                 "the loss)", ws);
    if (!ivshm__is_member(ivshm__reg(c, idc.slot), h.job_idx, gen))
        fail_msg("a released member's leave cleared the membership of its "
                 "slot's next owner in job %u", h.job_idx);
    ivshm_job_leave(jc);
    ivshm_job_leave(jb);
    ivshm_region_close(c);
    ivshm_region_close(b);
}

static void count_released(void *arg, const ivshm_proc_info_t *p)
{
    (void)p;
    (*(unsigned *)arg)++;
}

/* A registry full of leases in doubt: attach names them and the remedy;
 * the forced gc releases them (each described), and attach then works. */
static void test_registry_full_of_doubt(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, REGION_SIZE, 2, LEASE_MS), IVSHM_OK);
    ivshm_region_t *x = open_as("vm-x"), *y = open_as("vm-y");
    assert_non_null(x);
    assert_non_null(y);
    /* as owners in other VMs that stalled 10 s leave their leases */
    uint64_t old = ivshm__now_ns() - ivshm__ms_to_ns(10000);
    atomic_store(&ivshm__reg(x, x->slot)->heartbeat_ns, old);
    atomic_store(&ivshm__reg(y, y->slot)->heartbeat_ns, old);
    setenv(IVSHM_ENV_VM_ID, "vm-z", 1);
    ivshm_region_t *z;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &z), IVSHM_OK);
    unsetenv(IVSHM_ENV_VM_ID);
    assert_int_equal(ivshm_attach(z), IVSHM_ERR_REGISTRY_FULL);
    const char *m = ivshm_last_error();
    if (!strstr(m, "in doubt") || !strstr(m, "slot 0 (vm ") ||
        !strstr(m, "slot 1 (vm ") || !strstr(m, "ivshm gc --force"))
        fail_msg("attach's message: %s", m);
    unsigned released = 0;
    ivshm_gc_stats_t gs;
    assert_int_equal(ivshm_gc_force(z, count_released, &released, &gs),
                     IVSHM_OK);
    assert_int_equal(released, 2);
    assert_int_equal(gs.procs_reclaimed, 2);
    assert_int_equal(ivshm_attach(z), IVSHM_OK);
    ivshm_region_close(z);
    ivshm_region_close(y);
    ivshm_region_close(x);
}

/* A region full because of a lease in doubt: the allocator's message names
 * it and the remedy, as attach's does for a full registry. */
static void test_full_region_names_doubt(void **state)
{
    (void)state;
    ivshm_region_t *x = open_as("vm-x"), *y = open_as("vm-y");
    assert_non_null(x);
    assert_non_null(y);
    uint64_t off;
    assert_int_equal(ivshm_alloc(x, 8 * MIB, &off), IVSHM_OK);
    ivshm_identity_t xid;
    assert_int_equal(ivshm_self_identity(x, &xid), IVSHM_OK);
    atomic_store(&ivshm__reg(x, x->slot)->heartbeat_ns,
                 ivshm__now_ns() - ivshm__ms_to_ns(10000));
    assert_int_equal(ivshm_alloc(y, 12 * MIB, &off), IVSHM_ERR_NOSPACE);
    const char *m = ivshm_last_error();
    char want[128];
    snprintf(want, sizeof(want), "slot %u (vm %016llx, pid %u, heartbeat ",
             xid.slot, (unsigned long long)xid.vm_id, xid.pid);
    if (!strstr(m, "in doubt") || !strstr(m, want) ||
        !strstr(m, "8.0 MiB") || !strstr(m, "ivshm gc --force"))
        fail_msg("the full region's message does not name the lease in "
                 "doubt (%s): %s", want, m);
    ivshm_region_close(y);
    ivshm_region_close(x);
}

/* Two containers of one VM that share its network and host name but not
 * its pid namespace judge each other's pids by different pid tables: they
 * must not share a VM id (a gc would take ESRCH in its own table for a
 * proof of death). */
static void test_pid_namespace_splits_vm(void **state)
{
    (void)state;
    unsetenv(IVSHM_ENV_VM_ID);
    uint64_t here = ivshm_vm_id(), there = 0;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0)
            _exit(77);
        pid_t q = fork(); /* the first process of the new pid namespace */
        if (q == 0) {
            uint64_t id = ivshm_vm_id();
            _exit(write(fds[1], &id, sizeof(id)) == sizeof(id) ? 0 : 1);
        }
        int ws;
        _exit(q > 0 && waitpid(q, &ws, 0) == q && WIFEXITED(ws)
                  ? WEXITSTATUS(ws)
                  : 2);
    }
    close(fds[1]);
    int ws;
    assert_int_equal(waitpid(p, &ws, 0), p);
    assert_true(WIFEXITED(ws));
    if (WEXITSTATUS(ws) == 77) {
        close(fds[0]);
        skip(); /* no unprivileged user namespaces here */
    }
    assert_int_equal(WEXITSTATUS(ws), 0);
    assert_int_equal(read(fds[0], &there, sizeof(there)),
                     (ssize_t)sizeof(there));
    close(fds[0]);
    if (here == there)
        fail_msg("a process in its own pid namespace has this VM's id "
                 "%016llx", (unsigned long long)here);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_paused_owner_keeps_memory, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_paused_rank0_collective_memory,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_owner_chunks_cool,
                                        setup_cool, teardown),
        cmocka_unit_test_setup_teardown(test_memory_changes_hands_clean, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_job_of_reclaiming_member_kept,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_gc_force_releases_doubt, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_registry_full_of_doubt, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_paused_claim_keeps_slot, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_overtaken_after_chunks, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_overtaken_before_heartbeat, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_take_stamps_heartbeat,
                                        setup_cool, teardown),
        cmocka_unit_test_setup_teardown(
            test_release_past_heartbeat_not_finished, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_died_past_heartbeat,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_starts_clock, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_late_release_spares_new_owner,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_region_names_doubt, setup,
                                        teardown),
        cmocka_unit_test(test_pid_namespace_splits_vm),
        cmocka_unit_test_setup_teardown(test_leave_after_lease_lost, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_forced_job_area_cools, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
