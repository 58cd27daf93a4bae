/*
 * libivshm-heap.so: malloc and its family, with large blocks placed in
 * the shared region once a backend (the MPI component) attaches. See
 * ivshm/heap.h for the contract and docs/heap.md for the decisions.
 *
 * This file: the entry points, the allocation paths and the backend. The
 * heap owns the table of large blocks it handed out (heap_table.c), the
 * attached backend and the counters; moving blocks to private memory is
 * heap_move.c. Everything else goes to the C library's allocator
 * (__libc_malloc and friends), which keeps owning its own blocks. Locks:
 * heap_internal.h.
 */
#define _GNU_SOURCE
#include "heap_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* the C library's allocator, under the names it exports for this use */
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *p);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);
extern void *__libc_pvalloc(size_t size);

struct heap_state heap = {
    .life = PTHREAD_RWLOCK_INITIALIZER,
    .tab_lock = PTHREAD_MUTEX_INITIALIZER,
    .min = IVSHM_HEAP_DEFAULT_MIN,
    .page = 4096,
};

void heap__say(const char *fmt, size_t a)
{
    char buf[256];
    int n = snprintf(buf, sizeof(buf), fmt, a);
    if (n > 0)
        (void)!write(2, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* ---- allocation paths ---- */

static size_t pages(size_t n)
{
    return n > SIZE_MAX - heap.page ? 0 : (n + heap.page - 1) & ~(heap.page - 1);
}

/* A block of size bytes from the region, or NULL (C library's turn).
 * Sizes over PTRDIFF_MAX go to the C library, which refuses them (ENOMEM)
 * before any arithmetic on them can wrap. errno stays as it was, as a
 * call that does not fail leaves it. */
static void *region_alloc(size_t size)
{
    if (size < heap.min || size > PTRDIFF_MAX)
        return NULL;
    if (!atomic_load_explicit(&heap.attached, memory_order_acquire)) {
        atomic_fetch_add_explicit(&heap.private_large, 1, RELAXED);
        return NULL;
    }
    size_t len = pages(size);
    if (!len)
        return NULL;
    void *p = NULL;
    int saved_errno = errno;
    pthread_rwlock_rdlock(&heap.life);
    if (!atomic_load_explicit(&heap.attached, RELAXED) || !heap.be.useful()) {
        atomic_fetch_add_explicit(&heap.private_large, 1, RELAXED);
    } else if (!(p = heap.be.alloc(len))) {
        atomic_fetch_add_explicit(&heap.fallbacks, 1, RELAXED);
    } else {
        pthread_mutex_lock(&heap.tab_lock);
        bool in = heap__tab_insert((uintptr_t)p, len, BLK_REGION);
        pthread_mutex_unlock(&heap.tab_lock);
        if (in) {
            atomic_fetch_add_explicit(&heap.region_allocs, 1, RELAXED);
            atomic_fetch_add_explicit(&heap.region_bytes, len, RELAXED);
            atomic_fetch_add_explicit(&heap.region_live, 1, RELAXED);
        } else {
            heap.be.free(p);
            p = NULL;
        }
    }
    pthread_rwlock_unlock(&heap.life);
    errno = saved_errno;
    return p;
}

/* Frees p if it is one of ours; false: the C library's. errno stays as
 * it was (glibc's free keeps it since 2.33). */
static bool heap_free(void *p)
{
    if (!heap__may_be_ours(p))
        return false;
    int saved_errno = errno;
    pthread_rwlock_rdlock(&heap.life);
    pthread_mutex_lock(&heap.tab_lock);
    long i = heap__tab_find((uintptr_t)p);
    struct blk b = {0, 0, BLK_FREE};
    if (i >= 0) {
        b = heap.tab[i];
        heap__tab_remove((size_t)i);
    }
    pthread_mutex_unlock(&heap.tab_lock);
    if (b.state == BLK_REGION) {
        heap.be.free(p);
        atomic_fetch_sub_explicit(&heap.region_live, 1, RELAXED);
    } else if (b.state == BLK_PRIVATE) {
        munmap(p, b.len);
    }
    pthread_rwlock_unlock(&heap.life);
    errno = saved_errno;
    return i >= 0;
}

/* Mapped length and state of one of our blocks; 0 for the C library's. */
static size_t heap_len(const void *p, unsigned *state)
{
    if (!heap__may_be_ours(p))
        return 0;
    pthread_mutex_lock(&heap.tab_lock);
    long i = heap__tab_find((uintptr_t)p);
    size_t len = i >= 0 ? heap.tab[i].len : 0;
    if (i >= 0 && state)
        *state = heap.tab[i].state;
    pthread_mutex_unlock(&heap.tab_lock);
    return len;
}

void *malloc(size_t size)
{
    void *p = region_alloc(size);
    return p ? p : __libc_malloc(size);
}

void free(void *p)
{
    if (p && !heap_free(p))
        __libc_free(p);
}

void *calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    /* the backend hands out zeroed memory (ivshm/heap.h): the region's
     * allocator scrubs chunks for every new owner (docs/lifetimes.md) */
    void *p = region_alloc(total);
    return p ? p : __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    if (!p)
        return malloc(size);
    if (size == 0) { /* the C library's rule: free, return NULL */
        free(p);
        return NULL;
    }
    unsigned state = BLK_FREE;
    size_t cur = heap_len(p, &state);
    if (cur) {
        if (size <= cur && (size >= heap.min || state == BLK_PRIVATE))
            return p;
        void *q = malloc(size);
        if (!q)
            return NULL;
        memcpy(q, p, size < cur ? size : cur);
        free(p);
        return q;
    }
    if (size >= heap.min && heap.libc_usable) {
        void *q = region_alloc(size);
        if (q) {
            size_t old = heap.libc_usable(p);
            memcpy(q, p, old < size ? old : size);
            __libc_free(p);
            return q;
        }
    }
    return __libc_realloc(p, size);
}

void *reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, total);
}

/* The aligned entry points keep the C library's rules, whatever its
 * version (docs/heap.md, "Conformance"; tests/mp/test_heap_conform.sh
 * holds them to glibc). glibc's memalign serves an alignment up to
 * malloc's own (16) as malloc, rounds any other up to a power of two and
 * refuses (EINVAL) only one above the largest power of two. Region chunks
 * are page aligned, so the region serves every alignment up to a page
 * that memalign accepts; the C library takes the larger ones and judges
 * them itself. */
static void *aligned(size_t align, size_t size)
{
    void *p = align <= heap.page ? region_alloc(size) : NULL;
    return p ? p : __libc_memalign(align, size);
}

void *memalign(size_t align, size_t size) { return aligned(align, size); }

/* The next aligned_alloc in the lookup order (the C library's), found at
 * init; NULL before init or where there is none. */
static void *(*next_aligned_alloc)(size_t align, size_t size);

/* aligned_alloc's rules differ between glibc versions: up to 2.37 it is
 * memalign; from 2.38 an alignment that is not a power of two (0
 * included) is refused with EINVAL. So the heap serves only the
 * alignments every version serves (powers of two up to a page) and hands
 * any other to the C library's aligned_alloc, whose answer it keeps. */
void *aligned_alloc(size_t align, size_t size)
{
    bool ours = align && !(align & (align - 1)) && align <= heap.page;
    void *p = ours ? region_alloc(size) : NULL;
    if (p)
        return p;
    return next_aligned_alloc ? next_aligned_alloc(align, size)
                              : __libc_memalign(align, size);
}

/* a power of two multiple of sizeof(void *), as POSIX and glibc ask */
int posix_memalign(void **out, size_t align, size_t size)
{
    if (!align || (align & (align - 1)) || align % sizeof(void *))
        return EINVAL;
    void *p = aligned(align, size);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *valloc(size_t size) { return aligned(heap.page, size); }

/* A region block is whole pages anyway; the C library's pvalloc keeps its
 * own rounding (in 2.36, pvalloc(0) is less than a page). */
void *pvalloc(size_t size)
{
    size_t len = pages(size);
    void *p = len ? region_alloc(len) : NULL;
    return p ? p : __libc_pvalloc(size);
}

size_t malloc_usable_size(void *p)
{
    if (!p)
        return 0;
    size_t len = heap_len(p, NULL);
    if (len)
        return len;
    return heap.libc_usable ? heap.libc_usable(p) : 0;
}

/* ---- backends ---- */

int ivshm_heap_attach(const ivshm_heap_backend_t *b)
{
    if (!b || b->abi != IVSHM_HEAP_ABI || !b->useful || !b->alloc || !b->free)
        return -1;
    pthread_rwlock_wrlock(&heap.life);
    int rc = -1;
    if (!atomic_load_explicit(&heap.attached, RELAXED)) {
        heap.be = *b;
        atomic_store_explicit(&heap.attached, 1, memory_order_release);
        rc = 0;
    }
    pthread_rwlock_unlock(&heap.life);
    return rc;
}

void ivshm_heap_stats(ivshm_heap_stats_t *s)
{
    s->region_allocs = atomic_load_explicit(&heap.region_allocs, RELAXED);
    s->region_bytes = atomic_load_explicit(&heap.region_bytes, RELAXED);
    s->region_live = atomic_load_explicit(&heap.region_live, RELAXED);
    s->fallbacks = atomic_load_explicit(&heap.fallbacks, RELAXED);
    s->private_large = atomic_load_explicit(&heap.private_large, RELAXED);
    s->moved = atomic_load_explicit(&heap.moved, RELAXED);
    s->threshold = heap.min;
    s->attached = atomic_load_explicit(&heap.attached, RELAXED);
    pthread_mutex_lock(&heap.tab_lock);
    s->table_slots = heap.cap;
    pthread_mutex_unlock(&heap.tab_lock);
}

static size_t parse_size(const char *s, size_t def)
{
    if (!s || !*s)
        return def;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s)
        return def;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    }
    return *end ? def : (size_t)v;
}

__attribute__((constructor)) static void heap_init(void)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (pg > 0)
        heap.page = (size_t)pg;
    size_t min = parse_size(getenv(IVSHM_HEAP_ENV_MIN), IVSHM_HEAP_DEFAULT_MIN);
    heap.min = min < heap.page ? heap.page : min;
    heap.libc_usable = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    next_aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
    pthread_atfork(heap__fork_prepare, heap__fork_parent, heap__fork_child);
}
