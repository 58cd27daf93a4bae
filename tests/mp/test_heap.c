/*
 * The region heap (libivshm-heap.so), linked into this program ahead of
 * the C library, so that its malloc is the program's, as under LD_PRELOAD.
 * The backend is the one the MPI component gives it, over a real region:
 * a /dev/shm file, a lease, the chunk allocator. Each test formats its own
 * region and attaches; teardown detaches as MPI_Finalize does.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../testutil.h"
#include "../heap_region.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <spawn.h>
#include <sys/wait.h>

#define MIB (1u << 20)
#define REGION_SIZE (64u * MIB)

static int setup(void **state)
{
    (void)state;
    tu_region_path(heap_region_path, sizeof(heap_region_path), "heap");
    if (tu_format(heap_region_path, REGION_SIZE, 16, 5000) != IVSHM_OK ||
        ivshm_region_open(tu_uri(heap_region_path), 0, &heap_region) != IVSHM_OK ||
        ivshm_attach(heap_region) != IVSHM_OK)
        return -1;
    return ivshm_heap_attach(&heap_region_backend);
}

static int teardown(void **state)
{
    (void)state;
    ivshm_heap_detach(heap_region_keep, NULL);
    ivshm_region_close(heap_region);
    heap_region = NULL;
    unlink(heap_region_path);
    return 0;
}

static ivshm_heap_stats_t stats(void)
{
    ivshm_heap_stats_t s;
    ivshm_heap_stats(&s);
    return s;
}


/* A second backend is refused; small blocks stay with the C library,
 * large ones come from the region and go back to it. */
static void test_placement(void **state)
{
    (void)state;
    assert_int_equal(ivshm_heap_attach(&heap_region_backend), -1);
    ivshm_heap_stats_t s0 = stats();
    assert_int_equal(s0.threshold, IVSHM_HEAP_DEFAULT_MIN);
    char *small = malloc(100);
    assert_non_null(small);
    assert_false(heap_region_holds(small, 100));
    char *big = malloc(MIB);
    assert_true(heap_region_holds(big, MIB));
    assert_true(malloc_usable_size(big) >= MIB);
    heap_fill((unsigned char *)big, MIB, 1);
    assert_true(heap_intact((unsigned char *)big, MIB, 1));
    ivshm_heap_stats_t s1 = stats();
    assert_int_equal(s1.region_allocs, s0.region_allocs + 1);
    assert_int_equal(s1.region_live, s0.region_live + 1);
    free(big);
    assert_int_equal(stats().region_live, s0.region_live);
    /* the chunks are free again: the same place is handed out */
    char *again = malloc(MIB);
    assert_ptr_equal(again, big);
    free(again);
    free(small);
    /* just below and at the threshold */
    char *below = malloc(IVSHM_HEAP_DEFAULT_MIN - 1);
    char *at = malloc(IVSHM_HEAP_DEFAULT_MIN);
    assert_false(heap_region_holds(below, 1));
    assert_true(heap_region_holds(at, IVSHM_HEAP_DEFAULT_MIN));
    free(below);
    free(at);
}

static void test_calloc_and_aligned(void **state)
{
    (void)state;
    unsigned char *d = malloc(MIB);
    assert_true(heap_region_holds(d, MIB));
    memset(d, 0xab, MIB);
    /* read back, so that the compiler keeps the stores before free */
    assert_int_equal(((volatile unsigned char *)d)[MIB - 1], 0xab);
    free(d);
    unsigned char *z = calloc(MIB / 8, 8); /* the same, dirty chunks */
    assert_ptr_equal(z, d);
    for (size_t i = 0; i < MIB; i++)
        assert_int_equal(z[i], 0);
    free(z);
    volatile size_t huge = SIZE_MAX / 2; /* opaque to the compiler */
    assert_null(calloc(huge, 4)); /* overflow */
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 4096, MIB), 0);
    assert_true(heap_region_holds(p, MIB));
    free(p);
    /* alignments above a page are the C library's, and honoured */
    assert_int_equal(posix_memalign(&p, 2 * MIB, MIB), 0);
    assert_false(heap_region_holds(p, 1));
    assert_int_equal((uintptr_t)p % (2 * MIB), 0);
    free(p);
    assert_int_equal(posix_memalign(&p, 3, MIB), EINVAL);
    p = aligned_alloc(4096, 2 * MIB);
    assert_true(heap_region_holds(p, 2 * MIB));
    free(p);
    p = valloc(MIB);
    assert_true(heap_region_holds(p, MIB));
    free(p);
}

/* realloc keeps every byte across the threshold, both ways, and moves a
 * region block only when it must. */
static void test_realloc_across_threshold(void **state)
{
    (void)state;
    size_t small = 1000, big = 3 * MIB;
    unsigned char *p = malloc(small);
    heap_fill(p, small, 7);
    p = realloc(p, big);
    assert_true(heap_region_holds(p, big));
    assert_true(heap_intact(p, small, 7));
    heap_fill(p, big, 9);
    unsigned char *q = realloc(p, 2 * MIB); /* shrinks in place */
    assert_ptr_equal(q, p);
    q = realloc(q, 100); /* below the threshold: back to the C library */
    assert_false(heap_region_holds(q, 1));
    assert_true(heap_intact(q, 100, 9));
    q = reallocarray(q, 1024, 1024);
    assert_true(heap_region_holds(q, MIB));
    assert_true(heap_intact(q, 100, 9));
    volatile size_t huge = SIZE_MAX / 2;
    assert_null(reallocarray(q, huge, 4));
    assert_null(realloc(q, 0)); /* frees */
    assert_int_equal(stats().region_live, 0);
}

/* A full region never fails an allocation: the C library takes over. */
static void test_full_region(void **state)
{
    (void)state;
    enum { N = 128 };
    unsigned char *b[N];
    uint64_t fb = stats().fallbacks;
    size_t in = 0;
    for (int i = 0; i < N; i++) { /* 128 MiB into a 64 MiB region */
        b[i] = malloc(MIB);
        assert_non_null(b[i]);
        in += heap_region_holds(b[i], MIB);
        heap_fill(b[i], MIB, (unsigned)i);
    }
    assert_true(in > 16 && in < N);
    assert_true(stats().fallbacks >= fb + (N - in));
    for (int i = 0; i < N; i++) {
        assert_true(heap_intact(b[i], MIB, (unsigned)i));
        free(b[i]);
    }
    assert_int_equal(stats().region_live, 0);
}

/* Many threads allocate, write, check and free at once, small and large,
 * in and beyond the region; no block is ever handed out twice. */
static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    enum { SLOTS = 8 };
    unsigned char *held[SLOTS] = {0};
    size_t len[SLOTS] = {0};
    unsigned tag[SLOTS] = {0};
    for (int it = 0; it < 3000; it++) {
        int k = (int)(rand_r(&seed) % SLOTS);
        if (held[k]) {
            if (!heap_intact(held[k], len[k], tag[k]))
                return (void *)1;
            if (rand_r(&seed) % 4 == 0) {
                size_t n = (rand_r(&seed) % 2) ? (size_t)200 : (size_t)(rand_r(&seed) % (3 * MIB)) + 1;
                unsigned char *r = realloc(held[k], n);
                if (!r || !heap_intact(r, n < len[k] ? n : len[k], tag[k]))
                    return (void *)1;
                held[k] = r;
                len[k] = n;
                heap_fill(r, n, tag[k]);
                continue;
            }
            free(held[k]);
            held[k] = NULL;
            continue;
        }
        len[k] = (rand_r(&seed) % 3) ? (size_t)(rand_r(&seed) % 4096) + 1
                                       : (size_t)(rand_r(&seed) % (2 * MIB)) + 65536;
        held[k] = malloc(len[k]);
        if (!held[k])
            return (void *)1;
        tag[k] = seed;
        heap_fill(held[k], len[k], tag[k]);
    }
    for (int k = 0; k < SLOTS; k++) {
        if (held[k] && !heap_intact(held[k], len[k], tag[k]))
            return (void *)1;
        free(held[k]);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    enum { T = 8 };
    pthread_t th[T];
    uint64_t before = stats().region_allocs;
    for (int i = 0; i < T; i++)
        assert_int_equal(pthread_create(&th[i], NULL, churn, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < T; i++) {
        void *rv;
        pthread_join(th[i], &rv);
        assert_null(rv);
    }
    assert_true(stats().region_allocs > before + 100);
    assert_int_equal(stats().region_live, 0);
    /* every chunk came back: the whole heap is one free run again */
    void *all = malloc(48 * MIB);
    assert_true(heap_region_holds(all, 48 * MIB));
    free(all);
}

/* fork: the child writes its copy and frees it; the parent's block, in
 * the region, keeps every byte. The child allocates from the C library. */
static void test_fork_child_writes(void **state)
{
    (void)state;
    unsigned char *p = malloc(4 * MIB);
    assert_true(heap_region_holds(p, 4 * MIB));
    heap_fill(p, 4 * MIB, 3);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int rc = heap_intact(p, 4 * MIB, 3) ? 0 : 10; /* the child's copy */
        memset(p, 0xee, 4 * MIB);
        free(p); /* its own copy, not the parent's chunks */
        unsigned char *q = malloc(2 * MIB);
        if (!q || stats().attached)
            rc = 12;
        memset(q, 1, 2 * MIB);
        free(q);
        _exit(rc);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(heap_intact(p, 4 * MIB, 3));
    assert_true(heap_region_holds(p, 4 * MIB));
    assert_int_equal(stats().attached, 1);
    /* the parent's chunks were not freed by the child */
    uint64_t off = (uint64_t)(p - (unsigned char *)ivshm_region_base(heap_region));
    assert_int_equal(ivshm_free(heap_region, off), IVSHM_OK);
    assert_int_equal(ivshm_alloc(heap_region, 4 * MIB, &off), IVSHM_OK);
    assert_ptr_equal((unsigned char *)ivshm_region_base(heap_region) + off, p);
    free(p);
}

/* fork + exec and posix_spawn run a program; the parent is untouched. */
static void test_fork_exec(void **state)
{
    (void)state;
    unsigned char *p = malloc(MIB);
    heap_fill(p, MIB, 5);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", "exit 3", (char *)NULL);
        _exit(127);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(WEXITSTATUS(st), 3);
    char *argv[] = {"sh", "-c", "exit 4", NULL};
    extern char **environ;
    assert_int_equal(posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ), 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(WEXITSTATUS(st), 4);
    assert_true(heap_intact(p, MIB, 5));
    free(p);
}

/* Detach (MPI_Finalize): live blocks keep their address and contents in
 * private memory after the region is unmapped, and free() still works. */
static void test_detach_keeps_blocks(void **state)
{
    (void)state;
    unsigned char *a = malloc(MIB), *b = malloc(3 * MIB);
    char *small = malloc(64);
    /* one byte past a page: its last page must be the block's too */
    const size_t odd = 17 * 4096 + 1;
    unsigned char *o = malloc(odd);
    heap_fill(a, MIB, 21);
    heap_fill(b, 3 * MIB, 22);
    heap_fill(o, odd, 24);
    assert_true(heap_region_holds(a, MIB) && heap_region_holds(b, 3 * MIB));
    assert_true(heap_region_holds(o, odd));
    assert_true(malloc_usable_size(o) >= odd);
    uint64_t moved = stats().moved;
    assert_int_equal(ivshm_heap_detach(heap_region_keep, NULL), 3);
    assert_int_equal(stats().moved, moved + 3);
    assert_int_equal(stats().attached, 0);
    /* the chunks went back to the region while our lease held them */
    uint64_t off;
    assert_int_equal(ivshm_alloc(heap_region, 48 * MIB, &off), IVSHM_OK);
    assert_int_equal(ivshm_free(heap_region, off), IVSHM_OK);
    ivshm_region_close(heap_region);
    heap_region = NULL;
    assert_true(heap_intact(a, MIB, 21));
    assert_true(heap_intact(b, 3 * MIB, 22));
    assert_true(heap_intact(o, odd, 24)); /* its last byte moved with it */
    assert_true(malloc_usable_size(o) >= odd);
    heap_fill(o, odd, 25);
    free(o);
    heap_fill(a, MIB, 23); /* writable, private */
    assert_true(heap_intact(a, MIB, 23));
    assert_int_equal(malloc_usable_size(b), 3 * MIB);
    unsigned char *c = realloc(b, 4 * MIB);
    assert_true(heap_intact(c, 3 * MIB, 22));
    free(a);
    free(c);
    free(small);
    assert_int_equal(ivshm_region_open(tu_uri(heap_region_path), 0, &heap_region), IVSHM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_placement, setup, teardown),
        cmocka_unit_test_setup_teardown(test_calloc_and_aligned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_realloc_across_threshold, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_region, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fork_child_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fork_exec, setup, teardown),
        cmocka_unit_test_setup_teardown(test_detach_keeps_blocks, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
