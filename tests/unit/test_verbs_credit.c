/*
 * The verbs route's credit rules (mpi-plugin/btl/btl_ivshmem_credit.h),
 * driven through random bursts between two modelled peers. Each peer has
 * rq_depth receive buffers; a message in flight fills one of the
 * receiver's, which it reposts later (in any order against everything
 * else); queued data goes whenever the rules let it, and a credit message
 * whenever they say it is due, as the route's flush does after every
 * event. Every schedule must end with all data delivered (no deadlock, in
 * particular none at first contact, when both peers burst past each
 * other's buffers), and no message may ever arrive at a peer with no
 * buffer posted (no overrun). The seed is printed; IVSHM_TEST_SEED
 * replays one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../mpi-plugin/btl/btl_ivshmem_credit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_FLIGHT 8192

struct side {
    int32_t credits;      /* the other side's buffers we may fill */
    uint32_t owed;        /* buffers reposted here, not yet told */
    uint32_t queued;      /* data messages waiting for credits */
    uint32_t filled;      /* our buffers holding a message, not reposted */
    uint32_t delivered;   /* data messages that arrived here */
    uint16_t flight[MAX_FLIGHT]; /* to the other side: credits carried */
    uint8_t is_data[MAX_FLIGHT];
    uint32_t head, tail;  /* in flight: [head, tail) */
};

struct model {
    struct side s[2];
    uint32_t rq_depth;
    uint32_t overruns;
};

static void post(struct side *from, bool data)
{
    uint16_t give = ivshmem_credit_give(from->owed);
    from->flight[from->tail % MAX_FLIGHT] = give;
    from->is_data[from->tail % MAX_FLIGHT] = data;
    from->tail++;
    ivshmem_credit_spent(&from->credits, &from->owed, give);
}

/* What the route does after every event: queued data first, then a
 * credit message if one is due. */
static void flush(struct model *m, struct side *x)
{
    while (x->queued && ivshmem_credit_data_ok(x->credits)) {
        post(x, true);
        x->queued--;
    }
    if (ivshmem_credit_msg_due(x->credits, x->owed, m->rq_depth, x->queued))
        post(x, false);
}

/* One message from x arrives at y. */
static void arrive(struct model *m, struct side *x, struct side *y)
{
    uint32_t i = x->head++ % MAX_FLIGHT;
    if (y->filled >= m->rq_depth)
        m->overruns++;
    y->filled++;
    ivshmem_credit_take(&y->credits, x->flight[i], m->rq_depth);
    y->delivered += x->is_data[i];
    flush(m, y);
}

static void repost(struct model *m, struct side *y)
{
    y->filled--;
    y->owed++;
    flush(m, y);
}

/* One schedule: bursts of na and nb data messages, posted at first
 * contact, then random events until nothing can happen. True if every
 * data message arrived. */
static bool run(uint32_t rq_depth, uint32_t na, uint32_t nb,
                unsigned *seed, uint32_t *overruns)
{
    struct model *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    m->rq_depth = rq_depth;
    for (int k = 0; k < 2; k++)
        m->s[k].credits = (int32_t)rq_depth;
    m->s[0].queued = na;
    m->s[1].queued = nb;
    flush(m, &m->s[0]);
    flush(m, &m->s[1]);
    for (long steps = 0; steps < 10000000; steps++) {
        /* the events that can happen now, one drawn at random */
        int can[4], n = 0;
        for (int k = 0; k < 2; k++) {
            if (m->s[k].head != m->s[k].tail)
                can[n++] = k;     /* k's oldest message arrives */
            if (m->s[k].filled)
                can[n++] = 2 + k; /* k reposts a buffer */
        }
        if (n == 0)
            break;
        int e = can[rand_r(seed) % n];
        if (e < 2)
            arrive(m, &m->s[e], &m->s[1 - e]);
        else
            repost(m, &m->s[e - 2]);
    }
    bool all = m->s[1].delivered == na && m->s[0].delivered == nb;
    *overruns = m->overruns;
    free(m);
    return all;
}

static void test_random_bursts(void **state)
{
    (void)state;
    const char *env = getenv("IVSHM_TEST_SEED");
    unsigned seed = env ? (unsigned)strtoul(env, NULL, 0)
                        : (unsigned)time(NULL);
    printf("test_verbs_credit: seed %u (IVSHM_TEST_SEED replays it)\n", seed);
    for (int i = 0; i < 3000; i++) {
        unsigned s = seed + (unsigned)i;
        uint32_t rq = 4 + (uint32_t)(rand_r(&s) % 61);
        uint32_t na = (uint32_t)(rand_r(&s) % (4 * rq));
        uint32_t nb = (uint32_t)(rand_r(&s) % (4 * rq));
        uint32_t overruns;
        bool ok = run(rq, na, nb, &s, &overruns);
        if (!ok || overruns)
            fail_msg("schedule %d (seed %u): rq_depth %u, bursts %u and %u: "
                     "%s, %u overruns",
                     i, seed + (unsigned)i, rq, na, nb,
                     ok ? "all delivered" : "DEADLOCK", overruns);
    }
}

/* The case that once hung the guests' mixed job: both peers post more
 * sends than the other has buffers, at first contact. */
static void test_first_contact(void **state)
{
    (void)state;
    static const uint32_t depth[] = {4, 5, 8, 64};
    for (size_t d = 0; d < sizeof(depth) / sizeof(depth[0]); d++)
        for (uint32_t burst = depth[d] - 1; burst <= 3 * depth[d]; burst++) {
            unsigned seed = burst;
            uint32_t overruns;
            if (!run(depth[d], burst, burst, &seed, &overruns) || overruns)
                fail_msg("rq_depth %u, %u sends each way at first contact: "
                         "not all delivered or %u overruns",
                         depth[d], burst, overruns);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_contact),
        cmocka_unit_test(test_random_bursts),
    };
    return cmocka_run_group_tests_name("verbs credits", tests, NULL, NULL);
}
