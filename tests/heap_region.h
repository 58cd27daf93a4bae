/*
 * A real region with the heap's backend over it, as the MPI component
 * hands it to libivshm-heap.so: a /dev/shm file, this process' lease, the
 * chunk allocator. For the programs that run the heap over a region: its
 * table test, its conformance program and its churn benchmark.
 */
#ifndef IVSHM_HEAP_REGION_H
#define IVSHM_HEAP_REGION_H

#include "testutil.h"

#include <ivshm/heap.h>

#include <stdbool.h>
#include <stdint.h>

static ivshm_region_t *heap_region;
static char heap_region_path[256];

static int heap_region_useful(void) { return 1; }
static void *heap_region_alloc(size_t size)
{
    uint64_t off;
    if (ivshm_alloc(heap_region, size, &off) != IVSHM_OK)
        return NULL;
    return (char *)ivshm_region_base(heap_region) + off;
}
static void heap_region_free(void *p)
{
    /* a chunk the heap gives back is one it took: anything else is a bug */
    if (ivshm_free(heap_region, (uint64_t)((char *)p - (char *)ivshm_region_base(
                                               heap_region))) != IVSHM_OK)
        abort();
}
static const ivshm_heap_backend_t heap_region_backend = {
    .abi = IVSHM_HEAP_ABI,
    .useful = heap_region_useful,
    .alloc = heap_region_alloc,
    .free = heap_region_free,
};

/* Formats a region of size bytes (a fresh file named after tag) and
 * attaches this process to it; 0, or -1 with a message. The caller hands
 * heap_region_backend to ivshm_heap_attach. */
static inline int heap_region_open(const char *tag, uint64_t size)
{
    tu_region_path(heap_region_path, sizeof(heap_region_path), tag);
    if (tu_format(heap_region_path, size, 16, 5000) != IVSHM_OK ||
        ivshm_region_open(tu_uri(heap_region_path), 0, &heap_region) != IVSHM_OK ||
        ivshm_attach(heap_region) != IVSHM_OK) {
        fprintf(stderr, "region %s: %s\n", heap_region_path, ivshm_last_error());
        return -1;
    }
    return 0;
}

/* ivshm_heap_detach's callback: the moved blocks stay when the region goes */
static inline void heap_region_keep(void *addr, size_t len, void *arg)
{
    (void)arg;
    if (ivshm_region_keep_range(heap_region, addr, len) != IVSHM_OK)
        abort();
}

static inline void heap_region_close(void)
{
    ivshm_region_close(heap_region);
    heap_region = NULL;
    unlink(heap_region_path);
}

/* by address: a block's bytes are not read */
static inline bool heap_region_holds(const void *p, size_t len)
{
    uintptr_t b = (uintptr_t)ivshm_region_base(heap_region), a = (uintptr_t)p;
    return a >= b && a + len <= b + ivshm_region_size(heap_region);
}

/* A block's bytes as a function of their place and a seed, and whether
 * they still are: what the heap's tests write and check. */
static inline void heap_fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131u + seed);
}
static inline bool heap_intact(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 131u + seed))
            return false;
    return true;
}

/* The process' VmSize in KiB (the heap's own table shows there), 0 when
 * /proc cannot tell. */
static inline size_t heap_vm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kib = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmSize: %zu kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

#endif
