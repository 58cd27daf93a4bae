/*
 * coll ivshmem: the component. Its parameters, the choice of the
 * communicators it takes, and the module's life (saving the modules below
 * as the fallback, releasing the area and the sub-communicators).
 *
 * Which region each rank maps comes from the BTL ivshmem's modex entry
 * (region identity: a random UUID written when the region is formatted,
 * never the host name). Every rank reads the same entries, so every rank
 * of a communicator decides alike:
 *   - all ranks map one region: the flat module (coll_ivshmem_ops.c);
 *   - several regions, at least one with two ranks or more: the two-level
 *     module (coll_ivshmem_hier.c), if coll_ivshmem_hierarchy is on;
 *   - otherwise the component stays out.
 */
#include "coll_ivshmem.h"

#include "ompi/constants.h"
#include "ompi/proc/proc.h"
#include "opal/mca/base/mca_base_framework.h"

#include <stddef.h>
#include <string.h>

static int civ_register(void);
static int civ_open(void);
static int civ_close(void);
static int civ_init_query(bool enable_progress_threads, bool enable_mpi_threads);
static mca_coll_base_module_t *civ_comm_query(ompi_communicator_t *comm,
                                              int *priority);

mca_coll_ivshmem_component_t mca_coll_ivshmem_component = {
    .super = {
        .collm_version = {
            IVSHMEM_COLL_BASE_VERSION,
            .mca_component_name = "ivshmem",
            MCA_BASE_MAKE_VERSION(component, OMPI_MAJOR_VERSION,
                                  OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION),
            .mca_open_component = civ_open,
            .mca_close_component = civ_close,
            .mca_register_component_params = civ_register,
        },
        .collm_data = {
            .param_field = MCA_BASE_METADATA_PARAM_CHECKPOINT,
        },
        .collm_init_query = civ_init_query,
        .collm_comm_query = civ_comm_query,
    },
};

static const char *const kind_names[CIV_NKINDS] = {
    "barrier", "bcast", "reduce", "allreduce", "allgather", "alltoall",
};

/* The component's MCA parameters, one row each, as UCX's config tables:
 * the name (also the component's field), its type, its default and what
 * ompi_info says of it. Booleans live in int fields. */
typedef struct civ_param {
    const char *name;
    mca_base_var_type_t type;
    size_t offset;          /* of the field in the component */
    unsigned long value;    /* default of a number or boolean */
    const char *text;       /* default of a string */
    const char *doc;
} civ_param_t;

#define CIV_PARAM(field, type, value, text, doc)                              \
    {#field, MCA_BASE_VAR_TYPE_##type,                                        \
     offsetof(mca_coll_ivshmem_component_t, field), value, text, doc}

static const civ_param_t civ_params[] = {
    CIV_PARAM(priority, INT, 40, NULL,
              "Priority of coll ivshmem (above tuned's 30; 0 turns it off)"),
    CIV_PARAM(enable, STRING, 0,
              "barrier,bcast,reduce,allreduce,allgather,alltoall",
              "Collectives taken through the region (comma list of barrier, "
              "bcast, reduce, allreduce, allgather, alltoall); the others "
              "stay with the modules below"),
    CIV_PARAM(slot_size, UNSIGNED_INT, 128 * 1024, NULL,
              "Bytes each rank may place in the region per step (4 KiB to 64 "
              "MiB, multiple of 64); a communicator's area is about 2 x "
              "(ranks + 1) x slot_size, taken at its first collective"),
    CIV_PARAM(reduce_split, UNSIGNED_INT, 4096, NULL,
              "Allreduces of at least this many bytes are folded by all "
              "ranks in parallel (smaller ones by rank 0, the others wait "
              "for it)"),
    CIV_PARAM(reduce_root_max, UNSIGNED_INT, 64 * 1024, NULL,
              "Reduces up to this many bytes are folded by the root alone: "
              "the other ranks leave as soon as their input is in the region "
              "(as the leaves of a tree do); larger ones are folded by all "
              "ranks in parallel, which ends sooner at the root but makes "
              "every rank wait"),
    CIV_PARAM(max_bytes, UNSIGNED_LONG, 0, NULL,
              "Collectives moving more bytes (all ranks' data) go to the "
              "modules below (0: no limit)"),
    CIV_PARAM(alltoall_max, UNSIGNED_INT, 4096, NULL,
              "Alltoalls with more bytes per pair are read in place from the "
              "peers' send buffers where all of them are region memory "
              "(region heap, MPI_Alloc_mem), otherwise they go to the "
              "modules below (docs/collectives.md); 0: no limit"),
    CIV_PARAM(allgather_direct_min, UNSIGNED_INT, 8192, NULL,
              "Allgathers with at least this many bytes a rank are read in "
              "place from the peers' send buffers where all of them are "
              "region memory (region heap, MPI_Alloc_mem), otherwise through "
              "the slots; 0: never"),
    CIV_PARAM(max_ranks, UNSIGNED_INT, 256, NULL,
              "Largest number of ranks in one region it serves"),
    CIV_PARAM(hierarchy, BOOL, 1, NULL,
              "Also take communicators that span regions (hosts): one level "
              "in each region, the regions' leaders over the network"),
    CIV_PARAM(stats, BOOL, 0, NULL,
              "Print, when a communicator is freed, which collectives ran in "
              "the region and which went to the modules below"),
    CIV_PARAM(verbose, INT, 0, NULL,
              "Verbosity (1: why a communicator is not taken)"),
};

/* the field of a row gets its default */
static void civ_param_default(const civ_param_t *p, void *field)
{
    switch (p->type) {
    case MCA_BASE_VAR_TYPE_STRING:
        *(char **)field = (char *)p->text;
        break;
    case MCA_BASE_VAR_TYPE_UNSIGNED_INT:
        *(unsigned *)field = (unsigned)p->value;
        break;
    case MCA_BASE_VAR_TYPE_UNSIGNED_LONG:
        *(unsigned long *)field = p->value;
        break;
    default: /* INT, and BOOL in an int field */
        *(int *)field = (int)p->value;
        break;
    }
}

static int civ_register(void)
{
    mca_coll_ivshmem_component_t *cc = &mca_coll_ivshmem_component;
    for (size_t i = 0; i < sizeof(civ_params) / sizeof(civ_params[0]); i++) {
        const civ_param_t *p = &civ_params[i];
        void *field = (char *)cc + p->offset;
        civ_param_default(p, field);
        mca_base_component_var_register(&cc->super.collm_version, p->name,
                                        p->doc, p->type, NULL, 0, 0,
                                        OPAL_INFO_LVL_5,
                                        MCA_BASE_VAR_SCOPE_READONLY, field);
    }
    return OMPI_SUCCESS;
}

static int civ_open(void)
{
    mca_coll_ivshmem_component_t *cc = &mca_coll_ivshmem_component;
    cc->output = opal_output_open(NULL);
    opal_output_set_verbosity(cc->output, cc->verbose);
    cc->enabled = 0;
    char *list = strdup(cc->enable ? cc->enable : "");
    char *save = NULL;
    for (char *w = list ? strtok_r(list, ", ", &save) : NULL; w;
         w = strtok_r(NULL, ", ", &save)) {
        int k;
        for (k = 0; k < CIV_NKINDS; k++)
            if (strcmp(w, kind_names[k]) == 0)
                break;
        if (k == CIV_NKINDS)
            opal_output(0, "coll ivshmem: coll_ivshmem_enable: unknown "
                           "collective '%s' (ignored)", w);
        else
            cc->enabled |= 1u << k;
    }
    free(list);
    if (cc->slot_size < 4096 || cc->slot_size > (64u << 20) ||
        cc->slot_size % 64) {
        opal_output(0, "coll ivshmem: coll_ivshmem_slot_size %u is out of "
                       "range (4096 to 67108864, multiple of 64): 131072 "
                       "used", cc->slot_size);
        cc->slot_size = 128 * 1024;
    }
    if (cc->max_ranks > cc->slot_size / 64)
        cc->max_ranks = cc->slot_size / 64; /* alltoall: 64 bytes a peer */
    civ_agree_publish(); /* before Open MPI's modex exchange */
    return OMPI_SUCCESS;
}

static int civ_close(void)
{
    civ_area_reap(true); /* the rest goes with the lease */
    opal_output_close(mca_coll_ivshmem_component.output);
    return OMPI_SUCCESS;
}

static int civ_init_query(bool enable_progress_threads, bool enable_mpi_threads)
{
    (void)enable_progress_threads;
    (void)enable_mpi_threads;
    return OMPI_SUCCESS;
}

/* The BTL ivshmem of this process with its region mapped, or NULL. */
static mca_btl_ivshmem_component_t *btl_ivshmem(void)
{
    mca_btl_ivshmem_component_t *c = mca_btl_ivshmem_find();
    return c && c->r ? c : NULL;
}

/* What the BTL ivshmem published for a rank (the same on every rank,
 * also where the BTL is not running here): its region identity, if it
 * maps one. */
static bool rank_region(ompi_communicator_t *comm, int i, ivshm_identity_t *id)
{
    static const mca_base_component_t btl_key = {
        MCA_BTL_DEFAULT_VERSION("ivshmem"),
    };
    ompi_proc_t *p = ompi_comm_peer_lookup(comm, i);
    mca_btl_ivshmem_modex_t *mx = NULL;
    size_t size = 0;
    int rc;
    if (!p)
        return false;
    rc = ivshmem_modex_recv_if_posted(&btl_key, &p->super.proc_name,
                                      (void **)&mx, &size);
    bool ok = rc == OPAL_SUCCESS && mx && size == sizeof(*mx) &&
              mx->magic == IVSHMEM_MODEX_MAGIC &&
              mx->version == IVSHMEM_MODEX_VERSION &&
              (mx->flags & IVSHMEM_MODEX_REGION);
    if (ok)
        *id = mx->id;
    free(mx);
    return ok;
}

static void save_prev(mca_coll_ivshmem_module_t *m, ompi_communicator_t *comm)
{
#define SAVE(api)                                                            \
    do {                                                                     \
        m->prev.api = comm->c_coll->coll_##api;                              \
        m->prev.api##_module = comm->c_coll->coll_##api##_module;            \
        if (m->prev.api##_module)                                            \
            OBJ_RETAIN(m->prev.api##_module);                                \
    } while (0)
    SAVE(barrier);
    SAVE(bcast);
    SAVE(reduce);
    SAVE(allreduce);
    SAVE(allgather);
    SAVE(alltoall);
#undef SAVE
}

static int civ_module_enable(mca_coll_base_module_t *module,
                             ompi_communicator_t *comm)
{
    mca_coll_ivshmem_module_t *m = (mca_coll_ivshmem_module_t *)module;
    save_prev(m, comm);
    if (!m->prev.barrier || !m->prev.bcast || !m->prev.reduce ||
        !m->prev.allreduce || !m->prev.allgather || !m->prev.alltoall) {
        opal_output_verbose(1, mca_coll_ivshmem_component.output,
                            "coll ivshmem: %s: no module below to fall back "
                            "to: not used",
                            comm->c_name);
        return OMPI_ERROR;
    }
    m->comm = comm;
    return OMPI_SUCCESS;
}

static void module_construct(mca_coll_ivshmem_module_t *m)
{
    memset((char *)m + sizeof(m->super), 0, sizeof(*m) - sizeof(m->super));
}

static void print_stats(mca_coll_ivshmem_module_t *m)
{
    char line[512];
    int len = 0;
    for (int k = 0; k < CIV_NKINDS; k++)
        len += snprintf(line + len, sizeof(line) - (size_t)len,
                        " %s %llu/%llu", kind_names[k],
                        (unsigned long long)m->count[k],
                        (unsigned long long)m->fallback[k]);
    opal_output(0,
                "coll ivshmem stats: %s rank %u of %u (%s): region/fallback"
                "%s; steps %llu, counter scans %llu, read in place: "
                "allgather %llu, alltoall %llu",
                m->comm ? m->comm->c_name : "?", m->me, m->n,
                m->aside              ? "stepped aside"
                : m->mode == CIV_FLAT ? "one region"
                                      : "two levels",
                line,
                (unsigned long long)m->steps, (unsigned long long)m->scans,
                (unsigned long long)m->direct[CIV_ALLGATHER],
                (unsigned long long)m->direct[CIV_ALLTOALL]);
}

static void module_destruct(mca_coll_ivshmem_module_t *m)
{
    if (mca_coll_ivshmem_component.stats && m->comm)
        print_stats(m);
    civ_hier_release(m);
    civ_area_release(m);
    free(m->ids);
    free(m->group_of);
    free(m->leader_of_group);
#define DROP(api)                                                            \
    if (m->prev.api##_module)                                                \
        OBJ_RELEASE(m->prev.api##_module);
    DROP(barrier);
    DROP(bcast);
    DROP(reduce);
    DROP(allreduce);
    DROP(allgather);
    DROP(alltoall);
#undef DROP
}

OBJ_CLASS_INSTANCE(mca_coll_ivshmem_module_t, mca_coll_base_module_t,
                   module_construct, module_destruct);

static bool kind_on(int k)
{
    return mca_coll_ivshmem_component.enabled & (1u << k);
}

/* A module that steps aside (the members' settings differ): every
 * collective, whichever each member would take, is ours on every member
 * and goes to the modules below, counted as a fallback (the area is never
 * set up). */
static mca_coll_base_module_t *aside_module(ompi_communicator_t *comm)
{
    mca_coll_ivshmem_module_t *m = OBJ_NEW(mca_coll_ivshmem_module_t);
    if (!m)
        return NULL;
    m->mode = CIV_FLAT;
    m->aside = true;
    m->setup = CIV_SETUP_FAILED;
    m->n = (uint32_t)ompi_comm_size(comm);
    m->me = (uint32_t)ompi_comm_rank(comm);
    m->super.coll_module_enable = civ_module_enable;
    m->super.coll_barrier = civ_barrier;
    m->super.coll_bcast = civ_bcast;
    m->super.coll_reduce = civ_reduce;
    m->super.coll_allreduce = civ_allreduce;
    m->super.coll_allgather = civ_allgather;
    m->super.coll_alltoall = civ_alltoall;
    return &m->super;
}

static mca_coll_base_module_t *civ_comm_query(ompi_communicator_t *comm,
                                              int *priority)
{
    mca_coll_ivshmem_component_t *cc = &mca_coll_ivshmem_component;
    int n = ompi_comm_size(comm);
    if (OMPI_COMM_IS_INTER(comm) || n < 2)
        return NULL;
    switch (civ_agree(comm, priority)) {
    case CIV_AGREE_OFF:
        return NULL;
    case CIV_AGREE_DIFFER:
        return aside_module(comm);
    case CIV_AGREE_SAME:
        break;
    }
    ivshm_identity_t *ids = calloc((size_t)n, sizeof(*ids));
    int *group_of = calloc((size_t)n, sizeof(int));
    bool *has = calloc((size_t)n, sizeof(bool));
    if (!ids || !group_of || !has)
        goto decline;
    /* groups: ranks of one region, numbered by their lowest rank's order;
     * a rank without a region is a group of its own */
    int ngroups = 0, biggest = 0;
    for (int i = 0; i < n; i++) {
        has[i] = rank_region(comm, i, &ids[i]);
        group_of[i] = -1;
        for (int j = 0; has[i] && j < i; j++)
            if (has[j] && memcmp(ids[j].region_uuid, ids[i].region_uuid,
                                 sizeof(ids[i].region_uuid)) == 0) {
                group_of[i] = group_of[j];
                break;
            }
        if (group_of[i] < 0)
            group_of[i] = ngroups++;
    }
    for (int g = 0; g < ngroups; g++) {
        int size = 0;
        for (int i = 0; i < n; i++)
            size += group_of[i] == g;
        if (size > biggest)
            biggest = size;
    }
    enum civ_mode mode;
    if (ngroups == 1 && has[0])
        mode = CIV_FLAT;
    else if (cc->hierarchy && biggest >= 2)
        mode = CIV_HIER;
    else {
        opal_output_verbose(1, cc->output,
                            "coll ivshmem: %s: no two ranks share a region "
                            "(or hierarchy is off): not used",
                            comm->c_name);
        goto decline;
    }
    if ((unsigned)biggest > cc->max_ranks) {
        opal_output_verbose(1, cc->output,
                            "coll ivshmem: %s: %d ranks in one region, more "
                            "than coll_ivshmem_max_ranks: not used",
                            comm->c_name, biggest);
        goto decline;
    }
    mca_coll_ivshmem_module_t *m = OBJ_NEW(mca_coll_ivshmem_module_t);
    if (!m)
        goto decline;
    m->mode = mode;
    m->n = (uint32_t)n;
    m->me = (uint32_t)ompi_comm_rank(comm);
    m->btl = btl_ivshmem();
    m->ids = ids;
    m->ngroups = ngroups;
    m->group_of = group_of;
    m->my_group = group_of[m->me];
    free(has);
    m->super.coll_module_enable = civ_module_enable;
    if (mode == CIV_FLAT) {
        m->super.coll_barrier = kind_on(CIV_BARRIER) ? civ_barrier : NULL;
        m->super.coll_bcast = kind_on(CIV_BCAST) ? civ_bcast : NULL;
        m->super.coll_reduce = kind_on(CIV_REDUCE) ? civ_reduce : NULL;
        m->super.coll_allreduce = kind_on(CIV_ALLREDUCE) ? civ_allreduce : NULL;
        m->super.coll_allgather = kind_on(CIV_ALLGATHER) ? civ_allgather : NULL;
        m->super.coll_alltoall = kind_on(CIV_ALLTOALL) ? civ_alltoall : NULL;
    } else {
        /* alltoall has no leader phase to gain: every pair talks anyway,
         * and the BTL carries the same-region pairs through the region */
        m->super.coll_barrier = kind_on(CIV_BARRIER) ? civ_hier_barrier : NULL;
        m->super.coll_bcast = kind_on(CIV_BCAST) ? civ_hier_bcast : NULL;
        m->super.coll_reduce = kind_on(CIV_REDUCE) ? civ_hier_reduce : NULL;
        m->super.coll_allreduce =
            kind_on(CIV_ALLREDUCE) ? civ_hier_allreduce : NULL;
        m->super.coll_allgather =
            kind_on(CIV_ALLGATHER) ? civ_hier_allgather : NULL;
    }
    *priority = cc->priority;
    opal_output_verbose(2, cc->output,
                        "coll ivshmem: %s: %d ranks, %d region group(s): %s",
                        comm->c_name, n, ngroups,
                        mode == CIV_FLAT ? "one region" : "two levels");
    return &m->super;
decline:
    free(ids);
    free(group_of);
    free(has);
    return NULL;
}
