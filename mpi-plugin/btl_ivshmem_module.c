/*
 * BTL ivshmem module: peer selection (add_procs), the eager data path
 * (alloc, prepare_src, send, sendi) and delivery of received pieces to
 * ob1's registered callbacks. Sends never block: a descriptor that finds
 * no room in the peer's queue waits in the endpoint's pending list (in
 * order, later sends queue behind it) and progress retries it, then calls
 * ob1 back, as vader does; sendi simply fails while anything waits.
 */
#include "btl_ivshmem.h"

#include "opal/class/opal_bitmap.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define C (&mca_btl_ivshmem_component)

static int ivshmem_add_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                             struct opal_proc_t **procs,
                             struct mca_btl_base_endpoint_t **peers,
                             struct opal_bitmap_t *reachable)
{
    (void)btl;
    opal_proc_t *self = opal_proc_local_get();
    for (size_t i = 0; i < nprocs; i++) {
        opal_proc_t *proc = procs[i];
        peers[i] = NULL;
        if (proc == self || !C->ep)
            continue;
        uint32_t vpid = (uint32_t)proc->proc_name.vpid;
        mca_btl_ivshmem_modex_t *mx = NULL;
        size_t size = 0;
        int rc;
        OPAL_MODEX_RECV(rc, &C->super.btl_version, &proc->proc_name,
                        (void **)&mx, &size);
        if (rc != OPAL_SUCCESS || !mx || size != sizeof(*mx) ||
            mx->magic != IVSHMEM_MODEX_MAGIC ||
            mx->version != IVSHMEM_MODEX_VERSION) {
            opal_output_verbose(1, C->output,
                                "btl ivshmem: rank %u: no usable ivshmem "
                                "address (component off there): left to "
                                "other BTLs",
                                vpid);
            free(mx);
            continue;
        }
        ivshm_locality_t loc = ivshm_peer_locality(C->r, &mx->id);
        bool take = loc == IVSHM_PEER_OTHER_VM ||
                    (loc == IVSHM_PEER_SAME_VM && C->same_vm);
        uint32_t peer = 0;
        if (take) {
            ivshm_status_t st =
                ivshm_ep_connect(C->ep, mx->addr, sizeof(mx->addr), &peer);
            if (st != IVSHM_OK || peer >= C->npeers) {
                opal_output_verbose(1, C->output,
                                    "btl ivshmem: rank %u: cannot connect: "
                                    "%s",
                                    vpid, ivshm_last_error());
                take = false;
            }
        }
        opal_output_verbose(1, C->output, "btl ivshmem: rank %u -> rank %u: "
                                          "%s: %s",
                            (unsigned)self->proc_name.vpid, vpid,
                            ivshm_locality_str(loc),
                            take ? "reached through ivshmem"
                                 : "left to other BTLs");
        free(mx);
        if (!take)
            continue;
        struct mca_btl_base_endpoint_t *ep = C->peers[peer];
        if (!ep) {
            if (!(ep = calloc(1, sizeof(*ep))))
                return OPAL_ERR_OUT_OF_RESOURCE;
            OBJ_CONSTRUCT(&ep->pending, opal_list_t);
        }
        ep->proc = proc;
        ep->peer = peer;
        ep->vpid = vpid;
        C->peers[peer] = ep;
        peers[i] = ep;
        if (reachable)
            opal_bitmap_set_bit(reachable, (int)i);
    }
    return OPAL_SUCCESS;
}

static void print_stats(struct mca_btl_base_endpoint_t *ep)
{
    char host[256] = "?";
    gethostname(host, sizeof(host));
    opal_output(0,
                "btl ivshmem stats: host %s rank %u -> rank %u: %llu sends "
                "%llu bytes, %llu receives %llu bytes, %llu queued for room",
                host, (unsigned)OPAL_PROC_MY_NAME.vpid, ep->vpid,
                (unsigned long long)ep->sends, (unsigned long long)ep->bytes_out,
                (unsigned long long)ep->recvs, (unsigned long long)ep->bytes_in,
                (unsigned long long)ep->queued);
}

static int ivshmem_free(struct mca_btl_base_module_t *btl,
                        mca_btl_base_descriptor_t *des);

static int ivshmem_del_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                             struct opal_proc_t **procs,
                             struct mca_btl_base_endpoint_t **peers)
{
    (void)procs;
    for (size_t i = 0; i < nprocs; i++) {
        struct mca_btl_base_endpoint_t *ep = peers[i];
        if (ep && ep->peer < C->npeers && C->peers[ep->peer] == ep) {
            if (C->stats)
                print_stats(ep);
            C->peers[ep->peer] = NULL;
            opal_list_item_t *it;
            while ((it = opal_list_remove_first(&ep->pending)) != NULL) {
                mca_btl_base_descriptor_t *des = (mca_btl_base_descriptor_t *)it;
                C->pending_frags--;
                if (des->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP)
                    ivshmem_free(btl, des);
            }
            OBJ_DESTRUCT(&ep->pending);
            free(ep);
        }
    }
    return OPAL_SUCCESS;
}

static int ivshmem_finalize(struct mca_btl_base_module_t *btl)
{
    (void)btl;
    if (C->stats && C->peers)
        for (uint32_t i = 0; i < C->npeers; i++)
            if (C->peers[i])
                print_stats(C->peers[i]);
    mca_btl_ivshmem_teardown();
    return OPAL_SUCCESS;
}

static mca_btl_base_descriptor_t *
ivshmem_alloc(struct mca_btl_base_module_t *btl,
              struct mca_btl_base_endpoint_t *endpoint, uint8_t order,
              size_t size, uint32_t flags)
{
    (void)order;
    if (size > btl->btl_max_send_size)
        return NULL;
    mca_btl_ivshmem_frag_t *f =
        (mca_btl_ivshmem_frag_t *)opal_free_list_get(&C->frags);
    if (!f)
        return NULL;
    f->segment.seg_addr.pval = f->base.super.ptr;
    f->segment.seg_len = size;
    f->base.des_segments = &f->segment;
    f->base.des_segment_count = 1;
    f->base.des_flags = flags;
    f->base.order = MCA_BTL_NO_ORDER;
    (void)endpoint;
    return &f->base;
}

static int ivshmem_free(struct mca_btl_base_module_t *btl,
                        mca_btl_base_descriptor_t *des)
{
    (void)btl;
    opal_free_list_return(&C->frags, (opal_free_list_item_t *)des);
    return OPAL_SUCCESS;
}

static struct mca_btl_base_descriptor_t *
ivshmem_prepare_src(struct mca_btl_base_module_t *btl,
                    struct mca_btl_base_endpoint_t *endpoint,
                    struct opal_convertor_t *convertor, uint8_t order,
                    size_t reserve, size_t *size, uint32_t flags)
{
    if (reserve + *size > btl->btl_max_send_size)
        *size = btl->btl_max_send_size - reserve;
    mca_btl_base_descriptor_t *des =
        ivshmem_alloc(btl, endpoint, order, reserve + *size, flags);
    if (!des)
        return NULL;
    mca_btl_ivshmem_frag_t *f = (mca_btl_ivshmem_frag_t *)des;
    struct iovec iov = {(char *)f->segment.seg_addr.pval + reserve, *size};
    uint32_t iov_count = 1;
    if (opal_convertor_pack(convertor, &iov, &iov_count, size) < 0) {
        ivshmem_free(btl, des);
        return NULL;
    }
    f->segment.seg_len = reserve + *size;
    return des;
}

static int status_to_opal(ivshm_status_t st)
{
    switch (st) {
    case IVSHM_OK: return OPAL_SUCCESS;
    case IVSHM_ERR_AGAIN: return OPAL_ERR_OUT_OF_RESOURCE;
    case IVSHM_ERR_PEER_DEAD: return OPAL_ERR_UNREACH;
    default: return OPAL_ERROR;
    }
}

/* Puts the fragment into the peer's queue: OK, AGAIN (no room) or an
 * error for a gone peer. */
static ivshm_status_t put_frag(struct mca_btl_base_endpoint_t *endpoint,
                               mca_btl_ivshmem_frag_t *f)
{
    size_t len = f->segment.seg_len;
    void *buf;
    ivshm_rsv_t rsv;
    ivshm_status_t st = ivshm_ep_reserve(C->ep, endpoint->peer, len, &buf, &rsv);
    if (st != IVSHM_OK)
        return st;
    memcpy(buf, f->segment.seg_addr.pval, len);
    ivshm_ep_commit(C->ep, &rsv, f->tag, len);
    endpoint->sends++;
    endpoint->bytes_out += len;
    return IVSHM_OK;
}

static void complete(struct mca_btl_base_module_t *btl,
                     struct mca_btl_base_endpoint_t *endpoint,
                     mca_btl_base_descriptor_t *des, int status)
{
    int own = des->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    if (des->des_flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK)
        des->des_cbfunc(btl, endpoint, des, status);
    if (own)
        ivshmem_free(btl, des);
}

static int ivshmem_send(struct mca_btl_base_module_t *btl,
                        struct mca_btl_base_endpoint_t *endpoint,
                        struct mca_btl_base_descriptor_t *des,
                        mca_btl_base_tag_t tag)
{
    mca_btl_ivshmem_frag_t *f = (mca_btl_ivshmem_frag_t *)des;
    f->tag = tag;
    ivshm_status_t st = opal_list_is_empty(&endpoint->pending)
                            ? put_frag(endpoint, f)
                            : IVSHM_ERR_AGAIN;
    if (st == IVSHM_ERR_AGAIN) {
        /* wait in order; ob1 hears back when it has gone */
        des->des_flags |= MCA_BTL_DES_SEND_ALWAYS_CALLBACK;
        opal_list_append(&endpoint->pending, (opal_list_item_t *)des);
        endpoint->queued++;
        C->pending_frags++;
        return OPAL_SUCCESS;
    }
    if (st != IVSHM_OK)
        return status_to_opal(st);
    /* the data is in the peer's queue: complete now, as tcp and self do */
    complete(btl, endpoint, des, OPAL_SUCCESS);
    return 1;
}

int mca_btl_ivshmem_progress_pending(void)
{
    int done = 0;
    for (uint32_t i = 0; i < C->npeers && C->pending_frags; i++) {
        struct mca_btl_base_endpoint_t *ep = C->peers[i];
        if (!ep)
            continue;
        opal_list_item_t *it;
        while ((it = opal_list_get_first(&ep->pending)) !=
               opal_list_get_end(&ep->pending)) {
            mca_btl_base_descriptor_t *des = (mca_btl_base_descriptor_t *)it;
            ivshm_status_t st = put_frag(ep, (mca_btl_ivshmem_frag_t *)des);
            if (st == IVSHM_ERR_AGAIN)
                break;
            opal_list_remove_first(&ep->pending);
            C->pending_frags--;
            complete(&mca_btl_ivshmem_module.super, ep, des, status_to_opal(st));
            done++;
        }
    }
    return done;
}

static int ivshmem_sendi(struct mca_btl_base_module_t *btl,
                         struct mca_btl_base_endpoint_t *endpoint,
                         struct opal_convertor_t *convertor, void *header,
                         size_t header_size, size_t payload_size,
                         uint8_t order, uint32_t flags, mca_btl_base_tag_t tag,
                         mca_btl_base_descriptor_t **descriptor)
{
    (void)order;
    (void)flags;
    size_t total = header_size + payload_size;
    if (descriptor)
        *descriptor = NULL;
    if (total > btl->btl_eager_limit || !opal_list_is_empty(&endpoint->pending))
        return OPAL_ERR_OUT_OF_RESOURCE; /* behind queued sends: keep order */
    /* room first, so that a failure leaves the convertor untouched */
    void *buf;
    ivshm_rsv_t rsv;
    ivshm_status_t st = ivshm_ep_reserve(C->ep, endpoint->peer, total, &buf, &rsv);
    if (st != IVSHM_OK)
        return status_to_opal(st);
    memcpy(buf, header, header_size);
    size_t packed = 0;
    if (payload_size && !opal_convertor_need_buffers(convertor)) {
        /* contiguous data: one memcpy, no pack machinery (ob1 is done with
         * the convertor once sendi succeeds) */
        void *data;
        opal_convertor_get_current_pointer(convertor, &data);
        memcpy((char *)buf + header_size, data, payload_size);
        packed = payload_size;
    } else if (payload_size) {
        struct iovec iov = {(char *)buf + header_size, payload_size};
        uint32_t iov_count = 1;
        packed = payload_size;
        if (opal_convertor_pack(convertor, &iov, &iov_count, &packed) < 0) {
            ivshm_ep_cancel(C->ep, &rsv);
            return OPAL_ERROR;
        }
    }
    ivshm_ep_commit(C->ep, &rsv, tag, header_size + packed);
    endpoint->sends++;
    endpoint->bytes_out += header_size + packed;
    return OPAL_SUCCESS;
}

/* A piece from a peer: its tag and length are untrusted; the callback sees
 * a descriptor whose one segment points at the data in the region. */
void mca_btl_ivshmem_recv(void *arg, const ivshm_msg_t *m)
{
    (void)arg;
    if (m->tag >= MCA_BTL_TAG_MAX || m->offset != 0 || m->len != m->total)
        return; /* not something our sends produce */
    const mca_btl_active_message_callback_t *reg =
        mca_btl_base_active_message_trigger + m->tag;
    if (!reg->cbfunc)
        return;
    mca_btl_base_segment_t seg;
    seg.seg_addr.pval = (void *)m->data;
    seg.seg_len = m->len;
    struct mca_btl_base_endpoint_t *ep =
        m->sender < C->npeers ? C->peers[m->sender] : NULL;
    if (ep) {
        ep->recvs++;
        ep->bytes_in += m->len;
    }
#if BTL_VERSION >= 330
    /* Open MPI 5.x (BTL 3.3): a receive descriptor replaces the descriptor */
    mca_btl_base_receive_descriptor_t rd = {
        .endpoint = ep,
        .des_segments = &seg,
        .des_segment_count = 1,
        .tag = (mca_btl_base_tag_t)m->tag,
        .cbdata = reg->cbdata,
    };
    reg->cbfunc(&mca_btl_ivshmem_module.super, &rd);
#else
    mca_btl_base_descriptor_t des;
    memset(&des, 0, sizeof(des));
    des.des_segments = &seg;
    des.des_segment_count = 1;
    reg->cbfunc(&mca_btl_ivshmem_module.super, (mca_btl_base_tag_t)m->tag,
                &des, reg->cbdata);
#endif
}

mca_btl_ivshmem_module_t mca_btl_ivshmem_module = {
    .super = {
        .btl_component = &mca_btl_ivshmem_component.super,
        .btl_add_procs = ivshmem_add_procs,
        .btl_del_procs = ivshmem_del_procs,
        .btl_finalize = ivshmem_finalize,
        .btl_alloc = ivshmem_alloc,
        .btl_free = ivshmem_free,
        .btl_prepare_src = ivshmem_prepare_src,
        .btl_send = ivshmem_send,
        .btl_sendi = ivshmem_sendi,
    },
};
