/*
 * mpool ivshmem: MPI_Alloc_mem buffers placed in the ivshmem region, so
 * that the BTL moves large messages from and to them with one copy (ob1's
 * RGET and put), the way vader uses CMA or XPMEM inside one VM.
 *
 * The memory comes from the BTL ivshmem of the same process, found among
 * the initialised BTLs: the region is mapped once, by the BTL, and a buffer
 * is only placed there while the BTL may reach a peer through it. Otherwise,
 * and whenever the region has no room, the query or the allocation fails
 * and Open MPI falls back to malloc, as it does without any mpool.
 *
 * Selection (MPI_Alloc_mem): with no hints this pool wins over the default
 * one at priority mpool_ivshmem_priority (default 60, 0 turns it off);
 * the info key mpool_hints=ivshmem asks for it explicitly (priority 100);
 * hints that name something else are left to other pools.
 *
 * Jobs with a peer on another host (the verbs route serves it): without
 * hints the pool steps aside and MPI_Alloc_mem gives private memory, which
 * the HCA can register, so ob1 moves a large message to that peer with one
 * RDMA read; the region's BAR2 mapping cannot be registered and would cost
 * a copy through sends (docs/verbs.md, MPI_Alloc_mem). mpool_ivshmem_verbs
 * 1, or the hint, keeps such buffers in the region all the same.
 */
#include "btl_ivshmem.h"

#include "opal/mca/base/mca_base_framework.h"
#include "opal/mca/mpool/base/base.h"
#include "opal/mca/mpool/mpool.h"
#include "opal/util/output.h"

#include <string.h>

static int mpool_ivshmem_register(void);
static int mpool_ivshmem_query(const char *hints, int *priority,
                               mca_mpool_base_module_t **module);

typedef struct mca_mpool_ivshmem_component_t {
    mca_mpool_base_component_t super;
    int priority;
    bool with_verbs; /* region buffers also in jobs with verbs peers */
} mca_mpool_ivshmem_component_t;

OPAL_MODULE_DECLSPEC extern mca_mpool_ivshmem_component_t
    mca_mpool_ivshmem_component;

mca_mpool_ivshmem_component_t mca_mpool_ivshmem_component = {
    .super = {
        .mpool_version = {
#ifdef MCA_MPOOL_BASE_VERSION_3_1_0
            MCA_MPOOL_BASE_VERSION_3_1_0,
#else
            MCA_MPOOL_BASE_VERSION_3_0_0,
#endif
            .mca_component_name = "ivshmem",
            MCA_BASE_MAKE_VERSION(component, OPAL_MAJOR_VERSION,
                                  OPAL_MINOR_VERSION, OPAL_RELEASE_VERSION),
            .mca_register_component_params = mpool_ivshmem_register,
        },
        .mpool_data = {
            .param_field = MCA_BASE_METADATA_PARAM_CHECKPOINT,
        },
        .mpool_query = mpool_ivshmem_query,
    },
};

static mca_btl_ivshmem_component_t *btl_ivshmem(void)
{
    return mca_btl_ivshmem_find();
}

static void *mpool_ivshmem_alloc(mca_mpool_base_module_t *mpool, size_t size,
                                 size_t align, uint32_t flags)
{
    (void)mpool;
    (void)flags;
    mca_btl_ivshmem_component_t *c = btl_ivshmem();
    /* region chunks are page aligned; larger alignments are not offered */
    if (!c || !c->mem_alloc || align > 4096)
        return NULL;
    return c->mem_alloc(size);
}

static void mpool_ivshmem_free(mca_mpool_base_module_t *mpool, void *addr)
{
    (void)mpool;
    mca_btl_ivshmem_component_t *c = btl_ivshmem();
    if (c && c->mem_free)
        c->mem_free(addr);
    /* else the BTL is finalised: the region, and the buffer, are gone */
}

static mca_mpool_base_module_t mpool_ivshmem_module = {
    .mpool_component = &mca_mpool_ivshmem_component.super,
    .mpool_alloc = mpool_ivshmem_alloc,
    .mpool_free = mpool_ivshmem_free,
    .mpool_name = "ivshmem",
};

static int mpool_ivshmem_register(void)
{
    mca_mpool_ivshmem_component.priority = 60;
    (void)mca_base_component_var_register(
        &mca_mpool_ivshmem_component.super.mpool_version, "priority",
        "Priority of the ivshmem pool for MPI_Alloc_mem without hints "
        "(the default pool has 50; 0 keeps such buffers out of the region). "
        "The info key mpool_hints=ivshmem asks for the pool explicitly",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_5,
        MCA_BASE_VAR_SCOPE_READONLY, &mca_mpool_ivshmem_component.priority);
    mca_mpool_ivshmem_component.with_verbs = false;
    (void)mca_base_component_var_register(
        &mca_mpool_ivshmem_component.super.mpool_version, "verbs",
        "Place MPI_Alloc_mem buffers without hints in the region also in jobs "
        "where the BTL ivshmem reaches a rank on another host through verbs "
        "(0: such jobs get private memory, which the HCA can register for "
        "one RDMA transfer; region memory cannot be registered)",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_5,
        MCA_BASE_VAR_SCOPE_READONLY, &mca_mpool_ivshmem_component.with_verbs);
    return OPAL_SUCCESS;
}

/* Does the comma-separated hint list name this pool? */
static bool hints_name_us(const char *hints)
{
    const char *p = hints;
    size_t n = strlen("ivshmem");
    while ((p = strstr(p, "ivshmem")) != NULL) {
        bool start = p == hints || p[-1] == ',' || p[-1] == ' ';
        bool end = p[n] == '\0' || p[n] == ',' || p[n] == ' ';
        if (start && end)
            return true;
        p += n;
    }
    return false;
}

/* Without hints: whether the job has a peer that the verbs route serves,
 * for which a region buffer would travel through sends (said once). */
static bool verbs_wants_private(mca_btl_ivshmem_component_t *c)
{
    int peer = c->verbs_peer ? c->verbs_peer() : -1;
    if (peer < 0 || mca_mpool_ivshmem_component.with_verbs)
        return false;
    static bool said;
    if (!said)
        opal_output_verbose(1, c->output,
                            "mpool ivshmem: MPI_Alloc_mem gives private "
                            "memory: rank %d is on another host (verbs), "
                            "whose HCA cannot register region memory "
                            "(mpool_ivshmem_verbs 1 places it in the region)",
                            peer);
    said = true;
    return true;
}

static int mpool_ivshmem_query(const char *hints, int *priority,
                               mca_mpool_base_module_t **module)
{
    mca_btl_ivshmem_component_t *c = btl_ivshmem();
    if (!c || !c->mem_useful || !c->mem_useful())
        return OPAL_ERR_NOT_AVAILABLE;
    if (hints && *hints) {
        if (!hints_name_us(hints))
            return OPAL_ERR_NOT_AVAILABLE;
        *priority = 100;
    } else {
        if (mca_mpool_ivshmem_component.priority <= 0 ||
            verbs_wants_private(c))
            return OPAL_ERR_NOT_AVAILABLE;
        *priority = mca_mpool_ivshmem_component.priority;
    }
    *module = &mpool_ivshmem_module;
    return OPAL_SUCCESS;
}
