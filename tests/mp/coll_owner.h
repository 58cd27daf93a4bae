/*
 * What the coll ivshmem tests (test_coll_read, test_coll_hold) share: a
 * real owner process of region memory (a rank whose buffer or area other
 * ranks use), and the lease check on it as the BTL's coll_map makes it.
 */
#ifndef TESTS_MP_COLL_OWNER_H
#define TESTS_MP_COLL_OWNER_H

#include "../testutil.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

/* the region file; this process' lease in it (the rank that reads or
 * writes the owner's memory, through whose mapping coll_map_owned checks),
 * and how many checks it made */
static char coll_path[256];
static ivshm_region_t *coll_mapper;
static unsigned coll_maps;

/* a fresh region named after name, with a lease timeout of lease_ms,
 * attached (cmocka's setup: 0 or -1) */
static int coll_region_setup(const char *name, uint32_t lease_ms)
{
    tu_region_path(coll_path, sizeof(coll_path), name);
    if (tu_format(coll_path, 32 << 20, 16, lease_ms) != IVSHM_OK)
        return -1;
    if (ivshm_region_open(tu_uri(coll_path), 0, &coll_mapper) != IVSHM_OK ||
        ivshm_attach(coll_mapper) != IVSHM_OK)
        return -1;
    return 0;
}

static int coll_region_teardown(void **state)
{
    (void)state;
    ivshm_region_close(coll_mapper);
    unlink(coll_path);
    return 0;
}

/* as the BTL's coll_map, on coll_mapper's mapping */
static int coll_map_owned(const ivshm_identity_t *owner, uint64_t off,
                          uint64_t len, void **addr)
{
    coll_maps++;
    ivshm_status_t st = ivshm_region_owned(coll_mapper, owner, off, len);
    *addr = st == IVSHM_OK ? (char *)ivshm_region_base(coll_mapper) + off
                           : NULL;
    return st;
}

/* The owner: a process that allocates `chunks` chunks of the region,
 * fills them with `fill`, reports its identity and the offset, and
 * waits to be killed. */
struct coll_owner {
    pid_t pid;
    ivshm_identity_t id;
    uint64_t off, len;
};

static void coll_fork_owner(uint32_t chunks, int fill, struct coll_owner *o)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        ivshm_region_t *r;
        ivshm_region_info_t ri;
        struct coll_owner me = {0};
        if (ivshm_region_open(tu_uri(coll_path), 0, &r) != IVSHM_OK ||
            ivshm_attach(r) != IVSHM_OK || ivshm_region_info(r, &ri) != IVSHM_OK)
            _exit(9);
        me.len = (uint64_t)chunks * ri.chunk_size;
        if (ivshm_alloc(r, me.len, &me.off) != IVSHM_OK ||
            ivshm_self_identity(r, &me.id) != IVSHM_OK)
            _exit(9);
        memset((char *)ivshm_region_base(r) + me.off, fill, me.len);
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

/* Kills the owner, releases its lease as a gc of its VM does (its pid is
 * gone), waits out the cooling of its chunks, and has a new process of the
 * region take every chunk it can and fill it with 0x55: returns that
 * process (closed by the caller) and, in *taken, how many of the owner's
 * chunks it got. */
static ivshm_region_t *coll_hand_over(struct coll_owner *o, unsigned *taken)
{
    ivshm_region_t *bystander;
    ivshm_region_info_t ri;
    uint64_t off;
    kill(o->pid, SIGKILL);
    waitpid(o->pid, NULL, 0);
    assert_int_equal(ivshm_gc(coll_mapper, NULL), IVSHM_OK);
    assert_int_equal(ivshm_region_open(tu_uri(coll_path), 0, &bystander), IVSHM_OK);
    assert_int_equal(ivshm_attach(bystander), IVSHM_OK);
    ivshm_region_info(bystander, &ri);
    /* a dead owner's chunks cool for one lease timeout before anybody may
     * take them (docs/lifetimes.md); the allocator frees them after it */
    usleep((ri.lease_timeout_ms + 100) * 1000u);
    *taken = 0;
    while (ivshm_alloc(bystander, ri.chunk_size, &off) == IVSHM_OK) {
        memset((char *)ivshm_region_base(bystander) + off, 0x55,
               ri.chunk_size);
        *taken += off >= o->off && off < o->off + o->len;
    }
    return bystander;
}

#endif
