/*
 * libivshm-heap.so: malloc and its family, with large blocks placed in
 * the shared region once a backend (the MPI component) attaches. See
 * ivshm/heap.h for the contract and docs/heap.md for the decisions.
 *
 * Owns: the table of large blocks it handed out (address, mapped length,
 * whether the region or private memory holds it), the attached backend and
 * the counters. Everything else goes to the C library's allocator
 * (__libc_malloc and friends), which keeps owning its own blocks.
 *
 * Locks: `life` is read-held around every call into the backend and
 * write-held while a backend attaches or detaches and across fork(), so a
 * region block never outlives its backend; `tab_lock` guards the table.
 * Order: life, then tab_lock. Blocks below the threshold take neither, and
 * free() takes them only for addresses inside [lo, hi), the span of every
 * block the table ever held.
 */
#define _GNU_SOURCE
#include <ivshm/heap.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
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

enum { BLK_FREE = 0, BLK_REGION = 1, BLK_PRIVATE = 2, BLK_TOMB = 3 };

struct blk {
    uintptr_t addr;
    size_t len; /* mapped bytes: the request rounded up to pages */
    unsigned state;
};

static struct {
    pthread_rwlock_t life;
    pthread_mutex_t tab_lock;
    struct blk *tab; /* open addressing, linear probing, mmap'd */
    size_t cap;      /* power of two, or 0 */
    size_t used;     /* live entries and tombstones */
    ivshm_heap_backend_t be;
    _Atomic int attached;
    _Atomic uintptr_t lo, hi;
    size_t min;
    size_t page;
    size_t (*libc_usable)(void *);
    _Atomic uint64_t region_allocs, region_bytes, region_live, fallbacks,
        private_large, moved;
} H = {
    .life = PTHREAD_RWLOCK_INITIALIZER,
    .tab_lock = PTHREAD_MUTEX_INITIALIZER,
    .min = IVSHM_HEAP_DEFAULT_MIN,
    .page = 4096,
};

#define RELAXED memory_order_relaxed

static void say(const char *fmt, size_t a)
{
    char buf[256];
    int n = snprintf(buf, sizeof(buf), fmt, a);
    if (n > 0)
        (void)!write(2, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* ---- the block table (tab_lock held) ---- */

static size_t slot_of(uintptr_t a, size_t cap)
{
    return (size_t)(((a >> 12) * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

static long tab_find(uintptr_t a)
{
    if (!H.cap)
        return -1;
    for (size_t i = slot_of(a, H.cap), n = 0; n < H.cap;
         i = (i + 1) & (H.cap - 1), n++) {
        if (H.tab[i].state == BLK_FREE)
            return -1;
        if (H.tab[i].addr == a && H.tab[i].state != BLK_TOMB)
            return (long)i;
    }
    return -1;
}

static void tab_put(struct blk *tab, size_t cap, struct blk b)
{
    size_t i = slot_of(b.addr, cap);
    while (tab[i].state != BLK_FREE && tab[i].state != BLK_TOMB)
        i = (i + 1) & (cap - 1);
    tab[i] = b;
}

static bool tab_grow(void)
{
    size_t cap = H.cap ? H.cap * 2 : 1024;
    struct blk *t = mmap(NULL, cap * sizeof(*t), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED)
        return false;
    size_t used = 0;
    for (size_t i = 0; i < H.cap; i++)
        if (H.tab[i].state == BLK_REGION || H.tab[i].state == BLK_PRIVATE) {
            tab_put(t, cap, H.tab[i]);
            used++;
        }
    if (H.tab)
        munmap(H.tab, H.cap * sizeof(*H.tab));
    H.tab = t;
    H.cap = cap;
    H.used = used;
    return true;
}

static bool tab_insert(uintptr_t a, size_t len, unsigned state)
{
    if ((H.used + 1) * 2 > H.cap && !tab_grow())
        return false;
    tab_put(H.tab, H.cap, (struct blk){a, len, state});
    H.used++;
    if (a < atomic_load_explicit(&H.lo, RELAXED) ||
        !atomic_load_explicit(&H.hi, RELAXED))
        atomic_store_explicit(&H.lo, a, RELAXED);
    if (a + len > atomic_load_explicit(&H.hi, RELAXED))
        atomic_store_explicit(&H.hi, a + len, RELAXED);
    return true;
}

static bool may_be_ours(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return a >= atomic_load_explicit(&H.lo, RELAXED) &&
           a < atomic_load_explicit(&H.hi, RELAXED);
}

/* ---- moving a region block to private memory, same address ---- */

/* The pages at [a, a + len) become private anonymous memory holding what
 * they held. Without memory for the copy they become inaccessible: a
 * fault, never a write into memory another process owns. */
static bool privatize(uintptr_t a, size_t len)
{
    void *tmp = mmap(NULL, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (tmp != MAP_FAILED) {
        memcpy(tmp, (void *)a, len);
        if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
                   (void *)a) != MAP_FAILED)
            return true;
        munmap(tmp, len);
    }
    mmap((void *)a, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
         -1, 0);
    say("ivshm heap: no memory to keep a %zu-byte buffer out of the shared "
        "region; its pages are now inaccessible\n", len);
    return false;
}

/* ---- allocation paths ---- */

static size_t pages(size_t n)
{
    return n > SIZE_MAX - H.page ? 0 : (n + H.page - 1) & ~(H.page - 1);
}

/* A block of size bytes from the region, or NULL (C library's turn). */
static void *region_alloc(size_t size)
{
    if (size < H.min)
        return NULL;
    if (!atomic_load_explicit(&H.attached, memory_order_acquire)) {
        atomic_fetch_add_explicit(&H.private_large, 1, RELAXED);
        return NULL;
    }
    size_t len = pages(size);
    if (!len)
        return NULL;
    void *p = NULL;
    pthread_rwlock_rdlock(&H.life);
    if (!atomic_load_explicit(&H.attached, RELAXED) || !H.be.useful()) {
        atomic_fetch_add_explicit(&H.private_large, 1, RELAXED);
    } else if (!(p = H.be.alloc(len))) {
        atomic_fetch_add_explicit(&H.fallbacks, 1, RELAXED);
    } else {
        pthread_mutex_lock(&H.tab_lock);
        bool in = tab_insert((uintptr_t)p, len, BLK_REGION);
        pthread_mutex_unlock(&H.tab_lock);
        if (in) {
            atomic_fetch_add_explicit(&H.region_allocs, 1, RELAXED);
            atomic_fetch_add_explicit(&H.region_bytes, len, RELAXED);
            atomic_fetch_add_explicit(&H.region_live, 1, RELAXED);
        } else {
            H.be.free(p);
            p = NULL;
        }
    }
    pthread_rwlock_unlock(&H.life);
    return p;
}

/* Frees p if it is one of ours; false: the C library's. */
static bool heap_free(void *p)
{
    if (!may_be_ours(p))
        return false;
    pthread_rwlock_rdlock(&H.life);
    pthread_mutex_lock(&H.tab_lock);
    long i = tab_find((uintptr_t)p);
    struct blk b = {0, 0, BLK_FREE};
    if (i >= 0) {
        b = H.tab[i];
        H.tab[i].state = BLK_TOMB;
    }
    pthread_mutex_unlock(&H.tab_lock);
    if (b.state == BLK_REGION) {
        H.be.free(p);
        atomic_fetch_sub_explicit(&H.region_live, 1, RELAXED);
    } else if (b.state == BLK_PRIVATE) {
        munmap(p, b.len);
    }
    pthread_rwlock_unlock(&H.life);
    return i >= 0;
}

/* Mapped length and state of one of our blocks; 0 for the C library's. */
static size_t heap_len(const void *p, unsigned *state)
{
    if (!may_be_ours(p))
        return 0;
    pthread_mutex_lock(&H.tab_lock);
    long i = tab_find((uintptr_t)p);
    size_t len = i >= 0 ? H.tab[i].len : 0;
    if (i >= 0 && state)
        *state = H.tab[i].state;
    pthread_mutex_unlock(&H.tab_lock);
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
    void *p = region_alloc(total);
    if (p) {
        memset(p, 0, total); /* region chunks hold what they last held */
        return p;
    }
    return __libc_calloc(n, size);
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
        if (size <= cur && (size >= H.min || state == BLK_PRIVATE))
            return p;
        void *q = malloc(size);
        if (!q)
            return NULL;
        memcpy(q, p, size < cur ? size : cur);
        free(p);
        return q;
    }
    if (size >= H.min && H.libc_usable) {
        void *q = region_alloc(size);
        if (q) {
            size_t old = H.libc_usable(p);
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

static bool valid_align(size_t align)
{
    return align && !(align & (align - 1));
}

/* Region chunks are page aligned: larger alignments go to the C library. */
static void *aligned(size_t align, size_t size)
{
    void *p = align <= H.page ? region_alloc(size) : NULL;
    return p ? p : __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    if (!valid_align(align) || align % sizeof(void *))
        return EINVAL;
    void *p = aligned(align, size);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t size)
{
    if (!valid_align(align)) {
        errno = EINVAL;
        return NULL;
    }
    return aligned(align, size);
}

void *memalign(size_t align, size_t size)
{
    if (!valid_align(align)) {
        errno = EINVAL;
        return NULL;
    }
    return aligned(align, size);
}

void *valloc(size_t size) { return aligned(H.page, size); }

void *pvalloc(size_t size)
{
    size_t len = pages(size ? size : 1);
    if (!len) {
        errno = ENOMEM;
        return NULL;
    }
    return aligned(H.page, len);
}

size_t malloc_usable_size(void *p)
{
    if (!p)
        return 0;
    size_t len = heap_len(p, NULL);
    if (len)
        return len;
    return H.libc_usable ? H.libc_usable(p) : 0;
}

/* ---- backends ---- */

int ivshm_heap_attach(const ivshm_heap_backend_t *b)
{
    if (!b || b->abi != IVSHM_HEAP_ABI || !b->useful || !b->alloc || !b->free)
        return -1;
    pthread_rwlock_wrlock(&H.life);
    int rc = -1;
    if (!atomic_load_explicit(&H.attached, RELAXED)) {
        H.be = *b;
        atomic_store_explicit(&H.attached, 1, memory_order_release);
        rc = 0;
    }
    pthread_rwlock_unlock(&H.life);
    return rc;
}

/* Every region block becomes private (life and tab_lock held); give_back:
 * the chunks go back to the backend (detach), not in a fork child, where
 * they are the parent's. Returns the blocks moved; their ranges in
 * *ranges (mmap'd, *n entries) when ranges is not NULL. */
static size_t privatize_all(bool give_back, struct blk **ranges)
{
    size_t n = 0;
    for (size_t i = 0; i < H.cap; i++)
        n += H.tab[i].state == BLK_REGION;
    if (ranges) {
        *ranges = NULL;
        if (n) {
            void *m = mmap(NULL, n * sizeof(struct blk), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            *ranges = m == MAP_FAILED ? NULL : m;
            if (!*ranges)
                say("ivshm heap: no memory to list %zu live buffers for the "
                    "region's owner; they go when the region is unmapped\n", n);
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < H.cap; i++) {
        struct blk *b = &H.tab[i];
        if (b->state != BLK_REGION)
            continue;
        privatize(b->addr, b->len);
        if (give_back)
            H.be.free((void *)b->addr);
        b->state = BLK_PRIVATE;
        if (ranges && *ranges)
            (*ranges)[k] = *b;
        k++;
    }
    atomic_fetch_add_explicit(&H.moved, k, RELAXED);
    atomic_store_explicit(&H.region_live, 0, RELAXED);
    atomic_store_explicit(&H.attached, 0, RELAXED);
    memset(&H.be, 0, sizeof(H.be));
    return k;
}

size_t ivshm_heap_detach(ivshm_heap_kept_fn kept, void *arg)
{
    pthread_rwlock_wrlock(&H.life);
    pthread_mutex_lock(&H.tab_lock);
    struct blk *ranges = NULL;
    size_t n = atomic_load_explicit(&H.attached, RELAXED)
                   ? privatize_all(true, &ranges)
                   : 0;
    pthread_mutex_unlock(&H.tab_lock);
    pthread_rwlock_unlock(&H.life);
    if (ranges) {
        for (size_t i = 0; i < n && kept; i++)
            kept((void *)ranges[i].addr, ranges[i].len, arg);
        munmap(ranges, n * sizeof(*ranges));
    }
    return n;
}

void ivshm_heap_stats(ivshm_heap_stats_t *s)
{
    s->region_allocs = atomic_load_explicit(&H.region_allocs, RELAXED);
    s->region_bytes = atomic_load_explicit(&H.region_bytes, RELAXED);
    s->region_live = atomic_load_explicit(&H.region_live, RELAXED);
    s->fallbacks = atomic_load_explicit(&H.fallbacks, RELAXED);
    s->private_large = atomic_load_explicit(&H.private_large, RELAXED);
    s->moved = atomic_load_explicit(&H.moved, RELAXED);
    s->threshold = H.min;
    s->attached = atomic_load_explicit(&H.attached, RELAXED);
}

/* ---- fork: the child gets private copies, as with any other memory ---- */

static void fork_prepare(void)
{
    pthread_rwlock_wrlock(&H.life);
    pthread_mutex_lock(&H.tab_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&H.tab_lock);
    pthread_rwlock_unlock(&H.life);
}

/* A child shares the parent's region mapping: its writes to a region block
 * would land in the parent's buffer, and its frees would free the parent's
 * chunks. Each block becomes a private copy, and the child allocates from
 * the C library only (it holds no lease of its own). */
static void fork_child(void)
{
    if (atomic_load_explicit(&H.attached, RELAXED))
        privatize_all(false, NULL);
    /* the child's one thread has a new id: the locks the parent's thread
     * took in fork_prepare are made anew, not unlocked */
    pthread_mutex_init(&H.tab_lock, NULL);
    pthread_rwlock_init(&H.life, NULL);
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
        H.page = (size_t)pg;
    size_t min = parse_size(getenv(IVSHM_HEAP_ENV_MIN), IVSHM_HEAP_DEFAULT_MIN);
    H.min = min < H.page ? H.page : min;
    H.libc_usable = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
