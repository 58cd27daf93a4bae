/*
 * coll ivshmem's direct reads (alltoall, allgather: a rank copies a peer's
 * buffer straight out of the peer's region memory), through the very code
 * the component runs (mpi-plugin/coll/coll_ivshmem_read.h), against a real
 * region and a real owner process:
 *   - a live owner's buffer is read, a range past it is refused;
 *   - the owner is killed in the middle of the copy and a bystander takes
 *     all its chunks (after their cooling period) and fills them: the read is reported lost (the
 *     collective fails), never delivered, although half of the bytes
 *     copied are the bystander's;
 *   - a read that starts after that is refused before it copies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "coll_owner.h"
#include "../../mpi-plugin/coll/coll_ivshmem_read.h"

static int setup(void **state)
{
    (void)state;
    return coll_region_setup("collread", 300);
}

/* what the copy in the middle of which the owner dies does */
static struct coll_owner *victim;
static ivshm_region_t *bystander;
static unsigned taken; /* the victim's chunks the bystander got */

static void *copy_killing_half_way(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len / 2);
    bystander = coll_hand_over(victim, &taken);
    memcpy((char *)dst + len / 2, (const char *)src + len / 2, len - len / 2);
    return dst;
}

static void test_live_owner(void **state)
{
    (void)state;
    struct coll_owner o;
    coll_fork_owner(2, 0xaa, &o);
    unsigned char *got = calloc(1, o.len);
    assert_non_null(got);
    assert_int_equal(civ_read_peer(coll_map_owned, memcpy, &o.id, o.off, o.len, 0,
                                   got, o.len),
                     CIV_READ_OK);
    assert_int_equal(got[0], 0xaa);
    assert_int_equal(got[o.len - 1], 0xaa);
    /* a range past the owner's buffer, or past the span: refused */
    assert_int_equal(civ_read_peer(coll_map_owned, memcpy, &o.id, o.off,
                                   o.len + 4096, 0, got, 8),
                     CIV_READ_REFUSED);
    assert_int_equal(civ_read_peer(coll_map_owned, memcpy, &o.id, o.off, o.len,
                                   o.len - 4, got, 8),
                     CIV_READ_REFUSED);
    kill(o.pid, SIGKILL);
    waitpid(o.pid, NULL, 0);
    free(got);
}

static void test_owner_dies_during_read(void **state)
{
    (void)state;
    struct coll_owner o;
    coll_fork_owner(4, 0xaa, &o);
    victim = &o;
    taken = 0;
    unsigned char *got = calloc(1, o.len);
    assert_non_null(got);
    enum civ_read_status st = civ_read_peer(
        coll_map_owned, copy_killing_half_way, &o.id, o.off, o.len, 0, got, o.len);
    /* the bystander owns every chunk of the buffer now, and half of what
     * the copy delivered is its data: the read must not count */
    assert_int_equal(taken, 4);
    assert_int_equal(got[0], 0xaa);
    assert_int_equal(got[o.len - 1], 0x55);
    assert_int_equal(st, CIV_READ_LOST);
    /* a later read of the dead owner's offset is refused before it copies */
    memset(got, 0, o.len);
    assert_int_equal(civ_read_peer(coll_map_owned, memcpy, &o.id, o.off, o.len, 0,
                                   got, o.len),
                     CIV_READ_REFUSED);
    assert_int_equal(got[o.len - 1], 0);
    ivshm_region_close(bystander);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_live_owner, setup,
                                        coll_region_teardown),
        cmocka_unit_test_setup_teardown(test_owner_dies_during_read, setup,
                                        coll_region_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
