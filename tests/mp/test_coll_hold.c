/*
 * coll ivshmem's writes into comm rank 0's area (its step counters, and
 * the slots a step fills after civ_step_begin's check), through the very
 * code the component runs (mpi-plugin/coll/coll_ivshmem_hold.h), against
 * a real region and a real owner process:
 *   - while the owner lives, a post lands, and posts within a quarter of
 *     the lease timeout of a passing check cost no check;
 *   - the owner is killed, its lease released (pid proven dead), its
 *     chunks cool for one lease timeout and a bystander then takes them
 *     all and fills them: the next post (a rank that computed longer than
 *     the cooling before its next collective) fails and changes no byte
 *     of the bystander's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "coll_owner.h"
#include "../../mpi-plugin/coll/coll_ivshmem_hold.h"

#define LEASE_MS 400u

static int setup(void **state)
{
    (void)state;
    return coll_region_setup("collhold", LEASE_MS);
}

/* a counter of the area, at our address */
static _Atomic uint64_t *counter_at(const struct coll_owner *o, uint64_t at)
{
    return (_Atomic uint64_t *)((char *)ivshm_region_base(coll_mapper) +
                                o->off + at);
}

static void test_live_owner(void **state)
{
    (void)state;
    struct coll_owner o;
    civ_hold_t h;
    coll_fork_owner(2, 0, &o);
    civ_hold_init(&h, &o.id, o.off, o.len, LEASE_MS);
    coll_maps = 0;
    assert_true(civ_hold_post(&h, coll_map_owned, counter_at(&o, 0), 7));
    assert_true(civ_hold_post(&h, coll_map_owned, counter_at(&o, 128), 9));
    assert_int_equal(coll_maps, 1); /* the second within a quarter lease */
    assert_int_equal(atomic_load(counter_at(&o, 0)), 7);
    assert_int_equal(atomic_load(counter_at(&o, 128)), 9);
    usleep((LEASE_MS / 4 + 20) * 1000u);
    assert_true(civ_hold_check(&h, coll_map_owned));
    assert_int_equal(coll_maps, 2); /* older than a quarter lease: checked */
    kill(o.pid, SIGKILL);
    waitpid(o.pid, NULL, 0);
}

static void test_owner_released_before_post(void **state)
{
    (void)state;
    struct coll_owner o;
    civ_hold_t h;
    coll_fork_owner(4, 0, &o);
    civ_hold_init(&h, &o.id, o.off, o.len, LEASE_MS);
    /* the rank's last step before it computes: a passing check */
    assert_true(civ_hold_post(&h, coll_map_owned, counter_at(&o, 128),
                              4 * 1 + 3));

    /* rank 0 dies while this rank computes; its lease is released (pid
     * proven dead), its chunks cool, then a bystander takes and fills
     * them all */
    unsigned taken;
    ivshm_region_t *bystander = coll_hand_over(&o, &taken);
    char *by = ivshm_region_base(bystander);
    assert_int_equal(taken, 4);

    /* the rank enters its next collective: a broadcast's reader posts
     * its counter (it writes nothing else), a writer begins a step
     * before it fills its slot */
    bool posted = civ_hold_post(&h, coll_map_owned, counter_at(&o, 128),
                                4 * 2 + 3);
    size_t changed = 0;
    for (uint64_t i = 0; i < o.len; i++)
        changed += (unsigned char)by[o.off + i] != 0x55;
    if (changed)
        print_error("%zu bytes of the bystander's chunks changed\n", changed);
    assert_int_equal(changed, 0);
    assert_false(posted);
    assert_false(civ_hold_check(&h, coll_map_owned));
    ivshm_region_close(bystander);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_live_owner, setup,
                                        coll_region_teardown),
        cmocka_unit_test_setup_teardown(test_owner_released_before_post, setup,
                                        coll_region_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
