/*
 * The region heap: large heap blocks of a process placed in the shared
 * region, so that a peer in another VM reads them with one copy.
 *
 * libivshm-heap.so replaces malloc and its family (LD_PRELOAD, or linked
 * before the C library). Until a backend attaches, and for every block
 * below the threshold, it is the C library's allocator. A backend (the
 * MPI component, once it has mapped the region) hands it region memory;
 * blocks of at least IVSHM_HEAP_MIN bytes (default: 64 KiB, the region's
 * chunk) then come from the region while the backend says a peer can use
 * them, and from the C library otherwise or when the region is full: an
 * allocation never fails because the region is full.
 *
 * Every process that maps the region can read (and write) these blocks:
 * use it only with one region per tenant (docs/heap.md).
 *
 * The backend is found by name at run time (dlsym): the component does not
 * link this library, and a process without it is unchanged.
 */
#ifndef IVSHM_HEAP_H
#define IVSHM_HEAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IVSHM_HEAP_ABI 0x48500001u /* "HP", version 1 */
#define IVSHM_HEAP_ENV_MIN "IVSHM_HEAP_MIN"
#define IVSHM_HEAP_DEFAULT_MIN (64u * 1024u)

/* What a backend offers. Its functions are called from any thread, with no
 * lock of the heap held, and must not call malloc for blocks of the
 * threshold's size or more. */
typedef struct ivshm_heap_backend {
    uint32_t abi; /* IVSHM_HEAP_ABI */
    /* would a block in the region be read by a peer (else: C library) */
    int (*useful)(void);
    /* size bytes, page aligned, inside the mapping, zeroed (calloc relies
     * on it); NULL when full */
    void *(*alloc)(size_t size);
    void (*free)(void *p);
} ivshm_heap_backend_t;

/* Attaches a backend (the structure is copied). Returns 0, or -1 when the
 * abi differs or a backend is attached already. */
int ivshm_heap_attach(const ivshm_heap_backend_t *b);

/* Detaches the backend: every live region block moves to private memory
 * at the same address, its contents kept, and is given back to the
 * backend; kept(addr, len, arg) is then called for each, after the heap
 * has let go of its locks: the mapping's owner must leave those pages
 * alone when it unmaps the region (ivshm_region_keep_range). Later
 * allocations come from the C library. Returns the number of blocks
 * moved. */
typedef void (*ivshm_heap_kept_fn)(void *addr, size_t len, void *arg);
size_t ivshm_heap_detach(ivshm_heap_kept_fn kept, void *arg);

typedef struct ivshm_heap_stats {
    uint64_t region_allocs; /* blocks taken from the region */
    uint64_t region_bytes;  /* their bytes */
    uint64_t region_live;   /* region blocks not yet freed */
    uint64_t fallbacks;     /* large blocks the region had no room for */
    uint64_t private_large; /* large blocks from the C library otherwise */
    uint64_t moved;         /* blocks moved to private memory (detach, fork) */
    size_t threshold;       /* IVSHM_HEAP_MIN */
    int attached;
    /* new fields go here, at the end: the library fills the structure */
    size_t table_slots;     /* slots of the table of large blocks */
} ivshm_heap_stats_t;
void ivshm_heap_stats(ivshm_heap_stats_t *s);

#ifdef __cplusplus
}
#endif
#endif
