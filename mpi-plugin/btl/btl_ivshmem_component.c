/*
 * BTL ivshmem component: MCA parameters, setup of the region and the
 * endpoint, the modex, progress, and stepping aside with one clear warning
 * whenever the region cannot be used (the job then runs over the network).
 */
#include "btl_ivshmem.h"
#include "btl_ivshmem_verbs.h"

#include "opal/util/output.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"

#include "opal/mca/base/mca_base_var.h"

#include <dlfcn.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the eager limit without and with the region heap (eager_for_heap) */
#define IVSHMEM_EAGER_PLAIN (32 * 1024)
#define IVSHMEM_EAGER_HEAP 4096

static int ivshmem_register(void);
static int ivshmem_open(void);
static int ivshmem_close(void);
static mca_btl_base_module_t **ivshmem_init(int *num_btls,
                                            bool enable_progress_threads,
                                            bool enable_mpi_threads);
static int ivshmem_progress(void);
static bool region_mem_useful(void);
static void *region_mem_alloc(size_t size);
static void region_mem_free(void *ptr);
static void *coll_alloc(size_t size, uint64_t *off);
static int coll_map(const ivshm_identity_t *owner, uint64_t off, uint64_t len,
                    void **addr);
static bool coll_alive(const ivshm_identity_t *id);
static uint32_t coll_lease_ms(void);

mca_btl_ivshmem_component_t mca_btl_ivshmem_component = {
    .super = {
        .btl_version = {
            MCA_BTL_DEFAULT_VERSION("ivshmem"),
            .mca_open_component = ivshmem_open,
            .mca_close_component = ivshmem_close,
            .mca_register_component_params = ivshmem_register,
        },
        .btl_data = {
            .param_field = MCA_BASE_METADATA_PARAM_CHECKPOINT,
        },
        .btl_init = ivshmem_init,
        .btl_progress = ivshmem_progress,
    },
    .abi = MCA_BTL_IVSHMEM_ABI,
    .mem_useful = region_mem_useful,
    .mem_alloc = region_mem_alloc,
    .mem_free = region_mem_free,
    .verbs_peer = ivshmem_verbs_peer,
    .coll_alloc = coll_alloc,
    .coll_free = region_mem_free,
    .coll_map = coll_map,
    .coll_alive = coll_alive,
    .coll_offset = mca_btl_ivshmem_region_offset,
    .coll_lease_ms = coll_lease_ms,
};

static void frag_construct(mca_btl_ivshmem_frag_t *f)
{
    f->base.des_segments = &f->segment;
    f->base.des_segment_count = 1;
    f->reserved = false;
}
OBJ_CLASS_INSTANCE(mca_btl_ivshmem_frag_t, mca_btl_base_descriptor_t,
                   frag_construct, NULL);
OBJ_CLASS_INSTANCE(mca_btl_ivshmem_reg_t, opal_free_list_item_t, NULL, NULL);

static void reg_var(const char *name, const char *doc, mca_base_var_type_t type,
                    int level, mca_base_var_scope_t scope, void *storage)
{
    mca_base_component_var_register(&mca_btl_ivshmem_component.super.btl_version,
                                    name, doc, type, NULL, 0, 0, level, scope,
                                    storage);
}

static void reg_uint(const char *name, const char *doc, unsigned *storage,
                     unsigned def)
{
    *storage = def;
    reg_var(name, doc, MCA_BASE_VAR_TYPE_UNSIGNED_INT, OPAL_INFO_LVL_5,
            MCA_BASE_VAR_SCOPE_READONLY, storage);
}

static int ivshmem_register(void)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    const char *env = getenv(IVSHM_ENV_REGION);
    c->region = (char *)(env && *env ? env : IVSHM_DEFAULT_URI);
    reg_var("region",
            "Shared region to use: auto (the guest driver's device if it is "
            "loaded, else the only ivshmem device through sysfs), dev:auto, "
            "dev:/dev/ivshmemN, pci:auto, pci:DDDD:BB:DD.F, or file:PATH (a "
            "host file, as in simulated VMs), or none (no region route: "
            "only the verbs route, e.g. to measure it between co-resident "
            "VMs); default $IVSHM_REGION, else auto",
            MCA_BASE_VAR_TYPE_STRING, OPAL_INFO_LVL_3,
            MCA_BASE_VAR_SCOPE_READONLY, &c->region);
    c->same_vm = 0;
    reg_var("same_vm",
            "Also carry traffic between processes of the same VM (for "
            "testing; vader/sm is faster there)",
            MCA_BASE_VAR_TYPE_BOOL, OPAL_INFO_LVL_5,
            MCA_BASE_VAR_SCOPE_READONLY, &c->same_vm);
    c->verbose = 0;
    reg_var("verbose",
            "Verbosity: 1 = why peers are (not) reached and why the component "
            "steps aside, 2 = more",
            MCA_BASE_VAR_TYPE_INT, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_LOCAL,
            &c->verbose);
    c->stats = 0;
    reg_var("stats", "Print per-peer message counters of this BTL at finalize",
            MCA_BASE_VAR_TYPE_BOOL, OPAL_INFO_LVL_5, MCA_BASE_VAR_SCOPE_LOCAL,
            &c->stats);
    /* Defaults tuned for MPI on a 16-core host (docs/channels.md,
     * Decisions and Defaults, gives the figures): 1088-byte cells carry
     * messages of up to 1056 bytes inline, so 256 B, 512 B and a 1 KiB MPI
     * message with ob1's 16-byte header take no fragment, with 64 of them
     * per fast box, so that a window of 64 sends (osu_bw) fits the box
     * instead of spilling into the FIFO (the box, larger than a 64 KiB
     * bank, is an allocation of its own); 64 fragments
     * of 64 KiB keep the two-copy pipeline full; 4 MiB of the region per
     * process, as vader's own segment. Explicit $IVSHM_* settings of the
     * library still win over these defaults. */
    ivshm_ep_config_t d;
    ivshm_ep_config_defaults(&d);
    d.cell_size = 1088;
    d.fbox_cells = 64; /* a window of 64 (osu_bw) fits */
    d.frag_count = 64;
    d.frag_size = 65536;
    ivshm_ep_config_env(&d);
    reg_uint("fifo_cells", "Cells of each process' receive FIFO (power of two)",
             &c->fifo_cells, d.fifo_cells);
    reg_uint("cell_size", "Bytes per FIFO and fast-box cell (multiple of 64); "
                          "messages that fit a cell travel inline",
             &c->cell_size, d.cell_size);
    reg_uint("fbox_size", "Cells per fast box (power of two; 0 disables fast "
                          "boxes)",
             &c->fbox_size, d.fbox_cells);
    reg_uint("fbox_threshold",
             "Messages to a peer before a fast box is requested",
             &c->fbox_threshold, d.fbox_threshold);
    reg_uint("frag_size", "Bytes per send fragment (power of two); bounds "
                          "btl_ivshmem_max_send_size",
             &c->frag_size, d.frag_size);
    reg_uint("frag_count", "Send fragments per process", &c->frag_count,
             d.frag_count);

    mca_btl_base_module_t *m = &mca_btl_ivshmem_module.super;
    m->btl_exclusivity = MCA_BTL_EXCLUSIVITY_HIGH / 2; /* > net, < vader */
    /* without the region heap (see eager_for_heap) */
    m->btl_eager_limit = IVSHMEM_EAGER_PLAIN;
    m->btl_rndv_eager_limit = IVSHMEM_EAGER_PLAIN;
    m->btl_max_send_size = 64 * 1024;
    m->btl_latency = 1;
    m->btl_bandwidth = 10000;
    /* Put and get reach buffers that live in the region (MPI_Alloc_mem
     * through the ivshmem mpool): ob1's RGET then moves a large message
     * with one copy. Everything else is copied through sends: no
     * receiver-driven pipeline (its registrations of private memory could
     * never succeed), hence the unreachable pipeline threshold. */
    m->btl_flags = MCA_BTL_FLAGS_SEND | MCA_BTL_FLAGS_RDMA;
    m->btl_min_rdma_pipeline_size = SIZE_MAX;
    m->btl_rdma_pipeline_send_length = 32 * 1024;
    m->btl_rdma_pipeline_frag_size = SIZE_MAX;
    m->btl_registration_handle_size =
        sizeof(mca_btl_base_registration_handle_t);
    m->btl_get_limit = SIZE_MAX;
    m->btl_put_limit = SIZE_MAX;
    m->btl_get_alignment = 0;
    m->btl_put_alignment = 0;
    m->btl_get_local_registration_threshold = SIZE_MAX;
    m->btl_put_local_registration_threshold = SIZE_MAX;
    mca_btl_ivshmem_heap_register();
    ivshmem_verbs_register_params(&c->super.btl_version);
    return mca_btl_base_param_register(&c->super.btl_version, m);
}

/* Our help file lies next to the component (user installs) or in Open
 * MPI's help directory (system installs); $IVSHM_HELP_DIR for build trees. */
static void add_help_dirs(void)
{
    Dl_info info;
    if (dladdr((void *)&mca_btl_ivshmem_component, &info) && info.dli_fname) {
        char *copy = strdup(info.dli_fname);
        if (copy) {
            opal_show_help_add_dir(dirname(copy));
            free(copy);
        }
    }
    const char *env = getenv("IVSHM_HELP_DIR");
    if (env && *env)
        opal_show_help_add_dir(env);
}

static int ivshmem_open(void)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    add_help_dirs();
    c->output = opal_output_open(NULL);
    opal_output_set_verbosity(c->output, c->verbose);
    OBJ_CONSTRUCT(&c->frags, opal_free_list_t);
    OBJ_CONSTRUCT(&c->regs, opal_free_list_t);
    return OPAL_SUCCESS;
}

static int ivshmem_close(void)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    mca_btl_ivshmem_teardown();
    ivshmem_verbs_teardown();
    c->threads = false;
    OBJ_DESTRUCT(&c->frags);
    OBJ_DESTRUCT(&c->regs);
    free(c->why_not);
    c->why_not = NULL;
    opal_output_close(c->output);
    return OPAL_SUCCESS;
}

/* One warning, from the help file, then the component steps aside. A VM
 * without any ivshmem device and no region asked for is the normal case
 * of a machine that does not use us: that is said at verbosity 1 only. */
static int step_aside(ivshm_status_t st, const char *what)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    char host[256] = "?";
    gethostname(host, sizeof(host));
    const char *reason = ivshm_last_error();
    if (asprintf(&c->why_not, "%s: %s: %s", what, ivshm_strerror(st),
                 reason) < 0)
        c->why_not = NULL;
    bool asked = getenv(IVSHM_ENV_REGION) ||
                 strcmp(c->region, IVSHM_DEFAULT_URI) != 0;
    if (!asked && (st == IVSHM_ERR_NODEV || st == IVSHM_ERR_NOENT)) {
        opal_output_verbose(1, c->output,
                            "btl ivshmem: not used on %s: %s", host,
                            c->why_not ? c->why_not : reason);
    } else {
        const char *topic = "region-unavailable";
        if (st == IVSHM_ERR_VERSION || st == IVSHM_ERR_BAD_MAGIC ||
            st == IVSHM_ERR_CORRUPT || st == IVSHM_ERR_SIZE_MISMATCH ||
            st == IVSHM_ERR_UNFORMATTED)
            topic = "region-incompatible";
        else if (st == IVSHM_ERR_NOSPACE || st == IVSHM_ERR_REGISTRY_FULL ||
                 st == IVSHM_ERR_TOO_SMALL)
            topic = "region-full";
        opal_show_help("help-mpi-btl-ivshmem.txt", topic, true, host,
                       c->region, c->why_not ? c->why_not : reason);
    }
    mca_btl_ivshmem_teardown();
    return OPAL_ERR_NOT_AVAILABLE;
}

/* The job's size bounds the endpoint directory (index = rank). */
static uint32_t job_size(void)
{
    uint32_t n = 0, *pn = &n;
    opal_process_name_t wild = OPAL_PROC_MY_NAME;
    wild.vpid = OPAL_VPID_WILDCARD;
    int rc;
    OPAL_MODEX_RECV_VALUE(rc, IVSHMEM_PMIX_JOB_SIZE, &wild, &pn, IVSHMEM_PMIX_UINT32);
    if (rc != OPAL_SUCCESS || n == 0)
        n = (uint32_t)OPAL_PROC_MY_NAME.vpid + 1;
    return n;
}

int mca_btl_ivshmem_setup(void)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    mca_btl_base_module_t *m = &mca_btl_ivshmem_module.super;
    ivshm_status_t st;
    if (strcmp(c->region, "none") == 0) {
        opal_output_verbose(1, c->output, "btl ivshmem: region route off "
                                          "(btl_ivshmem_region none)");
        return OPAL_ERR_NOT_AVAILABLE;
    }
    if ((st = ivshm_region_open(c->region, 0, &c->r)) != IVSHM_OK)
        return step_aside(st, "cannot open the region");
    if ((st = ivshm_attach(c->r)) != IVSHM_OK)
        return step_aside(st, "cannot attach to the region");
    /* an unplugged device (SIGBUS on the next access) ends the rank with
     * one message naming the region, not an unexplained crash */
    if ((st = ivshm_region_guard(c->r)) != IVSHM_OK)
        opal_output_verbose(1, c->output, "btl ivshmem: no SIGBUS guard: %s",
                            ivshm_last_error());
    /* a rank may compute for minutes without calling MPI: keep the lease */
    if ((st = ivshm_lease_start_thread(c->r)) != IVSHM_OK)
        return step_aside(st, "cannot start the lease heartbeat");
    char key[IVSHM_JOB_KEY_MAX + 1];
    snprintf(key, sizeof(key), "ompi-%08x",
             (unsigned)OPAL_PROC_MY_NAME.jobid);
    uint32_t nprocs = job_size();
    if ((st = ivshm_domain_join(c->r, key, nprocs, &c->dom)) != IVSHM_OK)
        return step_aside(st, "cannot join the job's area");
    ivshm_ep_config_t cfg;
    ivshm_ep_config_init(&cfg);
    cfg.fifo_cells = c->fifo_cells;
    cfg.cell_size = c->cell_size;
    cfg.fbox_cells = c->fbox_size;
    cfg.fbox_threshold = c->fbox_threshold;
    cfg.frag_size = c->frag_size;
    cfg.frag_count = c->frag_count;
    if ((st = ivshm_ep_config_check(&cfg)) != IVSHM_OK)
        return step_aside(st, "invalid btl_ivshmem parameters");
    if (m->btl_max_send_size > cfg.frag_size)
        m->btl_max_send_size = cfg.frag_size;
    /* a whole message that fits a cell after its short header travels
     * inline */
    c->inline_max = cfg.cell_size - IVSHM_CELL_OVERHEAD;
    mca_btl_ivshmem_clamp_eager(m);
    st = ivshm_ep_create(c->dom, (int)OPAL_PROC_MY_NAME.vpid, &cfg,
                         mca_btl_ivshmem_recv, NULL, &c->ep);
    if (st != IVSHM_OK)
        return step_aside(st, "cannot create the channel endpoint");
    ivshm_ep_set_event_handler(c->ep, mca_btl_ivshmem_event, NULL);
    ivshm_ep_set_whole_handler(c->ep, mca_btl_ivshmem_recv_whole);
    size_t box_max = ivshm_ep_box_msg_max(c->ep);
    c->sendi_max = box_max > c->inline_max ? box_max : c->inline_max;
    c->npeers = nprocs;
    c->peers = calloc(nprocs, sizeof(*c->peers));
    c->seen = calloc(nprocs, 1);
    int rc = opal_free_list_init(&c->frags, sizeof(mca_btl_ivshmem_frag_t),
                                 opal_cache_line_size,
                                 OBJ_CLASS(mca_btl_ivshmem_frag_t),
                                 m->btl_max_send_size, opal_cache_line_size,
                                 16, -1, 16, NULL, 0, NULL, NULL, NULL);
    if (rc == OPAL_SUCCESS)
        rc = opal_free_list_init(&c->regs, sizeof(mca_btl_ivshmem_reg_t),
                                 opal_cache_line_size,
                                 OBJ_CLASS(mca_btl_ivshmem_reg_t), 0,
                                 opal_cache_line_size, 16, -1, 16, NULL, 0,
                                 NULL, NULL, NULL);
    if (!c->peers || !c->seen || rc != OPAL_SUCCESS)
        return step_aside(IVSHM_ERR_SYS, "out of memory");
    return OPAL_SUCCESS;
}

void mca_btl_ivshmem_teardown(void)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    /* first, while our lease still holds the heap's chunks */
    mca_btl_ivshmem_heap_detach();
    if (c->ep) {
        ivshm_ep_destroy(c->ep);
        c->ep = NULL;
    }
    if (c->dom) {
        ivshm_domain_leave(c->dom);
        c->dom = NULL;
    }
    if (c->r) {
        /* cleared first: the lookup of ivshm/locate.h reads it once, so a
         * registration that starts from now on finds no region; one that
         * read it just before may still use it while it closes (Open MPI
         * closes the BTL after pml ucx, docs/ucx.md: no such caller then) */
        ivshm_region_t *r = c->r;
        __atomic_store_n(&c->r, NULL, __ATOMIC_RELEASE);
        ivshm_region_close(r);
    }
    if (c->peers) {
        for (uint32_t i = 0; i < c->npeers; i++)
            if (c->peers[i]) {
                OBJ_DESTRUCT(&c->peers[i]->pending);
                free(c->peers[i]);
            }
        free(c->peers);
        c->peers = NULL;
    }
    free(c->seen);
    c->seen = NULL;
    c->reached = 0;
    c->others_seen = 0;
}

/* Region memory for MPI_Alloc_mem (through the ivshmem mpool): while this
 * process is in the region and may reach a peer through us (Open MPI adds
 * peers lazily, so before add_procs has shown every rank it may), and only
 * for buffers larger than one eager message: smaller ones gain nothing
 * from a single copy and would each take a whole chunk of the region. */
static bool region_mem_useful(void)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    return c->ep && (c->reached || c->others_seen + 1 < c->npeers);
}

void *mca_btl_ivshmem_region_alloc(size_t size)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    uint64_t off;
    if (!c->r || ivshm_alloc(c->r, size, &off) != IVSHM_OK)
        return NULL;
    return (char *)ivshm_region_base(c->r) + off;
}

void mca_btl_ivshmem_region_free(void *ptr)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    /* no region: it is gone, and its chunks with it */
    uint64_t off = mca_btl_ivshmem_region_offset(ptr, 1);
    if (off != UINT64_MAX)
        (void)ivshm_free(c->r, off); /* fails only with the lease lost */
}

static void *region_mem_alloc(size_t size)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    if (!region_mem_useful() ||
        size <= mca_btl_ivshmem_module.super.btl_eager_limit)
        return NULL;
    IVSHMEM_LOCK();
    void *p = mca_btl_ivshmem_region_alloc(size);
    IVSHMEM_UNLOCK();
    if (!p) {
        static bool said;
        if (!said)
            opal_output_verbose(1, c->output,
                                "btl ivshmem: MPI_Alloc_mem of %zu bytes "
                                "stays in private memory (copied through "
                                "sends), as will others that do not fit: %s",
                                size, ivshm_last_error());
        said = true;
    }
    return p;
}

static void region_mem_free(void *ptr)
{
    IVSHMEM_LOCK();
    mca_btl_ivshmem_region_free(ptr);
    IVSHMEM_UNLOCK();
}

/* coll ivshmem's areas: the region is useful to it also where this BTL
 * reaches no peer (every rank in one VM still shares one region) */
static void *coll_alloc(size_t size, uint64_t *off)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    IVSHMEM_LOCK();
    void *p = mca_btl_ivshmem_region_alloc(size);
    /* a full region: once, the cause (other jobs' heap blocks among
     * them), else the communicator's collectives fall back unexplained */
    static bool said;
    if (!p && !said && c->r) {
        char host[256] = "?";
        gethostname(host, sizeof(host));
        opal_show_help("help-mpi-btl-ivshmem.txt", "coll-area-full", true,
                       host, c->region, ivshm_last_error());
        said = true;
    }
    IVSHMEM_UNLOCK();
    *off = p ? mca_btl_ivshmem_region_offset(p, size) : UINT64_MAX;
    return p;
}

static int coll_map(const ivshm_identity_t *owner, uint64_t off, uint64_t len,
                    void **addr)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    *addr = NULL;
    if (!c->r)
        return IVSHM_ERR_INVAL;
    ivshm_status_t st = ivshm_region_owned(c->r, owner, off, len);
    if (st == IVSHM_OK)
        *addr = (char *)ivshm_region_base(c->r) + off;
    return st;
}

static bool coll_alive(const ivshm_identity_t *id)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    if (!c->r)
        return false;
    IVSHMEM_LOCK();
    (void)ivshm_gc(c->r, NULL); /* a dead lease in this VM ends at once */
    IVSHMEM_UNLOCK();
    /* settled: a rank that another process' collector is judging (a
     * paused VM it may still back off from) is waited for, up to a
     * second, not taken for gone, which would fail the collective; out
     * of the lock, which the other threads' sends and progress need (the
     * lookup only reads the region, as coll_map's does) */
    ivshm_locality_t loc = ivshm_peer_locality_settled(c->r, id);
    return loc != IVSHM_PEER_STALE && loc != IVSHM_PEER_REMOTE;
}

static uint32_t coll_lease_ms(void)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    ivshm_region_info_t inf;
    if (!c->r || ivshm_region_info(c->r, &inf) != IVSHM_OK)
        return 0;
    return inf.lease_timeout_ms;
}

mca_btl_ivshmem_modex_t *mca_btl_ivshmem_modex_get(const opal_process_name_t *name)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    mca_btl_ivshmem_modex_t *mx = NULL;
    size_t size = 0;
    int rc = ivshmem_modex_recv_if_posted(&c->super.btl_version, name,
                                          (void **)&mx, &size);
    if (rc != OPAL_SUCCESS || !mx || size != sizeof(*mx) ||
        mx->magic != IVSHMEM_MODEX_MAGIC ||
        mx->version != IVSHMEM_MODEX_VERSION) {
        opal_output_verbose(1, c->output,
                            "btl ivshmem: rank %u: no usable ivshmem modex "
                            "entry (component off there, or another "
                            "version): left to other BTLs",
                            (unsigned)name->vpid);
        free(mx);
        return NULL;
    }
    return mx;
}

bool mca_btl_ivshmem_region_takes(const mca_btl_ivshmem_modex_t *mx,
                                  ivshm_locality_t *locp)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    ivshm_locality_t loc = IVSHM_PEER_REMOTE;
    /* settled: a peer in doubt now would go to other BTLs for the job */
    if (c->ep && (mx->flags & IVSHMEM_MODEX_REGION))
        loc = ivshm_peer_locality_settled(c->r, &mx->id);
    if (locp)
        *locp = loc;
    return loc == IVSHM_PEER_OTHER_VM || (loc == IVSHM_PEER_SAME_VM && c->same_vm);
}

/* Where the region heap runs, malloc'd blocks from 64 KiB are region
 * memory and ob1's RGET moves their messages with one copy from the eager
 * limit on: the limit is then IVSHMEM_EAGER_HEAP, unless set. Elsewhere
 * a message past the eager limit takes ob1's rendezvous with two copies
 * all the same, plus a round trip (RNDV, ACK) and, under
 * MPI_THREAD_MULTIPLE, the sender's copy in the one thread that progresses
 * (Open MPI 4.1's sync_wait_mt), so the limit stays 32 KiB there
 * (docs/channels.md, The eager limit, has the figures). */
static void eager_for_heap(mca_btl_base_module_t *m, bool heap)
{
    if (!heap)
        return;
    const char *names[] = {"eager_limit", "rndv_eager_limit"};
    size_t *limits[] = {&m->btl_eager_limit, &m->btl_rndv_eager_limit};
    for (int i = 0; i < 2; i++) {
        mca_base_var_source_t src = MCA_BASE_VAR_SOURCE_DEFAULT;
        int v = mca_base_var_find("opal", "btl", "ivshmem", names[i]);
        if (v >= 0 && mca_base_var_get_value(v, NULL, &src, NULL) == OPAL_SUCCESS &&
            src == MCA_BASE_VAR_SOURCE_DEFAULT && *limits[i] > IVSHMEM_EAGER_HEAP)
            *limits[i] = IVSHMEM_EAGER_HEAP;
    }
    mca_btl_ivshmem_clamp_eager(m); /* as at set-up */
    opal_output_verbose(1, mca_btl_ivshmem_component.output,
                        "btl ivshmem: eager limit %zu (region heap: larger "
                        "messages from its blocks move with one copy)",
                        m->btl_eager_limit);
}

static mca_btl_base_module_t **ivshmem_init(int *num_btls,
                                            bool enable_progress_threads,
                                            bool enable_mpi_threads)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    (void)enable_progress_threads;
    *num_btls = 0;
    /* the two routes are independent: a VM without the region may still
     * reach other hosts over verbs, and one without RDMA the region */
    bool region = mca_btl_ivshmem_setup() == OPAL_SUCCESS;
    if (region && enable_mpi_threads)
        mca_btl_ivshmem_threads_enable(); /* MPI_THREAD_MULTIPLE */
    mca_btl_ivshmem_modex_t mx;
    memset(&mx, 0, sizeof(mx));
    /* the verbs route serves one thread at a time */
    bool verbs = !enable_mpi_threads &&
                 ivshmem_verbs_setup(job_size(), &mx.verbs) == OPAL_SUCCESS;
    if (enable_mpi_threads)
        opal_output_verbose(1, c->output, "btl ivshmem: MPI_THREAD_MULTIPLE: "
                                          "the region route only (no verbs)");
    if (!region && !verbs)
        return NULL;
    mx.magic = IVSHMEM_MODEX_MAGIC;
    mx.version = IVSHMEM_MODEX_VERSION;
    if (region) {
        mx.flags |= IVSHMEM_MODEX_REGION;
        ivshm_self_identity(c->r, &mx.id);
        ivshm_ep_address(c->ep, mx.addr);
    }
    if (verbs)
        mx.flags |= IVSHMEM_MODEX_VERBS;
    int rc;
    OPAL_MODEX_SEND(rc, IVSHMEM_PMIX_GLOBAL, &c->super.btl_version, &mx,
                    sizeof(mx));
    mca_btl_base_module_t **mods = malloc(2 * sizeof(*mods));
    if (rc != OPAL_SUCCESS || !mods) {
        free(mods);
        mca_btl_ivshmem_teardown();
        ivshmem_verbs_teardown();
        return NULL;
    }
    if (region) {
        mods[(*num_btls)++] = &mca_btl_ivshmem_module.super;
        opal_output_verbose(1, c->output,
                            "btl ivshmem: rank %u uses region %s (endpoint %u)",
                            (unsigned)OPAL_PROC_MY_NAME.vpid, c->region,
                            ivshm_ep_index(c->ep));
        /* large malloc blocks into the region, where libivshm-heap.so
         * runs in this process (docs/heap.md) */
        eager_for_heap(&mca_btl_ivshmem_module.super,
                       mca_btl_ivshmem_heap_attach());
    }
    if (verbs)
        mods[(*num_btls)++] = IVSHMEM_VERBS_MODULE;
    return mods;
}

static int ivshmem_progress(void)
{
    mca_btl_ivshmem_component_t *c = &mca_btl_ivshmem_component;
    int n = ivshmem_verbs_progress();
    if (!c->ep)
        return n;
    /* MPI_THREAD_MULTIPLE: one thread consumes the queues; the others
     * return at once instead of waiting for it. Gets that ob1 starts from
     * this pass' callbacks copy after it. */
    bool mt = c->threads;
    if (mt) {
        if (!ivshmem_lock_try(&c->lock))
            return n;
        mca_btl_ivshmem_progress_begin();
    }
    n += ivshm_ep_progress_whole(c->ep, mca_btl_ivshmem_recv_whole);
    if (c->pending_frags)
        n += mca_btl_ivshmem_progress_pending();
    if (mt) {
        ivshmem_lock_give(&c->lock);
        n += mca_btl_ivshmem_progress_end();
    }
    return n;
}
