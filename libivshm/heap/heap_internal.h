/*
 * What the parts of libivshm-heap.so share (heap.c: the entry points and
 * the backend; heap_table.c: the table of large blocks; heap_move.c:
 * moving region blocks to private memory at detach and fork). Nothing here
 * is exported: the library exports only malloc's family and ivshm_heap_*.
 *
 * Locks: `life` is read-held around every call into the backend and
 * write-held while a backend attaches or detaches and across fork(), so a
 * region block never outlives its backend; `tab_lock` guards the table.
 * Order: life, then tab_lock. Blocks below the threshold take neither, and
 * free() takes them only for addresses inside [lo, hi), the span of every
 * block the table ever held.
 */
#ifndef IVSHM_HEAP_INTERNAL_H
#define IVSHM_HEAP_INTERNAL_H

#include <ivshm/heap.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HEAP_HIDDEN __attribute__((visibility("hidden")))
#define RELAXED memory_order_relaxed

enum { BLK_FREE = 0, BLK_REGION = 1, BLK_PRIVATE = 2 };

struct blk {
    uintptr_t addr;
    size_t len; /* mapped bytes: the request rounded up to pages */
    unsigned state;
};

struct heap_state {
    pthread_rwlock_t life;
    pthread_mutex_t tab_lock;
    struct blk *tab; /* open addressing, linear probing, mmap'd */
    size_t cap;      /* power of two, or 0 */
    size_t live;     /* entries: the blocks not yet freed */
    ivshm_heap_backend_t be;
    _Atomic int attached;
    _Atomic uintptr_t lo, hi;
    size_t min;
    size_t page;
    size_t (*libc_usable)(void *);
    _Atomic uint64_t region_allocs, region_bytes, region_live, fallbacks,
        private_large, moved;
};
extern struct heap_state heap HEAP_HIDDEN;

/* one line on stderr, without malloc */
void heap__say(const char *fmt, size_t a) HEAP_HIDDEN;

/* the block table (heap_table.c); tab_lock held */
long heap__tab_find(uintptr_t a) HEAP_HIDDEN;
bool heap__tab_insert(uintptr_t a, size_t len, unsigned state) HEAP_HIDDEN;
/* entry i goes (its block freed); the table may shrink */
void heap__tab_remove(size_t i) HEAP_HIDDEN;
/* within the span of every block the table ever held (no lock) */
bool heap__may_be_ours(const void *p) HEAP_HIDDEN;

/* moving region blocks to private memory (heap_move.c) */
void heap__fork_prepare(void) HEAP_HIDDEN;
void heap__fork_parent(void) HEAP_HIDDEN;
void heap__fork_child(void) HEAP_HIDDEN;

#endif
