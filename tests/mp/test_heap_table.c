/*
 * The region heap's table of large blocks follows the live blocks, not
 * every block ever made (issue #27, item 10; docs/heap.md, "The table").
 * The heap is linked ahead of the C library, as in test_heap, over a real
 * region: blocks replace each other a million times with 64 alive, then
 * thousands live at once go down to a few.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../heap_region.h"

#include <malloc.h>

#define KIB 1024u
#define MIB (1024u * KIB)

static int setup(void **state)
{
    (void)state;
    if (heap_region_open("heaptab", 160 * MIB) != 0)
        return -1;
    return ivshm_heap_attach(&heap_region_backend);
}

static int teardown(void **state)
{
    (void)state;
    ivshm_heap_detach(heap_region_keep, NULL);
    heap_region_close();
    return 0;
}

static size_t table_slots(void)
{
    ivshm_heap_stats_t s;
    ivshm_heap_stats(&s);
    return s.table_slots;
}

/* Every live block is still found, with its length. */
static void assert_all_found(char **blk, const size_t *len, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!blk[i])
            continue;
        assert_true(heap_region_holds(blk[i], len[i]));
        assert_int_equal(malloc_usable_size(blk[i]), len[i]);
    }
}

/* A million replacements (free one of 64 live blocks, allocate another):
 * the table and the process stay the size that 64 blocks need. */
static void test_replacements_keep_table_small(void **state)
{
    (void)state;
    enum { LIVE = 64, ROUNDS = 1000000 };
    char *blk[LIVE];
    size_t len[LIVE];
    unsigned seed = 27;
    for (int i = 0; i < LIVE; i++) {
        len[i] = (size_t)(1 + i % 4) * 64 * KIB;
        blk[i] = malloc(len[i]);
        assert_true(heap_region_holds(blk[i], len[i]));
    }
    size_t vm0 = heap_vm_kib(), most = table_slots();
    for (long r = 0; r < ROUNDS; r++) {
        int k = (int)(rand_r(&seed) % LIVE);
        free(blk[k]);
        len[k] = (size_t)(1 + rand_r(&seed) % 4) * 64 * KIB;
        blk[k] = malloc(len[k]);
        if (!heap_region_holds(blk[k], len[k]))
            fail_msg("round %ld: a %zu-byte block is not in the region", r, len[k]);
        if (r % 4096 == 0) {
            size_t s = table_slots();
            most = s > most ? s : most;
            assert_all_found(blk, len, LIVE);
        }
    }
    size_t grew = heap_vm_kib() - vm0;
    print_message("after %d replacements with %d live: table %zu slots at "
                  "most, VmSize grew %zu KiB\n", ROUNDS, LIVE, most, grew);
    assert_true(most <= 8 * LIVE);
    assert_true(grew <= 256);
    assert_all_found(blk, len, LIVE);
    for (int i = 0; i < LIVE; i++)
        free(blk[i]);
    ivshm_heap_stats_t s;
    ivshm_heap_stats(&s);
    assert_int_equal(s.region_live, 0);
}

/* Thousands of live blocks grow the table; when most are freed it shrinks
 * again, and every block left is still found. */
static void test_table_shrinks(void **state)
{
    (void)state;
    enum { MANY = 2048, KEEP = 8 };
    static char *blk[MANY];
    static size_t len[MANY];
    size_t small = table_slots();
    for (int i = 0; i < MANY; i++) {
        len[i] = 64 * KIB;
        blk[i] = malloc(len[i]);
        assert_true(heap_region_holds(blk[i], len[i]));
    }
    size_t big = table_slots();
    assert_true(big >= 2 * MANY && big <= 8 * MANY);
    assert_all_found(blk, len, MANY);
    /* free in a scattered order, checking the others as the table shrinks */
    for (int i = 0; i < MANY - KEEP; i++) {
        int k = (int)(((unsigned)i * 1237u) % (MANY - KEEP));
        free(blk[k]);
        blk[k] = NULL;
        if (i % 256 == 0)
            assert_all_found(blk, len, MANY);
    }
    assert_all_found(blk, len, MANY);
    size_t after = table_slots();
    print_message("table: %zu slots empty, %zu with %d live, %zu with %d\n",
                  small, big, MANY, after, KEEP);
    assert_true(after <= (small > 8 * KEEP ? small : 8 * KEEP));
    for (int i = MANY - KEEP; i < MANY; i++)
        free(blk[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_replacements_keep_table_small, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_shrinks, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
