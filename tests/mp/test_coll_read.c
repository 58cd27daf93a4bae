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

#include "../testutil.h"
#include "../../mpi-plugin/coll/coll_ivshmem_read.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

static char path[256];
static ivshm_region_t *reader; /* this process' lease: the reading rank */

static int setup(void **state)
{
    (void)state;
    tu_region_path(path, sizeof(path), "collread");
    if (tu_format(path, 32 << 20, 16, 300) != IVSHM_OK)
        return -1;
    if (ivshm_region_open(tu_uri(path), 0, &reader) != IVSHM_OK ||
        ivshm_attach(reader) != IVSHM_OK)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ivshm_region_close(reader);
    unlink(path);
    return 0;
}

/* as the BTL's coll_map, on the reader's mapping */
static int map_owned(const ivshm_identity_t *owner, uint64_t off,
                     uint64_t len, void **addr)
{
    ivshm_status_t st = ivshm_region_owned(reader, owner, off, len);
    *addr = st == IVSHM_OK ? (char *)ivshm_region_base(reader) + off : NULL;
    return st;
}

/* The owner: a process that allocates `chunks` chunks, fills them with
 * 0xaa, reports its identity and the offset, and waits to be killed. */
struct owner {
    pid_t pid;
    ivshm_identity_t id;
    uint64_t off, len;
};

static void fork_owner(struct owner *o, uint32_t chunks)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        ivshm_region_t *r;
        ivshm_region_info_t ri;
        struct owner me = {0};
        if (ivshm_region_open(tu_uri(path), 0, &r) != IVSHM_OK ||
            ivshm_attach(r) != IVSHM_OK || ivshm_region_info(r, &ri) != IVSHM_OK)
            _exit(9);
        me.len = (uint64_t)chunks * ri.chunk_size;
        if (ivshm_alloc(r, me.len, &me.off) != IVSHM_OK ||
            ivshm_self_identity(r, &me.id) != IVSHM_OK)
            _exit(9);
        memset((char *)ivshm_region_base(r) + me.off, 0xaa, me.len);
        if (write(ready[1], &me, sizeof(me)) != sizeof(me))
            _exit(9);
        for (;;)
            pause();
    }
    close(ready[1]);
    assert_int_equal(read(ready[0], o, sizeof(*o)), sizeof(*o));
    close(ready[0]);
    o->pid = pid;
}

/* what the copy in the middle of which the owner dies does */
static struct owner *victim;
static ivshm_region_t *bystander;
static unsigned taken; /* the victim's chunks the bystander got */

static void hand_over(void)
{
    kill(victim->pid, SIGKILL);
    waitpid(victim->pid, NULL, 0);
    assert_int_equal(ivshm_gc(reader, NULL), IVSHM_OK); /* a pid proven dead */
    ivshm_region_info_t ri;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &bystander), IVSHM_OK);
    assert_int_equal(ivshm_attach(bystander), IVSHM_OK);
    ivshm_region_info(bystander, &ri);
    /* a dead owner's chunks cool for one lease timeout before anybody may
     * take them (docs/lifetimes.md); the allocator frees them after it */
    usleep((ri.lease_timeout_ms + 100) * 1000u);
    uint64_t off;
    while (ivshm_alloc(bystander, ri.chunk_size, &off) == IVSHM_OK) {
        memset((char *)ivshm_region_base(bystander) + off, 0x55, ri.chunk_size);
        taken += off >= victim->off && off < victim->off + victim->len;
    }
}

static void *copy_killing_half_way(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len / 2);
    hand_over();
    memcpy((char *)dst + len / 2, (const char *)src + len / 2, len - len / 2);
    return dst;
}

static void test_live_owner(void **state)
{
    (void)state;
    struct owner o;
    fork_owner(&o, 2);
    unsigned char *got = calloc(1, o.len);
    assert_non_null(got);
    assert_int_equal(civ_read_peer(map_owned, memcpy, &o.id, o.off, o.len, 0,
                                   got, o.len),
                     CIV_READ_OK);
    assert_int_equal(got[0], 0xaa);
    assert_int_equal(got[o.len - 1], 0xaa);
    /* a range past the owner's buffer, or past the span: refused */
    assert_int_equal(civ_read_peer(map_owned, memcpy, &o.id, o.off,
                                   o.len + 4096, 0, got, 8),
                     CIV_READ_REFUSED);
    assert_int_equal(civ_read_peer(map_owned, memcpy, &o.id, o.off, o.len,
                                   o.len - 4, got, 8),
                     CIV_READ_REFUSED);
    kill(o.pid, SIGKILL);
    waitpid(o.pid, NULL, 0);
    free(got);
}

static void test_owner_dies_during_read(void **state)
{
    (void)state;
    struct owner o;
    fork_owner(&o, 4);
    victim = &o;
    taken = 0;
    unsigned char *got = calloc(1, o.len);
    assert_non_null(got);
    enum civ_read_status st = civ_read_peer(
        map_owned, copy_killing_half_way, &o.id, o.off, o.len, 0, got, o.len);
    /* the bystander owns every chunk of the buffer now, and half of what
     * the copy delivered is its data: the read must not count */
    assert_int_equal(taken, 4);
    assert_int_equal(got[0], 0xaa);
    assert_int_equal(got[o.len - 1], 0x55);
    assert_int_equal(st, CIV_READ_LOST);
    /* a later read of the dead owner's offset is refused before it copies */
    memset(got, 0, o.len);
    assert_int_equal(civ_read_peer(map_owned, memcpy, &o.id, o.off, o.len, 0,
                                   got, o.len),
                     CIV_READ_REFUSED);
    assert_int_equal(got[o.len - 1], 0);
    ivshm_region_close(bystander);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_live_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_owner_dies_during_read, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
