/*
 * The verbs route of BTL ivshmem: peers on other hosts, over InfiniBand or
 * RoCE reliable-connected queue pairs (libibverbs), connected through RDMA
 * CM (librdmacm). It is a second module of the same component, with its
 * own exclusivity, latency and bandwidth: ob1 picks the region module for
 * peers that map our region, this one for peers on other hosts, and tcp
 * only where neither reaches.
 *
 * Parts:
 *   btl_ivshmem_verbs_device.c  parameters, device, listener, CQ, rcache,
 *                               start-up and release
 *   btl_ivshmem_verbs.c         connections (RDMA CM events), completions,
 *                               credit flow control
 *   btl_ivshmem_verbs_module.c  the BTL module: add_procs, eager sends,
 *                               registration (rcache) and RDMA put/get
 *
 * Wire format of an eager message (one receive buffer each):
 *   struct ivshmem_verbs_hdr, then len bytes of payload.
 * Everything a peer sends (headers, connection private data, registration
 * handles) is untrusted and checked before use.
 */
#ifndef MCA_BTL_IVSHMEM_VERBS_H
#define MCA_BTL_IVSHMEM_VERBS_H

#include "btl_ivshmem.h"
#include "btl_ivshmem_credit.h"

#if !IVSHMEM_HAVE_VERBS
/* built without libibverbs/librdmacm (configure --without-verbs): the
 * component offers the region route only */
static inline void ivshmem_verbs_register_params(const mca_base_component_t *c)
{
    (void)c;
}
static inline int ivshmem_verbs_setup(uint32_t nprocs, ivshmem_verbs_addr_t *a)
{
    (void)nprocs;
    (void)a;
    return OPAL_ERR_NOT_AVAILABLE;
}
static inline void ivshmem_verbs_teardown(void) {}
static inline int ivshmem_verbs_progress(void) { return 0; }
static inline int ivshmem_verbs_peer(void) { return -1; }
#define IVSHMEM_VERBS_MODULE NULL
#else
#define IVSHMEM_VERBS_MODULE (&mca_btl_ivshmem_verbs_module)

#include "opal/class/opal_free_list.h"
#include "opal/class/opal_list.h"
#include "opal/mca/rcache/rcache.h"

#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>

BEGIN_C_DECLS

/* Eager message header. credits: receive buffers the sender has reposted
 * since it last said so. */
typedef struct ivshmem_verbs_hdr_t {
    uint8_t tag;
    uint8_t type;
    uint16_t credits;
    uint32_t len;
} ivshmem_verbs_hdr_t;
#define IVSHMEM_VERBS_DATA 1
#define IVSHMEM_VERBS_CREDIT 2

/* Connection private data (untrusted on receipt). */
#define IVSHMEM_VERBS_CONN_MAGIC 0x43564849u /* "IHVC" */
#define IVSHMEM_VERBS_COLLISION 0x4c4f4349u  /* "ICOL": both sides called */
typedef struct ivshmem_verbs_conn_data_t {
    uint32_t magic;
    uint32_t jobid;
    uint32_t vpid;
    uint16_t rq_depth;
    uint16_t pad;
} ivshmem_verbs_conn_data_t;

typedef enum {
    VC_IDLE,       /* nothing yet */
    VC_CONNECTING, /* our request is under way */
    VC_ACCEPTING,  /* we accepted the peer's request */
    VC_CONNECTED,
    VC_CLOSED,     /* ended (the peer left or failed): sends fail */
} ivshmem_verbs_state_t;

/* What a work request's wr_id points at: the completion says which. */
enum { VWR_RECV = 1, VWR_SEND, VWR_RDMA };
typedef struct ivshmem_verbs_wr_t {
    int kind;
} ivshmem_verbs_wr_t;

typedef struct ivshmem_verbs_rslot_t {
    ivshmem_verbs_wr_t wr;
    struct ivshmem_verbs_conn_t *conn;
    uint32_t idx;
} ivshmem_verbs_rslot_t;

/* One peer's connection. */
typedef struct ivshmem_verbs_conn_t {
    struct mca_btl_base_endpoint_t *ep;
    ivshmem_verbs_addr_t addr;     /* the peer's (from its modex) */
    ivshmem_verbs_state_t state;
    struct rdma_cm_id *id;         /* the id whose QP carries traffic */
    struct rdma_cm_id *out_id;     /* our own request, while it lives */
    uint64_t started_ns;           /* when connecting began */
    int32_t credits;               /* peer's receive buffers we may use */
    uint32_t owed;                 /* reposted here, not yet told */
    uint32_t sq_used, max_inline;    /* depths: ivshmem_verbs.sq/rq_depth */
    char *rbuf;                    /* rq_depth receive buffers */
    struct ibv_mr *rmr;
    ivshmem_verbs_rslot_t *rslots;
    opal_list_t pending;           /* sends waiting for room or connection */
} ivshmem_verbs_conn_t;

/* A registration through the rcache (grdma caches it). */
typedef struct ivshmem_verbs_handle_t {
    uint32_t rkey;
    uint32_t lkey;
} ivshmem_verbs_handle_t;
typedef struct ivshmem_verbs_reg_t {
    mca_rcache_base_registration_t base;
    struct ibv_mr *mr;
    ivshmem_verbs_handle_t handle;
} ivshmem_verbs_reg_t;

/* Send and RDMA descriptors. */
typedef struct ivshmem_verbs_frag_t {
    mca_btl_base_descriptor_t base;
    mca_btl_base_segment_t segment;
    ivshmem_verbs_wr_t wr;
    struct mca_btl_base_endpoint_t *ep;
    ivshmem_verbs_hdr_t *hdr;      /* payload buffer: header, then data */
    uint32_t lkey;
    /* RDMA (kind VWR_RDMA) */
    void *local_address;
    struct mca_btl_base_registration_handle_t *local_handle;
    mca_btl_base_rdma_completion_fn_t cbfunc;
    void *cbcontext, *cbdata;
    uint32_t wr_left;              /* work requests not yet complete */
} ivshmem_verbs_frag_t;
OBJ_CLASS_DECLARATION(ivshmem_verbs_frag_t);

typedef struct ivshmem_verbs_t {
    /* MCA parameters */
    int enable;            /* -1 auto (where a device is), 0 off, 1 on */
    char *device;          /* "" = the first with an active port */
    int port;
    int gid_index;         /* -1 = the first IPv4-mapped GID */
    int resolve_timeout_ms;
    int connect_timeout_s;
    int retry_count;
    int rnr_retry;
    int ack_timeout;       /* local ACK timeout: 4.096 us * 2^ack_timeout */
    int rq_param, sq_param;
    /* state */
    unsigned rq_depth, sq_depth; /* the parameters, clamped */
    struct rdma_event_channel *ech;
    struct rdma_cm_id *listen_id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    int cq_size;
    mca_rcache_base_module_t *rcache;
    opal_free_list_t frags;  /* send buffers, registered through rcache */
    opal_free_list_t rdma_frags;
    bool frags_ready;
    ivshmem_verbs_addr_t self;
    char devname[64];
    ivshmem_verbs_conn_t **conns; /* by vpid */
    uint32_t nconns;
    unsigned progress_calls;
    uint32_t connecting;      /* conns not yet connected */
    uint32_t qps;             /* queue pairs that exist (CQ size, polling) */
    mca_btl_base_module_error_cb_fn_t error_cb;
    bool failed;              /* a fatal error was reported */
} ivshmem_verbs_t;

extern ivshmem_verbs_t ivshmem_verbs;
/* The verbs route's state, in the sources of the verbs route. */
#define IVSHMEM_VERBS (&ivshmem_verbs)
extern mca_btl_base_module_t mca_btl_ivshmem_verbs_module;

/* btl_ivshmem_verbs_device.c */
void ivshmem_verbs_register_params(const mca_base_component_t *comp);
/* opens the device and the listener; fills *addr. OPAL_ERR_NOT_AVAILABLE
 * when the route steps aside (said once, or at verbosity 1 in auto). */
int ivshmem_verbs_setup(uint32_t nprocs, ivshmem_verbs_addr_t *addr);
void ivshmem_verbs_teardown(void);

/* btl_ivshmem_verbs.c */
/* the route's progress where it has a CQ */
int ivshmem_verbs_poll(void);
/* Called by every progress call of the component: a job without the verbs
 * route pays one load and a branch here, not the poll's frame (its work
 * completions' array). */
static inline int ivshmem_verbs_progress(void)
{
    return IVSHMEM_VERBS->cq ? ivshmem_verbs_poll() : 0;
}
ivshmem_verbs_conn_t *ivshmem_verbs_conn_new(struct mca_btl_base_endpoint_t *ep,
                                             const ivshmem_verbs_addr_t *addr);
void ivshmem_verbs_conn_free(ivshmem_verbs_conn_t *vc);
/* posts or queues a send fragment (header filled by the caller) */
int ivshmem_verbs_post_send(ivshmem_verbs_conn_t *vc, ivshmem_verbs_frag_t *f);
/* ends the job: a verbs failure in the middle of it */
void ivshmem_verbs_fatal(struct mca_btl_base_endpoint_t *ep, const char *what);

/* btl_ivshmem_verbs_module.c */
/* The connection to rank vpid, made from its modex entry on first need:
 * in add_procs, or for a connection request from a rank ob1 has not added
 * yet (Open MPI adds peers on first use). NULL, with *why, when the rank
 * is not one for this route. */
ivshmem_verbs_conn_t *ivshmem_verbs_conn_for(uint32_t vpid, const char **why);
/* A rank of this job that the route serves, or will serve once Open MPI
 * adds it (it adds peers on first contact), or -1: decided once, from the
 * modex entries of every rank. */
int ivshmem_verbs_peer(void);
/* hd: the header, checked; data: the payload in our receive buffer */
void ivshmem_verbs_deliver(ivshmem_verbs_conn_t *vc, const ivshmem_verbs_hdr_t *hd,
                           void *data);
void ivshmem_verbs_send_done(ivshmem_verbs_frag_t *f, int status);
void ivshmem_verbs_rdma_done(ivshmem_verbs_frag_t *f, int status);
int ivshmem_verbs_frag_lkey(ivshmem_verbs_frag_t *f);

END_C_DECLS
#endif /* IVSHMEM_HAVE_VERBS */
#endif
