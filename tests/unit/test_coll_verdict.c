/*
 * coll ivshmem's verdict on the members' published settings
 * (mpi-plugin/coll/coll_ivshmem_verdict.h, the code civ_agree runs),
 * without Open MPI: all the same runs; a member off, without an entry or
 * with an entry of another format makes none take the communicator; a
 * setting that differs makes every member step aside at the lowest
 * priority, and comm rank 0's message names the setting, rank 0's value,
 * the first rank that differs with its value, and how many differ.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../mpi-plugin/coll/coll_ivshmem_verdict.h"

#include <string.h>

enum { N = 4 };

/* every member with the defaults */
static void defaults(civ_agree_msg_t *m)
{
    for (int i = 0; i < N; i++) {
        memset(&m[i], 0, sizeof(m[i]));
        m[i].magic = CIV_AGREE_MAGIC;
        m[i].version = CIV_AGREE_VERSION;
        m[i].value[AG_PRIORITY] = 40;
        m[i].value[AG_ENABLED] = 63;
        m[i].value[AG_SLOT_SIZE] = 131072;
        m[i].value[AG_REDUCE_SPLIT] = 4096;
        m[i].value[AG_REDUCE_ROOT_MAX] = 65536;
        m[i].value[AG_ALLTOALL_MAX] = 4096;
        m[i].value[AG_ALLGATHER_DIRECT_MIN] = 8192;
        m[i].value[AG_MAX_RANKS] = 256;
        m[i].value[AG_HIERARCHY] = 1;
    }
}

static char why[768];
static int priority;

/* the verdict on members m, those in `missing` (a bit per rank) without
 * an entry */
static enum civ_agreement judge(const civ_agree_msg_t *m, unsigned missing)
{
    civ_verdict_t v;
    civ_verdict_init(&v);
    for (int i = 0; i < N; i++)
        civ_verdict_add(&v, missing >> i & 1 ? NULL : &m[i]);
    priority = -1;
    return civ_verdict(&v, &priority, why, sizeof(why));
}

static void test_all_same(void **state)
{
    (void)state;
    civ_agree_msg_t m[N];
    defaults(m);
    assert_int_equal(judge(m, 0), CIV_AGREE_SAME);
    assert_string_equal(why, "");
}

static void test_one_off_or_missing(void **state)
{
    (void)state;
    civ_agree_msg_t m[N];
    defaults(m);
    m[2].value[AG_PRIORITY] = 0;
    assert_int_equal(judge(m, 0), CIV_AGREE_OFF);
    assert_non_null(strstr(why, "rank 2 has coll ivshmem off"));
    defaults(m);
    m[3].value[AG_ENABLED] = 0;
    assert_int_equal(judge(m, 0), CIV_AGREE_OFF);
    assert_non_null(strstr(why, "rank 3 has coll ivshmem off"));
    defaults(m);
    assert_int_equal(judge(m, 1u << 1), CIV_AGREE_OFF);
    assert_non_null(strstr(why, "rank 1 has coll ivshmem not loaded"));
    assert_int_equal(judge(m, 1u << 0), CIV_AGREE_OFF); /* rank 0 itself */
    assert_non_null(strstr(why, "rank 0 has coll ivshmem not loaded"));
    m[2].version = CIV_AGREE_VERSION + 1; /* another format: none usable */
    assert_int_equal(judge(m, 0), CIV_AGREE_OFF);
    assert_non_null(strstr(why, "rank 2 has coll ivshmem not loaded"));
}

static void test_all_off_says_nothing(void **state)
{
    (void)state;
    civ_agree_msg_t m[N];
    defaults(m);
    for (int i = 0; i < N; i++)
        m[i].value[AG_PRIORITY] = 0;
    m[1].value[AG_MAX_BYTES] = 5; /* differences do not matter then */
    assert_int_equal(judge(m, 0), CIV_AGREE_OFF);
    assert_string_equal(why, "");
}

static void test_settings_differ(void **state)
{
    (void)state;
    civ_agree_msg_t m[N];
    defaults(m);
    m[0].value[AG_MAX_BYTES] = 1024;
    m[1].value[AG_MAX_BYTES] = 1024;
    assert_int_equal(judge(m, 0), CIV_AGREE_DIFFER);
    assert_non_null(strstr(why, "ranks disagree on coll_ivshmem_max_bytes "
                                "(rank 0: 1024, rank 2: 0, 2 ranks differ "
                                "from rank 0);"));
    assert_null(strstr(why, "priority"));
    assert_int_equal(priority, 40);
    /* a second setting, on one rank, with a lower priority: both named,
     * the lowest priority taken */
    m[3].value[AG_PRIORITY] = 35;
    assert_int_equal(judge(m, 0), CIV_AGREE_DIFFER);
    assert_non_null(strstr(why, "coll_ivshmem_priority (rank 0: 40, rank 3: "
                                "35, 1 rank differs from rank 0);"));
    assert_non_null(strstr(why, "coll_ivshmem_max_bytes (rank 0: 1024"));
    assert_non_null(strstr(why, "step aside"));
    assert_int_equal(priority, 35);
    /* only rank 0 differs: every other rank is counted */
    defaults(m);
    m[0].value[AG_SLOT_SIZE] = 65536;
    assert_int_equal(judge(m, 0), CIV_AGREE_DIFFER);
    assert_non_null(strstr(why, "coll_ivshmem_slot_size (rank 0: 65536, "
                                "rank 1: 131072, 3 ranks differ from rank 0)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_same),
        cmocka_unit_test(test_one_off_or_missing),
        cmocka_unit_test(test_all_off_says_nothing),
        cmocka_unit_test(test_settings_differ),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
