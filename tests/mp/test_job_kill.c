/*
 * A process killed inside the job table's critical steps: the library's
 * fault seam raises SIGKILL between a creator's claim of a free job slot
 * and the rest of its creation (job-claim), and between a collector's
 * claim of an unused job (reclaiming) and its release (job-reclaim), also
 * a second time in the collector that takes the dead one's work over.
 * Each time, a later gc must free the job slot and its area within a
 * generous bound, and the key must be usable again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../testutil.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

extern void (*ivshm__test_step)(const char *step);

enum { GC_BOUND_S = 20 };

static char path[256];
static const char *kill_step;

static void kill_hook(const char *step)
{
    if (strcmp(step, kill_step) == 0)
        raise(SIGKILL);
}

static ivshm_region_t *attach_or_exit(void)
{
    ivshm_region_t *r;
    if (ivshm_region_open(tu_uri(path), 0, &r) != IVSHM_OK ||
        ivshm_attach(r) != IVSHM_OK)
        _exit(10);
    return r;
}

/* Creates the job and dies right after claiming its slot. */
static void die_creating(void)
{
    ivshm_region_t *r = attach_or_exit();
    ivshm_job_t *j;
    kill_step = "job-claim";
    ivshm__test_step = kill_hook;
    ivshm_job_join(r, "jk", 65536, &j);
    _exit(11);
}

/* Creates the job, leaves it as its last member and dies in the gc that
 * its leave runs, with the slot claimed for release. */
static void die_reclaiming(void)
{
    ivshm_region_t *r = attach_or_exit();
    ivshm_job_t *j;
    if (ivshm_job_join(r, "jk", 65536, &j) != IVSHM_OK)
        _exit(12);
    kill_step = "job-reclaim";
    ivshm__test_step = kill_hook;
    ivshm_job_leave(j);
    _exit(13);
}

/* Runs a gc that meets a collector's unfinished release and dies while
 * finishing it. */
static void die_taking_over(void)
{
    ivshm_region_t *r = attach_or_exit();
    kill_step = "job-reclaim";
    ivshm__test_step = kill_hook;
    double end = tu_now_s() + GC_BOUND_S;
    while (tu_now_s() < end) {
        ivshm_gc(r, NULL);
        usleep(10 * 1000);
    }
    _exit(14);
}

static void run_killed(void (*role)(void))
{
    pid_t c = fork();
    if (c == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        role();
    }
    int ws;
    assert_int_equal(waitpid(c, &ws, 0), c);
    if (!WIFSIGNALED(ws) || WTERMSIG(ws) != SIGKILL)
        fail_msg("the child was not killed at its step (status 0x%x)", ws);
}

static void used(ivshm_region_t *r, uint32_t *jobs, uint32_t *procs,
                 uint32_t *chunks)
{
    ivshm_region_info_t inf;
    assert_int_equal(ivshm_region_info(r, &inf), IVSHM_OK);
    *jobs = inf.job_used;
    *procs = inf.reg_used;
    *chunks = inf.chunks_used;
}

/* gc until the job table, the registry and the heap are empty */
static void expect_collected(ivshm_region_t *r, const char *what)
{
    uint32_t jobs, procs, chunks;
    double start = tu_now_s();
    for (;;) {
        assert_int_equal(ivshm_gc(r, NULL), IVSHM_OK);
        used(r, &jobs, &procs, &chunks);
        if ((jobs == 0 && procs == 0 && chunks == 0) ||
            tu_now_s() - start > GC_BOUND_S)
            break;
        usleep(10 * 1000);
    }
    if (jobs || procs || chunks)
        fail_msg("%s: after %d s of gc: job_used=%u reg_used=%u "
                 "chunks_used=%u",
                 what, GC_BOUND_S, jobs, procs, chunks);
    assert_int_equal(ivshm_region_check(r, NULL, NULL), IVSHM_OK);
    /* the key creates and joins again */
    assert_int_equal(ivshm_attach(r), IVSHM_OK);
    ivshm_job_t *j;
    assert_int_equal(ivshm_job_join(r, "jk", 65536, &j), IVSHM_OK);
    ivshm_job_leave(j);
    assert_int_equal(ivshm_detach(r), IVSHM_OK);
    used(r, &jobs, &procs, &chunks);
    assert_int_equal(jobs + procs + chunks, 0);
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

static ivshm_region_t *fresh_region(void)
{
    tu_region_path(path, sizeof(path), "jobkill");
    assert_int_equal(tu_format(path, 8 << 20, 16, 1000), IVSHM_OK);
    ivshm_region_t *r;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r), IVSHM_OK);
    return r;
}

static void stuck_slot_seen(ivshm_region_t *r)
{
    uint32_t jobs, procs, chunks;
    used(r, &jobs, &procs, &chunks);
    assert_int_equal(jobs, 1); /* the kill left the slot held */
}

/* Runs the roles in turn (each killed at its step), then collects. */
static void kill_and_collect(void (*first)(void), void (*second)(void),
                             const char *what)
{
    ivshm_region_t *r = fresh_region();
    run_killed(first);
    if (second)
        run_killed(second);
    stuck_slot_seen(r);
    expect_collected(r, what);
    ivshm_region_close(r);
}

static void test_kill_at_job_claim(void **state)
{
    (void)state;
    kill_and_collect(die_creating, NULL, "killed after claiming a job slot");
}

static void test_kill_at_job_reclaim(void **state)
{
    (void)state;
    kill_and_collect(die_reclaiming, NULL,
                     "killed while releasing a job slot");
}

static void test_kill_twice_at_job_reclaim(void **state)
{
    (void)state;
    kill_and_collect(die_reclaiming, die_taking_over,
                     "killed twice while releasing a job slot");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_kill_at_job_claim, teardown),
        cmocka_unit_test_teardown(test_kill_at_job_reclaim, teardown),
        cmocka_unit_test_teardown(test_kill_twice_at_job_reclaim, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
