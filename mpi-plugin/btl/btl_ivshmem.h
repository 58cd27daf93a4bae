/*
 * BTL ivshmem: Open MPI transport between MPI processes in different VMs
 * of one host, over a region mapped by QEMU's ivshmem device.
 *
 * The component maps the region (libivshm), creates one channel endpoint
 * per process in the job's domain and publishes, through the modex, the
 * process' identity (region UUID, VM id, lease) and endpoint address.
 * add_procs marks reachable exactly the peers that map the same region in
 * another VM; same-VM peers stay with vader/sm, others with the network.
 *
 * This file and the component's sources include Open MPI headers only
 * (opal_config.h first), never the project's config.h.
 */
#ifndef MCA_BTL_IVSHMEM_H
#define MCA_BTL_IVSHMEM_H

#include "ompi_compat.h"

#include "opal/class/opal_free_list.h"
#include "opal/mca/btl/btl.h"
#include "opal/mca/btl/base/base.h"
#include "opal/mca/base/mca_base_framework.h"
#include "opal/util/proc.h"

#include <stdbool.h>
#include <string.h>

#include <ivshm/channel.h>

#include "btl_ivshmem_rx.h"
#include <ivshm/ivshm.h>

#include "btl_ivshmem_handle.h"
#include "btl_ivshmem_lock.h"

BEGIN_C_DECLS

#define IVSHMEM_MODEX_MAGIC 0x4d444f4d4d485649ull /* "IVHMMODM" */
#define IVSHMEM_MODEX_VERSION 2u
#define IVSHMEM_MODEX_REGION 0x1u /* id and addr are valid */
#define IVSHMEM_MODEX_VERBS 0x2u  /* verbs is valid */

/* What a process publishes about its verbs route (inside the modex). */
typedef struct ivshmem_verbs_addr_t {
    uint32_t ipv4;     /* RDMA CM listener address, network order */
    uint16_t port;     /* network order */
    uint16_t rq_depth; /* receive buffers it posts per connection */
    uint32_t buf_size; /* bytes per receive buffer, header included */
    uint32_t pad;
} ivshmem_verbs_addr_t;


/* What each process publishes through the modex. */
typedef struct mca_btl_ivshmem_modex_t {
    uint64_t magic;
    uint32_t version;
    uint32_t flags;
    ivshm_identity_t id;
    uint8_t addr[IVSHM_EP_ADDR_SIZE];
    ivshmem_verbs_addr_t verbs;
} mca_btl_ivshmem_modex_t;

typedef struct mca_btl_ivshmem_component_t {
    mca_btl_base_component_3_0_0_t super;
    /* MCA parameters */
    char *region;           /* device URI */
    int same_vm;            /* also carry same-VM peers (testing) */
    int verbose;
    int stats;              /* print per-peer counters at finalize */
    unsigned fbox_size;     /* cells per fast box */
    unsigned fbox_threshold;
    unsigned fifo_cells;
    unsigned cell_size;
    unsigned frag_size;
    unsigned frag_count;
    int output;
    /* state */
    ivshm_region_t *r;
    ivshm_domain_t *dom;
    ivshm_ep_t *ep;
    opal_free_list_t frags;
    struct mca_btl_base_endpoint_t **peers; /* by channel peer index */
    uint32_t npeers;
    uint64_t pending_frags; /* queued sends, all endpoints */
    char *why_not; /* reason the component stepped aside, for verbose */
    uint32_t reached;       /* peers this process reaches through us */
    uint32_t others_seen;   /* other ranks add_procs has shown us */
    uint8_t *seen;          /* by rank, for others_seen */
    opal_free_list_t regs;  /* registration handles */
    /* Region memory for the ivshmem mpool (MPI_Alloc_mem): the mpool
     * finds this component among the initialised BTLs and checks abi. */
    uint32_t abi;
    bool (*mem_useful)(void);        /* would region buffers serve a peer */
    void *(*mem_alloc)(size_t size); /* NULL: cannot (caller mallocs) */
    void (*mem_free)(void *ptr);
    /* a rank of this job the verbs route serves or will serve (-1: none):
     * the HCA cannot register region memory, so such a job keeps
     * MPI_Alloc_mem private (docs/verbs.md, MPI_Alloc_mem) */
    int (*verbs_peer)(void);
    /* Region memory for coll ivshmem's shared areas (same abi check):
     * memory of this process' lease (NULL: none), its region offset in
     * *off; our address of a range another process allocated, once the
     * range is checked to be that process' memory (IVSHM_OK); whether a
     * process' lease still holds (dead leases collected first). */
    void *(*coll_alloc)(size_t size, uint64_t *off);
    void (*coll_free)(void *ptr);
    int (*coll_map)(const ivshm_identity_t *owner, uint64_t off,
                    uint64_t len, void **addr);
    bool (*coll_alive)(const ivshm_identity_t *id);
    /* the region offset of [p, p+len) if it is region memory this process
     * maps (its own: region heap blocks, MPI_Alloc_mem), else UINT64_MAX */
    uint64_t (*coll_offset)(const void *p, size_t len);
    /* the region's lease timeout in ms (0: no region): coll ivshmem
     * re-checks rank 0's hold on its area within a quarter of it */
    uint32_t (*coll_lease_ms)(void);
    /* MPI_THREAD_MULTIPLE: every call into the endpoint holds this lock,
     * recursively (an ob1 callback made from our progress may send);
     * progress only tries it. Unused, and never taken, otherwise. */
    bool threads;
    int lock; /* 1: held (btl_ivshmem_lock.h) */
    /* gets completed after the progress pass that started them (stats) */
    uint64_t gets_after_pass;
    /* received pieces dropped by the receive gate, by reason */
    uint64_t rx_dropped[IVSHMEM_RX_NDROP];
    /* ob1's error callback (btl_register_error): a lost lease ends the job */
    mca_btl_base_module_error_cb_fn_t error_cb;
    /* messages up to this size fit one of our cells: btl_alloc stages them
     * privately without asking the channel for a fragment */
    size_t inline_max;
    /* contiguous messages up to this size go to the channel from sendi in
     * one call, which copies them once: into a cell (inline_max) or a
     * fast box's message entry (ivshm_ep_box_msg_max), else a fragment */
    size_t sendi_max;
} mca_btl_ivshmem_component_t;

/* Bumped whenever the component struct or mem_* / coll_* change meaning. */
#define MCA_BTL_IVSHMEM_ABI 0x49560008u

OPAL_MODULE_DECLSPEC extern mca_btl_ivshmem_component_t
    mca_btl_ivshmem_component;

/* The BTL ivshmem of this process, for the project's other components
 * (mpool, coll), which are separate objects: found among the initialised
 * BTLs, and only if built from this header (abi). */
static inline mca_btl_ivshmem_component_t *mca_btl_ivshmem_find(void)
{
    if (!mca_base_framework_is_open(&opal_btl_base_framework))
        return NULL;
    mca_btl_base_selected_module_t *sm;
    OPAL_LIST_FOREACH (sm, &mca_btl_base_modules_initialized,
                       mca_btl_base_selected_module_t) {
        mca_btl_base_component_t *bc = sm->btl_component;
        if (strcmp(bc->btl_version.mca_component_name, "ivshmem") != 0)
            continue;
        mca_btl_ivshmem_component_t *c = (mca_btl_ivshmem_component_t *)bc;
        return c->abi == MCA_BTL_IVSHMEM_ABI ? c : NULL;
    }
    return NULL;
}

typedef struct mca_btl_ivshmem_module_t {
    mca_btl_base_module_t super;
} mca_btl_ivshmem_module_t;
extern mca_btl_ivshmem_module_t mca_btl_ivshmem_module;

/* One per reachable peer process. */
struct mca_btl_base_endpoint_t {
    opal_proc_t *proc;
    uint32_t peer;  /* channel peer index (the peer's directory index) */
    uint32_t vpid;
    uint64_t sends, bytes_out;
    uint64_t recvs, bytes_in;
    uint64_t queued;      /* sends that found the peer's queue full */
    uint64_t gets, get_bytes; /* single-copy reads of the peer's buffers */
    uint64_t puts, put_bytes; /* single-copy writes into them */
    uint64_t rdma_refused;    /* put/get with a handle that does not hold */
    uint64_t credit_waits;    /* verbs: sends that found the peer's buffers
                                 all in use and waited for its credits */
    opal_list_t pending;  /* those waiting, in order (retried by progress) */
    struct ivshmem_verbs_conn_t *vc; /* the verbs route's peers: the
                                        connection; NULL for region peers */
};
typedef struct mca_btl_base_endpoint_t mca_btl_base_endpoint_t;

typedef struct mca_btl_ivshmem_reg_t {
    opal_free_list_item_t super;
    mca_btl_base_registration_handle_t handle;
} mca_btl_ivshmem_reg_t;
OBJ_CLASS_DECLARATION(mca_btl_ivshmem_reg_t);

/* A send descriptor. Its data is either in private memory (the free
 * list's buffer: copied into the channel at send) or, for a message larger
 * than a cell, already in one of our channel fragments (rsv, reserved at
 * alloc: ob1 packs straight into shared memory, one copy less). */
typedef struct mca_btl_ivshmem_frag_t {
    mca_btl_base_descriptor_t base;
    mca_btl_base_segment_t segment;
    mca_btl_base_tag_t tag; /* kept while the fragment waits in pending */
    bool reserved;          /* the data is in rsv's fragment */
    ivshm_rsv_t rsv;
} mca_btl_ivshmem_frag_t;
OBJ_CLASS_DECLARATION(mca_btl_ivshmem_frag_t);

int mca_btl_ivshmem_setup(void);
/* the rank's modex entry, checked (free() it), or NULL */
mca_btl_ivshmem_modex_t *mca_btl_ivshmem_modex_get(const opal_process_name_t *name);
/* whether the region route carries the peer that published mx; *loc (if
 * not NULL) gets its locality */
bool mca_btl_ivshmem_region_takes(const mca_btl_ivshmem_modex_t *mx,
                                  ivshm_locality_t *loc);
/* the parameters of a BTL put/get (both modules) */
#define IVSHMEM_RDMA_PARAMS                                                   \
    struct mca_btl_base_module_t *btl,                                        \
        struct mca_btl_base_endpoint_t *endpoint, void *local_address,        \
        uint64_t remote_address,                                              \
        struct mca_btl_base_registration_handle_t *local_handle,              \
        struct mca_btl_base_registration_handle_t *remote_handle,             \
        size_t size, int flags, int order,                                    \
        mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata
/* offset of [p, p + len) in our mapping of the region, UINT64_MAX when it
 * is not wholly inside (or no region is mapped) */
uint64_t mca_btl_ivshmem_region_offset(const void *p, size_t len);
void mca_btl_ivshmem_teardown(void);
void mca_btl_ivshmem_recv(void *arg, const ivshm_msg_t *m);
/* hidden: no other object binds to it, so the channel's usual path, which
 * names it (ivshm_ep_progress_whole), calls it directly */
__attribute__((visibility("hidden"))) void
mca_btl_ivshmem_recv_whole(void *arg, uint32_t sender, uint32_t tag,
                           const void *data, uint32_t len);
/* the region route's entry points (btl_ivshmem_send.c, _rdma.c) */
mca_btl_base_descriptor_t *
mca_btl_ivshmem_alloc(struct mca_btl_base_module_t *btl,
                      struct mca_btl_base_endpoint_t *endpoint, uint8_t order,
                      size_t size, uint32_t flags);
int mca_btl_ivshmem_free(struct mca_btl_base_module_t *btl,
                         mca_btl_base_descriptor_t *des);
int mca_btl_ivshmem_send(struct mca_btl_base_module_t *btl,
                         struct mca_btl_base_endpoint_t *endpoint,
                         struct mca_btl_base_descriptor_t *des,
                         mca_btl_base_tag_t tag);
int mca_btl_ivshmem_sendi(struct mca_btl_base_module_t *btl,
                          struct mca_btl_base_endpoint_t *endpoint,
                          struct opal_convertor_t *convertor, void *header,
                          size_t header_size, size_t payload_size,
                          uint8_t order, uint32_t flags, mca_btl_base_tag_t tag,
                          mca_btl_base_descriptor_t **descriptor);
struct mca_btl_base_registration_handle_t *
mca_btl_ivshmem_register_mem(struct mca_btl_base_module_t *btl,
                             struct mca_btl_base_endpoint_t *endpoint,
                             void *base, size_t size, uint32_t flags);
int mca_btl_ivshmem_deregister_mem(struct mca_btl_base_module_t *btl,
                                   struct mca_btl_base_registration_handle_t *h);
int mca_btl_ivshmem_put(IVSHMEM_RDMA_PARAMS);
int mca_btl_ivshmem_get(IVSHMEM_RDMA_PARAMS);
/* for both modules (btl_ivshmem_module.c, btl_ivshmem_send.c) */
typedef struct mca_btl_base_endpoint_t *(*mca_btl_ivshmem_reach_fn_t)(
    opal_proc_t *proc, opal_proc_t *self, int *rc);
int mca_btl_ivshmem_add_each(size_t nprocs, struct opal_proc_t **procs,
                             struct mca_btl_base_endpoint_t **peers,
                             struct opal_bitmap_t *reachable,
                             mca_btl_ivshmem_reach_fn_t reach);
void mca_btl_ivshmem_print_stats(struct mca_btl_base_endpoint_t *ep,
                                 const char *route);
/* Shared by both modules: hands one received message to the callback ob1
 * registered for its tag (the tag was checked by the caller), with the
 * caller's kept descriptor or none (ivshmem_compat_deliver). Inline: the
 * region route's receive takes it once per message. */
static inline void mca_btl_ivshmem_deliver(struct mca_btl_base_module_t *btl,
                                           struct mca_btl_base_endpoint_t *ep,
                                           mca_btl_base_tag_t tag, void *data,
                                           size_t len,
                                           mca_btl_base_descriptor_t *kept)
{
    const mca_btl_active_message_callback_t *reg =
        mca_btl_base_active_message_trigger + tag;
    if (!reg->cbfunc)
        return;
    mca_btl_base_segment_t seg;
    seg.seg_addr.pval = data;
    seg.seg_len = len;
    ivshmem_compat_deliver(btl, ep, tag, &seg, reg, kept);
}
struct mca_btl_base_descriptor_t *
mca_btl_ivshmem_prepare_src(struct mca_btl_base_module_t *btl,
                            struct mca_btl_base_endpoint_t *endpoint,
                            struct opal_convertor_t *convertor, uint8_t order,
                            size_t reserve, size_t *size, uint32_t flags);
/* Channel events: our lease lost (the job ends with an MPI error). */
void mca_btl_ivshmem_event(void *arg, int kind, uint32_t peer);
/* retries queued sends; returns how many completed */
int mca_btl_ivshmem_progress_pending(void);
/* region memory of this process' lease, or NULL (full, lease lost); no
 * lock: the chunk allocator is safe between threads (the mpool's path and
 * the region heap's backend) */
void *mca_btl_ivshmem_region_alloc(size_t size);
void mca_btl_ivshmem_region_free(void *ptr);
/* the region heap's backend (btl_ivshmem_heap.c): attach once the region
 * route is up (true: the heap runs in this process), detach first at
 * teardown; no-ops without libivshm-heap.so */
void mca_btl_ivshmem_heap_register(void); /* btl_ivshmem_heap_quota */
bool mca_btl_ivshmem_heap_attach(void);
void mca_btl_ivshmem_heap_detach(void);
void mca_btl_ivshmem_heap_print_stats(void);
/* MPI_THREAD_MULTIPLE: the module's entry points take the lock
 * (btl_ivshmem_module.c); the single-threaded ones stay untouched */
void mca_btl_ivshmem_threads_enable(void);
/* MPI_THREAD_MULTIPLE, around a progress pass that holds the lock: gets
 * started from its callbacks wait, and _end, called after the lock is let
 * go, completes them (returns how many) */
void mca_btl_ivshmem_progress_begin(void);
int mca_btl_ivshmem_progress_end(void);
/* A module's limits in order (both modules, at set-up and whenever a limit
 * changes): the eager limit at most the largest send, the rendezvous eager
 * limit at most the eager limit. */
static inline void mca_btl_ivshmem_clamp_eager(mca_btl_base_module_t *m)
{
    if (m->btl_eager_limit > m->btl_max_send_size)
        m->btl_eager_limit = m->btl_max_send_size;
    if (m->btl_rndv_eager_limit > m->btl_eager_limit)
        m->btl_rndv_eager_limit = m->btl_eager_limit;
}
/* The component itself, in the sources of this BTL. */
#define IVSHMEM_COMPONENT (&mca_btl_ivshmem_component)

/* A peer's sends or receives and their bytes (`n`, `bytes` fields of the
 * endpoint), counted only where btl_ivshmem_stats prints them: a small
 * message pays a load and a branch, not two read-modify-writes. */
#define IVSHMEM_COUNT(ep, n, bytes, len)                                     \
    do {                                                                     \
        if (IVSHMEM_COMPONENT->stats) {                                      \
            (ep)->n++;                                                       \
            (ep)->bytes += (len);                                            \
        }                                                                    \
    } while (0)
#define IVSHMEM_LOCK()                                                        \
    do {                                                                      \
        if (mca_btl_ivshmem_component.threads)                               \
            ivshmem_lock_take(&mca_btl_ivshmem_component.lock);              \
    } while (0)
#define IVSHMEM_UNLOCK()                                                      \
    do {                                                                      \
        if (mca_btl_ivshmem_component.threads)                               \
            ivshmem_lock_give(&mca_btl_ivshmem_component.lock);              \
    } while (0)

END_C_DECLS
#endif
