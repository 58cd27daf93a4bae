/*
 * Moving region blocks to private memory at the same address: at detach
 * (the backend goes, the blocks stay the application's) and in a fork
 * child (the region's pages are the parent's). See docs/heap.md.
 */
#define _GNU_SOURCE
#include "heap_internal.h"

#include <string.h>
#include <sys/mman.h>

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
    heap__say("ivshm heap: no memory to keep a %zu-byte buffer out of the shared "
        "region; its pages are now inaccessible\n", len);
    return false;
}

/* Every region block becomes private (life and tab_lock held); give_back:
 * the chunks go back to the backend (detach), not in a fork child, where
 * they are the parent's. Returns the blocks moved; their ranges in
 * *ranges (mmap'd, *n entries) when ranges is not NULL. */
size_t heap__privatize_all(bool give_back, struct blk **ranges)
{
    size_t n = 0;
    for (size_t i = 0; i < heap.cap; i++)
        n += heap.tab[i].state == BLK_REGION;
    if (ranges) {
        *ranges = NULL;
        if (n) {
            void *m = mmap(NULL, n * sizeof(struct blk), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            *ranges = m == MAP_FAILED ? NULL : m;
            if (!*ranges)
                heap__say("ivshm heap: no memory to list %zu live buffers for the "
                    "region's owner; they go when the region is unmapped\n", n);
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < heap.cap; i++) {
        struct blk *b = &heap.tab[i];
        if (b->state != BLK_REGION)
            continue;
        privatize(b->addr, b->len);
        if (give_back)
            heap.be.free((void *)b->addr);
        b->state = BLK_PRIVATE;
        if (ranges && *ranges)
            (*ranges)[k] = *b;
        k++;
    }
    atomic_fetch_add_explicit(&heap.moved, k, RELAXED);
    atomic_store_explicit(&heap.region_live, 0, RELAXED);
    atomic_store_explicit(&heap.attached, 0, RELAXED);
    memset(&heap.be, 0, sizeof(heap.be));
    return k;
}

size_t ivshm_heap_detach(ivshm_heap_kept_fn kept, void *arg)
{
    pthread_rwlock_wrlock(&heap.life);
    pthread_mutex_lock(&heap.tab_lock);
    struct blk *ranges = NULL;
    size_t n = atomic_load_explicit(&heap.attached, RELAXED)
                   ? heap__privatize_all(true, &ranges)
                   : 0;
    pthread_mutex_unlock(&heap.tab_lock);
    pthread_rwlock_unlock(&heap.life);
    if (ranges) {
        for (size_t i = 0; i < n && kept; i++)
            kept((void *)ranges[i].addr, ranges[i].len, arg);
        munmap(ranges, n * sizeof(*ranges));
    }
    return n;
}

/* ---- fork: the child gets private copies, as with any other memory ---- */

void heap__fork_prepare(void)
{
    pthread_rwlock_wrlock(&heap.life);
    pthread_mutex_lock(&heap.tab_lock);
}

void heap__fork_parent(void)
{
    pthread_mutex_unlock(&heap.tab_lock);
    pthread_rwlock_unlock(&heap.life);
}

/* A child shares the parent's region mapping: its writes to a region block
 * would land in the parent's buffer, and its frees would free the parent's
 * chunks. Each block becomes a private copy, and the child allocates from
 * the C library only (it holds no lease of its own). */
void heap__fork_child(void)
{
    if (atomic_load_explicit(&heap.attached, RELAXED))
        heap__privatize_all(false, NULL);
    /* the child's one thread has a new id: the locks the parent's thread
     * took in fork_prepare are made anew, not unlocked */
    pthread_mutex_init(&heap.tab_lock, NULL);
    pthread_rwlock_init(&heap.life, NULL);
}
