/*
 * The region heap's backend: when the process runs with libivshm-heap.so
 * (LD_PRELOAD, docs/heap.md), its large malloc blocks come from the
 * region this component mapped, so ob1's RGET reads them with one copy,
 * as it reads MPI_Alloc_mem buffers. Without that library nothing here
 * runs: the heap is found by name, never linked.
 *
 * Owns: the attachment (after the region route is set up) and the
 * detachment (first thing at teardown, while the lease still holds the
 * chunks: live blocks move to private memory at their address, and the
 * region's unmapping leaves those pages alone).
 *
 * The backend's functions run on any application thread, also outside
 * MPI calls and under MPI_THREAD_SINGLE: they are the component's unlocked
 * region alloc/free (the chunk allocator is safe between threads as
 * between processes: one CAS per chunk), never behind the component's lock
 * (a thread in malloc must not wait for one in MPI, which may itself be in
 * malloc).
 */
#include "btl_ivshmem.h"

#include <dlfcn.h>

#include <ivshm/heap.h>


/* the heap's entry points, found when it attached (NULL: not attached) */
static size_t (*heap_detach)(ivshm_heap_kept_fn, void *);
static void (*heap_stats)(ivshm_heap_stats_t *);

static int heap_useful(void)
{
    return IVSHMEM_COMPONENT->mem_useful && IVSHMEM_COMPONENT->mem_useful();
}

bool mca_btl_ivshmem_heap_attach(void)
{
    int (*attach)(const ivshm_heap_backend_t *) =
        (int (*)(const ivshm_heap_backend_t *))dlsym(RTLD_DEFAULT,
                                                     "ivshm_heap_attach");
    if (!attach || !IVSHMEM_COMPONENT->r)
        return false;
    ivshm_heap_backend_t be = {
        .abi = IVSHM_HEAP_ABI,
        .useful = heap_useful,
        .alloc = mca_btl_ivshmem_region_alloc,
        .free = mca_btl_ivshmem_region_free,
    };
    bool ok = attach(&be) == 0;
    opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                        ok ? "btl ivshmem: region heap attached: large malloc "
                             "blocks come from the region"
                           : "btl ivshmem: libivshm-heap.so is loaded but "
                             "refused the backend (another version?)");
    if (!ok)
        return false;
    heap_detach = (size_t(*)(ivshm_heap_kept_fn, void *))dlsym(
        RTLD_DEFAULT, "ivshm_heap_detach");
    heap_stats = (void (*)(ivshm_heap_stats_t *))dlsym(RTLD_DEFAULT,
                                                        "ivshm_heap_stats");
    return true;
}

static void keep(void *addr, size_t len, void *arg)
{
    (void)arg;
    if (ivshm_region_keep_range(IVSHMEM_COMPONENT->r, addr, len) != IVSHM_OK)
        opal_output(0, "btl ivshmem: %s", ivshm_last_error());
}

void mca_btl_ivshmem_heap_detach(void)
{
    if (heap_detach)
        heap_detach(keep, NULL);
    heap_detach = NULL;
    heap_stats = NULL;
}

void mca_btl_ivshmem_heap_print_stats(void)
{
    if (!heap_stats)
        return;
    ivshm_heap_stats_t s;
    heap_stats(&s);
    opal_output(0,
                "btl ivshmem heap: rank %u: %llu blocks %llu bytes from the "
                "region (%llu live), %llu did not fit, %llu large blocks "
                "private, %llu moved to private memory; threshold %zu bytes",
                (unsigned)OPAL_PROC_MY_NAME.vpid,
                (unsigned long long)s.region_allocs,
                (unsigned long long)s.region_bytes,
                (unsigned long long)s.region_live,
                (unsigned long long)s.fallbacks,
                (unsigned long long)s.private_large,
                (unsigned long long)s.moved, s.threshold);
}
