/*
 * BTL ivshmem, verbs route: the BTL module. add_procs takes the peers that
 * publish a verbs address and that the region does not reach (other hosts;
 * same-VM peers stay with vader). Eager sends go as one message per
 * receive buffer; large messages move by RDMA read or write (ob1's RGET
 * and RPUT) on buffers registered through Open MPI's rcache (grdma, a
 * registration cache). Connections, completions and credits live in
 * btl_ivshmem_verbs.c.
 */
#include "btl_ivshmem_verbs.h"

#include "opal/class/opal_bitmap.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* Why the route does not serve the rank that published mx (NULL: it
 * does), with the region's view of that rank in *loc. */
static const char *verbs_why_not(const mca_btl_ivshmem_modex_t *mx,
                                 ivshm_locality_t *loc)
{
    const ivshmem_verbs_addr_t *a = &mx->verbs;
    size_t need = sizeof(ivshmem_verbs_hdr_t) +
                  mca_btl_ivshmem_verbs_module.btl_max_send_size;
    if (mca_btl_ivshmem_region_takes(mx, loc))
        return "reached through the region";
    if (!(mx->flags & IVSHMEM_MODEX_VERBS))
        return "no verbs route there";
    if (a->ipv4 == 0 || a->port == 0 || a->rq_depth < 4 || a->rq_depth > 4096)
        return "its verbs address is not valid";
    if (a->buf_size < need)
        return "its receive buffers are smaller than our fragments "
               "(btl_ivshmem_verbs_max_send_size differs)";
    return NULL;
}

/* The answer of ivshmem_verbs_peer, "no" (-1) as well as a rank: decided
 * once, by the first caller, while any other caller waits in pthread_once
 * (MPI_Alloc_mem may come from several threads under
 * MPI_THREAD_MULTIPLE), so a job without a verbs peer asks the modex of
 * each rank once in all. */
static pthread_once_t verbs_peer_once = PTHREAD_ONCE_INIT;
static _Atomic int verbs_peer_found = -1;

static void verbs_peer_decide(void)
{
    int peer = -1;
    for (uint32_t vpid = 0; IVSHMEM_VERBS->conns &&
                            vpid < IVSHMEM_VERBS->nconns && peer < 0;
         vpid++) {
        if (IVSHMEM_VERBS->conns[vpid]) {
            peer = (int)vpid;
            break;
        }
        if (vpid == OPAL_PROC_MY_NAME.vpid)
            continue;
        opal_process_name_t name = OPAL_PROC_MY_NAME;
        name.vpid = vpid;
        mca_btl_ivshmem_modex_t *mx = mca_btl_ivshmem_modex_get(&name);
        ivshm_locality_t loc = IVSHM_PEER_REMOTE;
        /* a rank in our own VM is vader's, whatever it publishes */
        if (mx && !verbs_why_not(mx, &loc) && loc != IVSHM_PEER_SAME_VM &&
            loc != IVSHM_PEER_SELF)
            peer = (int)vpid;
        free(mx);
    }
    /* pairs with the acquire load in ivshmem_verbs_peer */
    atomic_store_explicit(&verbs_peer_found, peer, memory_order_release);
}

int ivshmem_verbs_peer(void)
{
    pthread_once(&verbs_peer_once, verbs_peer_decide);
    return atomic_load_explicit(&verbs_peer_found, memory_order_acquire);
}

ivshmem_verbs_conn_t *ivshmem_verbs_conn_for(uint32_t vpid, const char **why)
{
    if (vpid >= IVSHMEM_VERBS->nconns) {
        *why = "rank beyond the job's size";
        return NULL;
    }
    if (IVSHMEM_VERBS->conns[vpid])
        return IVSHMEM_VERBS->conns[vpid];
    opal_process_name_t name = OPAL_PROC_MY_NAME;
    name.vpid = vpid;
    mca_btl_ivshmem_modex_t *mx = mca_btl_ivshmem_modex_get(&name);
    if (!mx) {
        *why = "no modex entry";
        return NULL;
    }
    const ivshmem_verbs_addr_t *a = &mx->verbs;
    *why = verbs_why_not(mx, NULL);
    struct mca_btl_base_endpoint_t *ep = NULL;
    ivshmem_verbs_conn_t *vc = NULL;
    if (!*why) {
        ep = calloc(1, sizeof(*ep));
        if (ep) {
            OBJ_CONSTRUCT(&ep->pending, opal_list_t);
            ep->vpid = vpid;
            vc = ivshmem_verbs_conn_new(ep, a);
        }
        if (!vc) {
            if (ep) {
                OBJ_DESTRUCT(&ep->pending);
                free(ep);
            }
            *why = "out of memory";
        } else {
            ep->vc = vc;
            IVSHMEM_VERBS->conns[vpid] = vc;
        }
    }
    free(mx);
    return vc;
}

/* The verbs route's endpoint for proc: a peer of this job on another
 * node that the region does not reach and whose verbs address is sound. */
static struct mca_btl_base_endpoint_t *
verbs_reach(opal_proc_t *proc, opal_proc_t *self, int *rc)
{
    (void)rc;
    if (!IVSHMEM_VERBS->conns ||
        proc->proc_name.jobid != self->proc_name.jobid ||
        OPAL_PROC_ON_LOCAL_NODE(proc->proc_flags))
        return NULL;
    uint32_t vpid = (uint32_t)proc->proc_name.vpid;
    const char *why = NULL;
    ivshmem_verbs_conn_t *vc = ivshmem_verbs_conn_for(vpid, &why);
    if (!vc) {
        opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                            "btl ivshmem: verbs: rank %u: %s", vpid, why);
        return NULL;
    }
    struct mca_btl_base_endpoint_t *ep = vc->ep;
    ep->proc = proc;
    opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                        "btl ivshmem: rank %u -> rank %u: other host: "
                        "reached through verbs",
                        (unsigned)self->proc_name.vpid, vpid);
    return ep;
}

static int verbs_add_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                           struct opal_proc_t **procs,
                           struct mca_btl_base_endpoint_t **peers,
                           struct opal_bitmap_t *reachable)
{
    (void)btl;
    return mca_btl_ivshmem_add_each(nprocs, procs, peers, reachable,
                                    verbs_reach);
}

static void drop_peer(struct mca_btl_base_endpoint_t *ep)
{
    ivshmem_verbs_conn_t *vc = ep->vc;
    if (IVSHMEM_COMPONENT->stats)
        mca_btl_ivshmem_print_stats(ep, "verbs");
    if (vc) {
        if (ep->vpid < IVSHMEM_VERBS->nconns &&
            IVSHMEM_VERBS->conns[ep->vpid] == vc)
            IVSHMEM_VERBS->conns[ep->vpid] = NULL;
        ivshmem_verbs_conn_free(vc);
    }
    OBJ_DESTRUCT(&ep->pending);
    free(ep);
}

static int verbs_del_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                           struct opal_proc_t **procs,
                           struct mca_btl_base_endpoint_t **peers)
{
    (void)btl;
    (void)procs;
    for (size_t i = 0; i < nprocs; i++)
        if (peers[i] && peers[i]->vc)
            drop_peer(peers[i]);
    return OPAL_SUCCESS;
}

static int verbs_finalize(struct mca_btl_base_module_t *btl)
{
    (void)btl;
    for (uint32_t i = 0; IVSHMEM_VERBS->conns && i < IVSHMEM_VERBS->nconns; i++)
        if (IVSHMEM_VERBS->conns[i])
            drop_peer(IVSHMEM_VERBS->conns[i]->ep);
    ivshmem_verbs_teardown();
    return OPAL_SUCCESS;
}

int ivshmem_verbs_frag_lkey(ivshmem_verbs_frag_t *f)
{
    ivshmem_verbs_reg_t *r = (ivshmem_verbs_reg_t *)f->base.super.registration;
    return r ? (int)r->handle.lkey : 0;
}

static mca_btl_base_descriptor_t *
verbs_alloc(struct mca_btl_base_module_t *btl,
            struct mca_btl_base_endpoint_t *endpoint, uint8_t order,
            size_t size, uint32_t flags)
{
    (void)order;
    if (size > btl->btl_max_send_size)
        return NULL;
    ivshmem_verbs_frag_t *f =
        (ivshmem_verbs_frag_t *)opal_free_list_get(&IVSHMEM_VERBS->frags);
    if (!f)
        return NULL;
    f->hdr = (ivshmem_verbs_hdr_t *)f->base.super.ptr;
    f->lkey = (uint32_t)ivshmem_verbs_frag_lkey(f);
    f->wr.kind = VWR_SEND;
    f->ep = endpoint;
    f->segment.seg_addr.pval = f->hdr + 1;
    f->segment.seg_len = size;
    f->base.des_segments = &f->segment;
    f->base.des_segment_count = 1;
    f->base.des_flags = flags;
    f->base.order = MCA_BTL_NO_ORDER;
    return &f->base;
}

static int verbs_free(struct mca_btl_base_module_t *btl,
                      mca_btl_base_descriptor_t *des)
{
    (void)btl;
    opal_free_list_return(&IVSHMEM_VERBS->frags, (opal_free_list_item_t *)des);
    return OPAL_SUCCESS;
}

void ivshmem_verbs_send_done(ivshmem_verbs_frag_t *f, int status)
{
    mca_btl_base_descriptor_t *des = &f->base;
    int own = des->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    if ((des->des_flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK) && des->des_cbfunc)
        des->des_cbfunc(&mca_btl_ivshmem_verbs_module, f->ep, des, status);
    if (own)
        verbs_free(&mca_btl_ivshmem_verbs_module, des);
}

static int verbs_send(struct mca_btl_base_module_t *btl,
                      struct mca_btl_base_endpoint_t *endpoint,
                      struct mca_btl_base_descriptor_t *des,
                      mca_btl_base_tag_t tag)
{
    (void)btl;
    ivshmem_verbs_frag_t *f = (ivshmem_verbs_frag_t *)des;
    f->hdr->tag = tag;
    f->hdr->type = IVSHMEM_VERBS_DATA;
    f->hdr->len = (uint32_t)f->segment.seg_len;
    f->ep = endpoint;
    /* completion is reported when the HCA is done with the buffer */
    des->des_flags |= MCA_BTL_DES_SEND_ALWAYS_CALLBACK;
    if (!opal_list_is_empty(&endpoint->vc->pending) ||
        endpoint->vc->state != VC_CONNECTED)
        endpoint->queued++;
    int rc = ivshmem_verbs_post_send(endpoint->vc, f);
    if (rc == OPAL_SUCCESS)
        IVSHMEM_COUNT(endpoint, sends, bytes_out, f->segment.seg_len);
    return rc;
}

static int verbs_sendi(struct mca_btl_base_module_t *btl,
                       struct mca_btl_base_endpoint_t *endpoint,
                       struct opal_convertor_t *convertor, void *header,
                       size_t header_size, size_t payload_size, uint8_t order,
                       uint32_t flags, mca_btl_base_tag_t tag,
                       mca_btl_base_descriptor_t **descriptor)
{
    (void)flags;
    if (descriptor)
        *descriptor = NULL;
    ivshmem_verbs_conn_t *vc = endpoint->vc;
    size_t total = header_size + payload_size;
    if (total > btl->btl_eager_limit || vc->state != VC_CONNECTED ||
        !opal_list_is_empty(&vc->pending) ||
        !ivshmem_credit_data_ok(vc->credits) ||
        vc->sq_used >= IVSHMEM_VERBS->sq_depth) {
        /* not now: ob1 sends through the descriptor it gets back, and our
         * send starts the connection (a request ob1 parked would only
         * come back here, and never connect) */
        if (descriptor)
            *descriptor = verbs_alloc(btl, endpoint, order, total, flags);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    mca_btl_base_descriptor_t *des =
        verbs_alloc(btl, endpoint, order, total, MCA_BTL_DES_FLAGS_BTL_OWNERSHIP);
    if (!des)
        return OPAL_ERR_OUT_OF_RESOURCE;
    ivshmem_verbs_frag_t *f = (ivshmem_verbs_frag_t *)des;
    char *buf = f->segment.seg_addr.pval;
    memcpy(buf, header, header_size);
    size_t packed = payload_size;
    if (payload_size) {
        struct iovec iov = {buf + header_size, payload_size};
        uint32_t iov_count = 1;
        if (opal_convertor_pack(convertor, &iov, &iov_count, &packed) < 0) {
            verbs_free(btl, des);
            return OPAL_ERROR;
        }
    }
    f->segment.seg_len = header_size + packed;
    f->hdr->tag = tag;
    f->hdr->type = IVSHMEM_VERBS_DATA;
    f->hdr->len = (uint32_t)f->segment.seg_len;
    int rc = ivshmem_verbs_post_send(vc, f);
    if (rc == OPAL_SUCCESS)
        IVSHMEM_COUNT(endpoint, sends, bytes_out, f->segment.seg_len);
    return rc;
}

/* A message from a peer: the header was checked; the callback sees one
 * segment pointing at the payload in our receive buffer. */
void ivshmem_verbs_deliver(ivshmem_verbs_conn_t *vc, const ivshmem_verbs_hdr_t *hd,
                           void *data)
{
    if (hd->tag >= MCA_BTL_TAG_MAX)
        return;
    struct mca_btl_base_endpoint_t *ep = vc->ep;
    IVSHMEM_COUNT(ep, recvs, bytes_in, hd->len);
    mca_btl_ivshmem_deliver(&mca_btl_ivshmem_verbs_module, ep,
                            (mca_btl_base_tag_t)hd->tag, data, hd->len, NULL);
}

/* ---- registration and RDMA ---- */

static struct mca_btl_base_registration_handle_t *
verbs_register_mem(struct mca_btl_base_module_t *btl,
                   struct mca_btl_base_endpoint_t *endpoint, void *base,
                   size_t size, uint32_t flags)
{
    (void)btl;
    (void)endpoint;
    mca_rcache_base_registration_t *reg = NULL;
    int access = (int)(flags & MCA_BTL_REG_FLAG_ACCESS_ANY);
    if (!IVSHMEM_VERBS->rcache ||
        IVSHMEM_VERBS->rcache->rcache_register(IVSHMEM_VERBS->rcache, base,
                                               size, 0, access,
                                               &reg) != OPAL_SUCCESS ||
        !reg)
        return NULL;
    return (struct mca_btl_base_registration_handle_t *)&((ivshmem_verbs_reg_t *)reg)->handle;
}

static int verbs_deregister_mem(struct mca_btl_base_module_t *btl,
                                struct mca_btl_base_registration_handle_t *h)
{
    (void)btl;
    ivshmem_verbs_reg_t *r =
        (ivshmem_verbs_reg_t *)((char *)h - offsetof(ivshmem_verbs_reg_t, handle));
    IVSHMEM_VERBS->rcache->rcache_deregister(IVSHMEM_VERBS->rcache, &r->base);
    return OPAL_SUCCESS;
}

void ivshmem_verbs_rdma_done(ivshmem_verbs_frag_t *f, int status)
{
    /* one completion per work request of the transfer; the last reports */
    if (f->wr_left > 1) {
        f->wr_left--;
        return;
    }
    f->cbfunc(&mca_btl_ivshmem_verbs_module, f->ep, f->local_address,
              f->local_handle, f->cbcontext, f->cbdata, status);
    opal_free_list_return(&IVSHMEM_VERBS->rdma_frags, &f->base.super);
}

/* RDMA read (get) or write (put) of size bytes, as work requests of at
 * most 1 GiB (below every device's message limit). */
static int verbs_rdma(struct mca_btl_base_endpoint_t *ep, bool put,
                      void *local_address, uint64_t remote_address,
                      struct mca_btl_base_registration_handle_t *local_handle,
                      struct mca_btl_base_registration_handle_t *remote_handle,
                      size_t size, mca_btl_base_rdma_completion_fn_t cbfunc,
                      void *cbcontext, void *cbdata)
{
    ivshmem_verbs_conn_t *vc = ep->vc;
    const size_t chunk = (size_t)1 << 30;
    uint32_t nwr = (uint32_t)((size + chunk - 1) / chunk);
    if (nwr == 0)
        nwr = 1;
    if (!local_handle || !remote_handle)
        return OPAL_ERR_BAD_PARAM;
    if (vc->state == VC_CLOSED)
        return OPAL_ERR_UNREACH;
    if (vc->state != VC_CONNECTED ||
        vc->sq_used + nwr > IVSHMEM_VERBS->sq_depth)
        return OPAL_ERR_OUT_OF_RESOURCE; /* ob1 retries */
    ivshmem_verbs_frag_t *f =
        (ivshmem_verbs_frag_t *)opal_free_list_get(&IVSHMEM_VERBS->rdma_frags);
    if (!f)
        return OPAL_ERR_OUT_OF_RESOURCE;
    ivshmem_verbs_handle_t lh, rh;
    memcpy(&lh, local_handle, sizeof(lh));
    memcpy(&rh, remote_handle, sizeof(rh)); /* the peer's: the HCA checks */
    f->wr.kind = VWR_RDMA;
    f->ep = ep;
    f->local_address = local_address;
    f->local_handle = local_handle;
    f->cbfunc = cbfunc;
    f->cbcontext = cbcontext;
    f->cbdata = cbdata;
    f->wr_left = nwr;
    for (uint32_t k = 0; k < nwr; k++) {
        size_t off = (size_t)k * chunk;
        size_t len = size - off < chunk ? size - off : chunk;
        struct ibv_sge sge = {.addr = (uintptr_t)local_address + off,
                              .length = (uint32_t)len, .lkey = lh.lkey};
        struct ibv_send_wr wr, *bad;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = (uintptr_t)&f->wr;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = put ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = remote_address + off;
        wr.wr.rdma.rkey = rh.rkey;
        int err = ibv_post_send(vc->id->qp, &wr, &bad);
        if (err != 0) {
            ivshmem_verbs_fatal(ep, "cannot post an RDMA transfer");
            if (k == 0) {
                opal_free_list_return(&IVSHMEM_VERBS->rdma_frags,
                                      &f->base.super);
                return OPAL_ERROR;
            }
            f->wr_left -= nwr - k;
            break;
        }
        vc->sq_used++;
    }
    if (put) {
        ep->puts++;
        ep->put_bytes += size;
    } else {
        ep->gets++;
        ep->get_bytes += size;
    }
    return OPAL_SUCCESS;
}

#define VERBS_RDMA_FN(name, put)                                              \
    static int name(IVSHMEM_RDMA_PARAMS)                                      \
    {                                                                         \
        (void)btl;                                                            \
        (void)flags;                                                          \
        (void)order;                                                          \
        return verbs_rdma(endpoint, put, local_address, remote_address,       \
                          local_handle, remote_handle, size, cbfunc,          \
                          cbcontext, cbdata);                                 \
    }
VERBS_RDMA_FN(verbs_get, false)
VERBS_RDMA_FN(verbs_put, true)

static int verbs_register_error(struct mca_btl_base_module_t *btl,
                                mca_btl_base_module_error_cb_fn_t cbfunc)
{
    (void)btl;
    IVSHMEM_VERBS->error_cb = cbfunc;
    return OPAL_SUCCESS;
}

mca_btl_base_module_t mca_btl_ivshmem_verbs_module = {
    .btl_component = &mca_btl_ivshmem_component.super,
    .btl_flags = MCA_BTL_FLAGS_SEND | MCA_BTL_FLAGS_PUT | MCA_BTL_FLAGS_GET,
    .btl_registration_handle_size = sizeof(ivshmem_verbs_handle_t),
    .btl_add_procs = verbs_add_procs,
    .btl_del_procs = verbs_del_procs,
    .btl_finalize = verbs_finalize,
    .btl_alloc = verbs_alloc,
    .btl_free = verbs_free,
    .btl_prepare_src = mca_btl_ivshmem_prepare_src,
    .btl_send = verbs_send,
    .btl_sendi = verbs_sendi,
    .btl_put = verbs_put,
    .btl_get = verbs_get,
    .btl_register_mem = verbs_register_mem,
    .btl_deregister_mem = verbs_deregister_mem,
    .btl_register_error = verbs_register_error,
};
