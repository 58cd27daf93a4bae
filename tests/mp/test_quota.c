/*
 * The region heap's quota per job (libivshm/src/quota.c, docs/heap.md
 * "Quota") over a real region file: several attachments (registry slots)
 * of this process and of killed children stand for the members of jobs.
 *  - the members' blocks are summed against the job's quota; another job
 *    has its own; a free gives the room back;
 *  - a killed member's blocks stop counting once its lease is collected;
 *  - a stale count left in a free registry slot never counts for its next
 *    owner;
 *  - a full region's message names the heap blocks, their job and
 *    process, and what to do.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "internal.h"
#include "../testutil.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define CHUNK (64u << 10)
#define QUOTA (16ull * CHUNK)

static char path[256];

static int setup(void **state)
{
    (void)state;
    tu_region_path(path, sizeof(path), "quota");
    return tu_format(path, 8 << 20, 16, 1000) == IVSHM_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

struct member {
    ivshm_region_t *r;
    ivshm_job_t *j;
};

static struct member join(const char *key)
{
    struct member m;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &m.r), IVSHM_OK);
    assert_int_equal(ivshm_attach(m.r), IVSHM_OK);
    assert_int_equal(ivshm_job_join(m.r, key, 4096, &m.j), IVSHM_OK);
    return m;
}

static void leave(struct member *m)
{
    ivshm_job_leave(m->j);
    assert_int_equal(ivshm_detach(m->r), IVSHM_OK);
    ivshm_region_close(m->r);
}

static ivshm_status_t take(struct member *m, uint64_t chunks, uint64_t quota,
                           uint64_t *off)
{
    return ivshm_alloc_heap_block(m->r, chunks * CHUNK, quota, off);
}

static void test_members_summed(void **state)
{
    (void)state;
    struct member a = join("qjob"), b = join("qjob"), c = join("other");
    uint64_t oa, oa2, ob, oc, x;
    assert_int_equal(take(&a, 8, QUOTA, &oa), IVSHM_OK);
    assert_int_equal(take(&a, 4, QUOTA, &oa2), IVSHM_OK);
    assert_int_equal(take(&b, 4, QUOTA, &ob), IVSHM_OK);
    /* the job holds its 16 chunks: neither member gets one more */
    assert_int_equal(take(&b, 1, QUOTA, &x), IVSHM_ERR_QUOTA);
    assert_int_equal(take(&a, 1, QUOTA, &x), IVSHM_ERR_QUOTA);
    /* another job has a quota of its own */
    assert_int_equal(take(&c, 16, QUOTA, &oc), IVSHM_OK);
    /* a free gives its chunks back to the job */
    assert_int_equal(ivshm_free_heap_block(a.r, oa2), IVSHM_OK);
    assert_int_equal(take(&b, 4, QUOTA, &x), IVSHM_OK);
    assert_int_equal(take(&b, 1, QUOTA, &x), IVSHM_ERR_QUOTA);
    /* a block larger than the quota, and a quota of 0 */
    assert_int_equal(take(&c, 17, 1ull << 40, &x), IVSHM_OK);
    assert_int_equal(take(&c, 1, 0, &x), IVSHM_ERR_QUOTA);
    leave(&a);
    leave(&b);
    leave(&c);
}

/* a member that allocates the job's whole quota and is killed holding it */
static void die_holding(void)
{
    ivshm_region_t *r;
    ivshm_job_t *j;
    uint64_t off;
    if (ivshm_region_open(tu_uri(path), 0, &r) != IVSHM_OK ||
        ivshm_attach(r) != IVSHM_OK || ivshm_job_join(r, "qjob", 4096, &j) != IVSHM_OK ||
        ivshm_alloc_heap_block(r, QUOTA, QUOTA, &off) != IVSHM_OK)
        _exit(10);
    raise(SIGKILL);
    _exit(11);
}

static void test_dead_member_stops_counting(void **state)
{
    (void)state;
    struct member a = join("qjob");
    pid_t c = fork();
    if (c == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        die_holding();
    }
    int ws;
    assert_int_equal(waitpid(c, &ws, 0), c);
    assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
    uint64_t x;
    /* alive (not collected yet), its blocks count for the job */
    assert_int_equal(take(&a, 1, QUOTA, &x), IVSHM_ERR_QUOTA);
    /* its pid is gone: gc ends the lease, and its count with it; the
     * count stays in the free slot, named nowhere */
    assert_int_equal(ivshm_gc(a.r, NULL), IVSHM_OK);
    char holders[320] = "";
    ivshm__full_region_cause(a.r, holders, sizeof(holders));
    if (holders[0])
        fail_msg("a collected member still holds heap: %s", holders);
    assert_int_equal(take(&a, 16, QUOTA, &x), IVSHM_OK);
    leave(&a);
}

static void test_stale_count_not_inherited(void **state)
{
    (void)state;
    struct member a = join("qjob");
    /* the next free slot holds a count that a killed owner left */
    uint32_t next = (a.r->slot + 1) % a.r->g.reg_slots;
    struct ivshm_reg_slot *s = ivshm__reg(a.r, next);
    assert_int_equal(SLOT_STATE(atomic_load(&s->word)), SLOT_FREE);
    atomic_store(&s->heap_chunks, 100);
    struct member b = join("qjob");
    assert_int_equal(b.r->slot, next);
    uint64_t x;
    assert_int_equal(take(&a, 16, QUOTA, &x), IVSHM_OK);
    leave(&a);
    leave(&b);
}

static void test_full_region_names_the_heap(void **state)
{
    (void)state;
    struct member hog = join("hogjob");
    uint64_t x;
    unsigned n = 0;
    while (take(&hog, 1, UINT64_MAX, &x) == IVSHM_OK)
        n++;
    assert_true(n > 64);
    struct member late;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &late.r), IVSHM_OK);
    assert_int_equal(ivshm_attach(late.r), IVSHM_OK);
    assert_int_equal(ivshm_job_join(late.r, "late", 4096, &late.j),
                     IVSHM_ERR_NOSPACE);
    const char *msg = ivshm_last_error();
    char want[160];
    snprintf(want, sizeof(want),
             "region-heap blocks (malloc'd arrays) hold %.1f of its ",
             (double)n * CHUNK / (1024.0 * 1024.0));
    if (!strstr(msg, want) || !strstr(msg, "job hogjob ") ||
        !strstr(msg, "in 1 process (") || !strstr(msg, "btl_ivshmem_heap_quota"))
        fail_msg("the message does not name the heap's holders: %s", msg);
    assert_int_equal(ivshm_detach(late.r), IVSHM_OK);
    ivshm_region_close(late.r);
    leave(&hog);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_members_summed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_member_stops_counting,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_count_not_inherited, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_full_region_names_the_heap,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
