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
 *
 * Also owns the quota (btl_ivshmem_heap_quota, docs/heap.md "Quota"): the
 * region-heap blocks of one job may hold at most that much of the region,
 * so that other jobs keep room for their channels and areas. A block over
 * the quota comes from private memory, as one that does not fit.
 */
#include "btl_ivshmem.h"

#include "opal/mca/base/mca_base_var.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <ivshm/heap.h>

/* Half of the region's heap: a job's arrays never take more than the
 * other half leaves to every other job's channels and areas
 * (docs/heap.md, "Quota"). */
#define HEAP_QUOTA_DEFAULT "50%"

static char *quota_param = HEAP_QUOTA_DEFAULT;
static uint64_t quota_bytes;           /* resolved when the heap attaches */
static _Atomic uint64_t over_quota;    /* blocks refused by the quota */

void mca_btl_ivshmem_heap_register(void)
{
    quota_param = HEAP_QUOTA_DEFAULT;
    mca_base_component_var_register(
        &mca_btl_ivshmem_component.super.btl_version, "heap_quota",
        "Most of the region that one job's region-heap blocks (malloc'd "
        "arrays under libivshm-heap.so) may hold, summed over its ranks: a "
        "percentage of the region's heap (\"50%\") or bytes (suffix K, M, "
        "G); blocks past it come from private memory. The default leaves "
        "half of the region to other jobs' channels and areas",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_4,
        MCA_BASE_VAR_SCOPE_READONLY, &quota_param);
}

/* "N%" of heap_bytes (0..100) or "N[KMG]" bytes; false if neither */
static bool parse_quota(const char *s, uint64_t heap_bytes, uint64_t *out)
{
    char *end;
    if (!s || !isdigit((unsigned char)*s))
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end == '%' && end[1] == '\0') {
        if (v > 100)
            return false;
        *out = heap_bytes / 100 * v + heap_bytes % 100 * v / 100;
        return true;
    }
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case '\0': break;
    default: return false;
    }
    if (shift && end[1] != '\0')
        return false;
    if (v > (UINT64_MAX >> shift))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}


/* the heap's entry points, found when it attached (NULL: not attached) */
static size_t (*heap_detach)(ivshm_heap_kept_fn, void *);
static void (*heap_stats)(ivshm_heap_stats_t *);

static int heap_useful(void)
{
    return IVSHMEM_COMPONENT->mem_useful && IVSHMEM_COMPONENT->mem_useful();
}

/* The backend's alloc and free: region memory counted against the job's
 * quota (ivshm_alloc_heap_block), NULL when full or over it. */
static void *heap_alloc(size_t size)
{
    ivshm_region_t *r = IVSHMEM_COMPONENT->r;
    uint64_t off;
    if (!r)
        return NULL;
    ivshm_status_t st = ivshm_alloc_heap_block(r, size, quota_bytes, &off);
    if (st == IVSHM_ERR_QUOTA)
        atomic_fetch_add_explicit(&over_quota, 1, memory_order_relaxed);
    return st == IVSHM_OK ? (char *)ivshm_region_base(r) + off : NULL;
}

static void heap_free(void *p)
{
    uint64_t off = mca_btl_ivshmem_region_offset(p, 1);
    /* no region: it is gone, and its chunks with it */
    if (off != UINT64_MAX)
        (void)ivshm_free_heap_block(IVSHMEM_COMPONENT->r, off);
}

bool mca_btl_ivshmem_heap_attach(void)
{
    int (*attach)(const ivshm_heap_backend_t *) =
        (int (*)(const ivshm_heap_backend_t *))dlsym(RTLD_DEFAULT,
                                                     "ivshm_heap_attach");
    ivshm_region_info_t inf;
    if (!attach || !IVSHMEM_COMPONENT->r ||
        ivshm_region_info(IVSHMEM_COMPONENT->r, &inf) != IVSHM_OK)
        return false;
    if (!parse_quota(quota_param, (uint64_t)inf.chunk_count * inf.chunk_size,
                     &quota_bytes)) {
        opal_output(0, "btl ivshmem: btl_ivshmem_heap_quota '%s' is neither "
                       "a percentage (0%% to 100%%) nor bytes (suffix K, M, "
                       "G): the region heap stays off",
                    quota_param ? quota_param : "");
        return false;
    }
    ivshm_heap_backend_t be = {
        .abi = IVSHM_HEAP_ABI,
        .useful = heap_useful,
        .alloc = heap_alloc,
        .free = heap_free,
    };
    bool ok = attach(&be) == 0;
    if (ok)
        opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                            "btl ivshmem: region heap attached: large malloc "
                            "blocks come from the region, up to %llu bytes "
                            "for the job (btl_ivshmem_heap_quota %s)",
                            (unsigned long long)quota_bytes, quota_param);
    else
        opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                            "btl ivshmem: libivshm-heap.so is loaded but "
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
                "region (%llu live), %llu did not fit (%llu over quota), "
                "%llu large blocks private, %llu moved to private memory; "
                "threshold %zu bytes, quota %llu bytes",
                (unsigned)OPAL_PROC_MY_NAME.vpid,
                (unsigned long long)s.region_allocs,
                (unsigned long long)s.region_bytes,
                (unsigned long long)s.region_live,
                (unsigned long long)s.fallbacks,
                (unsigned long long)atomic_load(&over_quota),
                (unsigned long long)s.private_large,
                (unsigned long long)s.moved, s.threshold,
                (unsigned long long)quota_bytes);
}
