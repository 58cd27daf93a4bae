/* The heap tests' backend: the region's chunk allocator under this
 * process' lease on R, as the MPI component gives it (test_heap.c,
 * test_heap_move.c). Include after cmocka.h and testutil.h. */
#ifndef IVSHM_TEST_HEAP_BACKEND_H
#define IVSHM_TEST_HEAP_BACKEND_H

#include <ivshm/heap.h>

#include <stdbool.h>

static char path[256];
static ivshm_region_t *R;

static int be_useful(void) { return 1; }
static void *be_alloc(size_t size)
{
    uint64_t off;
    if (ivshm_alloc(R, size, &off) != IVSHM_OK)
        return NULL;
    return (char *)ivshm_region_base(R) + off;
}
static void be_free(void *p)
{
    /* called from the tests' threads too: no cmocka assertion here */
    if (ivshm_free(R, (uint64_t)((char *)p - (char *)ivshm_region_base(R))) != IVSHM_OK)
        abort();
}
static const ivshm_heap_backend_t backend = {
    .abi = IVSHM_HEAP_ABI, .useful = be_useful, .alloc = be_alloc, .free = be_free};

/* by address: the block's bytes are not read (fresh blocks are
 * uninitialised, which compilers warn about when a pointer is passed) */
static bool in_region_at(uintptr_t p, size_t len)
{
    uintptr_t b = (uintptr_t)ivshm_region_base(R);
    return p >= b && p + len <= b + ivshm_region_size(R);
}
#define in_region(p, len) in_region_at((uintptr_t)(p), (len))

/* ivshm_heap_detach's callback: the region is unmapped around the block */
static void keep(void *addr, size_t len, void *arg)
{
    (void)arg;
    assert_int_equal(ivshm_region_keep_range(R, addr, len), IVSHM_OK);
}

#endif
