/*
 * BTL ivshmem, sending: the eager data path of the region route (alloc,
 * prepare_src, send, sendi). Sends never block: a descriptor that finds no
 * room in the peer's queue waits in the endpoint's pending list (in order,
 * later sends queue behind it) and progress retries it, then calls ob1
 * back, as vader does; sendi simply fails while anything waits. A message
 * larger than a cell is packed by ob1 straight into a channel fragment
 * that alloc reserved. Under MPI_THREAD_MULTIPLE, send and sendi run
 * under the component's lock (btl_ivshmem_module.c installs the wrappers).
 */
#include "btl_ivshmem.h"

#include "opal/datatype/opal_convertor.h"

#include <string.h>

mca_btl_base_descriptor_t *
mca_btl_ivshmem_alloc(struct mca_btl_base_module_t *btl,
                      struct mca_btl_base_endpoint_t *endpoint, uint8_t order,
                      size_t size, uint32_t flags)
{
    (void)order;
    if (size > btl->btl_max_send_size)
        return NULL;
    mca_btl_ivshmem_frag_t *f =
        (mca_btl_ivshmem_frag_t *)opal_free_list_get(&IVSHMEM_COMPONENT->frags);
    if (!f)
        return NULL;
    f->segment.seg_addr.pval = f->base.super.ptr;
    f->reserved = false;
    /* A message larger than a cell goes into one of our channel fragments
     * right away, so that ob1 packs it into shared memory and send only
     * publishes it (two copies in all, not three). Under
     * MPI_THREAD_MULTIPLE the reservation takes the component's lock and
     * the pack (ob1's, after alloc returns) runs outside it, so threads
     * copy in parallel. Small messages, any without a free fragment and
     * any behind queued sends (those get freed fragments first) are staged
     * privately. */
    void *buf = NULL; /* set where the reservation succeeds */
    if (endpoint && size > IVSHMEM_COMPONENT->inline_max) {
        IVSHMEM_LOCK();
        if (IVSHMEM_COMPONENT->ep && opal_list_is_empty(&endpoint->pending) &&
            ivshm_ep_reserve_frag(IVSHMEM_COMPONENT->ep, endpoint->peer, size,
                                  &buf, &f->rsv) == IVSHM_OK) {
            f->segment.seg_addr.pval = buf;
            f->reserved = true;
        }
        IVSHMEM_UNLOCK();
    }
    f->segment.seg_len = size;
    f->base.des_segments = &f->segment;
    f->base.des_segment_count = 1;
    f->base.des_flags = flags;
    f->base.order = MCA_BTL_NO_ORDER;
    return &f->base;
}

int mca_btl_ivshmem_free(struct mca_btl_base_module_t *btl,
                         mca_btl_base_descriptor_t *des)
{
    (void)btl;
    mca_btl_ivshmem_frag_t *f = (mca_btl_ivshmem_frag_t *)des;
    if (f->reserved) { /* never sent: the fragment comes back */
        IVSHMEM_LOCK();
        if (IVSHMEM_COMPONENT->ep)
            ivshm_ep_cancel(IVSHMEM_COMPONENT->ep, &f->rsv);
        IVSHMEM_UNLOCK();
    }
    f->reserved = false;
    opal_free_list_return(&IVSHMEM_COMPONENT->frags,
                          (opal_free_list_item_t *)des);
    return OPAL_SUCCESS;
}

/* Shared by both modules: a descriptor from the module's own alloc, with
 * the convertor's next bytes packed after reserve bytes of header. */
struct mca_btl_base_descriptor_t *
mca_btl_ivshmem_prepare_src(struct mca_btl_base_module_t *btl,
                            struct mca_btl_base_endpoint_t *endpoint,
                            struct opal_convertor_t *convertor, uint8_t order,
                            size_t reserve, size_t *size, uint32_t flags)
{
    if (reserve + *size > btl->btl_max_send_size)
        *size = btl->btl_max_send_size - reserve;
    mca_btl_base_descriptor_t *des =
        btl->btl_alloc(btl, endpoint, order, reserve + *size, flags);
    if (!des)
        return NULL;
    mca_btl_base_segment_t *seg = des->des_segments;
    struct iovec iov = {(char *)seg->seg_addr.pval + reserve, *size};
    uint32_t iov_count = 1;
    if (opal_convertor_pack(convertor, &iov, &iov_count, size) < 0) {
        btl->btl_free(btl, des);
        return NULL;
    }
    seg->seg_len = reserve + *size;
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
    ivshm_status_t st;
    if (f->reserved) {
        /* packed into our fragment already: claim a cell and publish */
        if ((st = ivshm_ep_commit(IVSHMEM_COMPONENT->ep, &f->rsv, f->tag,
                                  len)) != IVSHM_OK)
            return st;
        f->reserved = false;
    } else {
        void *buf;
        ivshm_rsv_t rsv;
        st = ivshm_ep_reserve(IVSHMEM_COMPONENT->ep, endpoint->peer, len, &buf,
                              &rsv);
        if (st != IVSHM_OK)
            return st;
        memcpy(buf, f->segment.seg_addr.pval, len);
        ivshm_ep_commit(IVSHMEM_COMPONENT->ep, &rsv, f->tag, len);
    }
    IVSHMEM_COUNT(endpoint, sends, bytes_out, len);
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
        mca_btl_ivshmem_free(btl, des);
}

int mca_btl_ivshmem_send(struct mca_btl_base_module_t *btl,
                         struct mca_btl_base_endpoint_t *endpoint,
                         struct mca_btl_base_descriptor_t *des,
                         mca_btl_base_tag_t tag)
{
    mca_btl_ivshmem_frag_t *f = (mca_btl_ivshmem_frag_t *)des;
    f->tag = tag;
    /* behind queued sends unless its data already holds a fragment
     * (progress_pending says why it may pass) */
    ivshm_status_t st = opal_list_is_empty(&endpoint->pending) || f->reserved
                            ? put_frag(endpoint, f)
                            : IVSHM_ERR_AGAIN;
    if (st == IVSHM_ERR_AGAIN) {
        /* wait in order; ob1 hears back when it has gone */
        des->des_flags |= MCA_BTL_DES_SEND_ALWAYS_CALLBACK;
        opal_list_append(&endpoint->pending, (opal_list_item_t *)des);
        endpoint->queued++;
        IVSHMEM_COMPONENT->pending_frags++;
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
    for (uint32_t i = 0;
         i < IVSHMEM_COMPONENT->npeers && IVSHMEM_COMPONENT->pending_frags;
         i++) {
        struct mca_btl_base_endpoint_t *ep = IVSHMEM_COMPONENT->peers[i];
        if (!ep)
            continue;
        opal_list_item_t *it = opal_list_get_first(&ep->pending);
        while (it != opal_list_get_end(&ep->pending)) {
            mca_btl_ivshmem_frag_t *f = (mca_btl_ivshmem_frag_t *)it;
            ivshm_status_t st = put_frag(ep, f);
            if (st == IVSHM_ERR_AGAIN) {
                if (f->reserved)
                    break; /* no cell: nobody behind it goes either */
                /* possibly no free fragment: those behind that already
                 * hold one need only a cell, and their fragments come back
                 * once sent. ob1 runs this BTL with MCA_BTL_NO_ORDER, so
                 * they may pass (waiting here would deadlock when they
                 * hold every fragment) */
                it = opal_list_get_next(it);
                continue;
            }
            opal_list_remove_item(&ep->pending, it);
            IVSHMEM_COMPONENT->pending_frags--;
            /* the callback may send and queue: start again from the head */
            complete(&mca_btl_ivshmem_module.super, ep, &f->base,
                     status_to_opal(st));
            done++;
            it = opal_list_get_first(&ep->pending);
        }
    }
    return done;
}

/* sendi's reservation: a message above the inline size, or one the
 * convertor must pack. A frame of its own: the inline send needs nothing
 * of sendi's arguments after its channel call, so that sendi saves few
 * registers (docs/channels.md, "One frame for sendi"). */
static __attribute__((noinline)) int
sendi_reserve(struct mca_btl_base_endpoint_t *endpoint,
              struct opal_convertor_t *convertor, void *header,
              size_t header_size, size_t payload_size,
              mca_btl_base_tag_t tag)
{
    /* room first, so that a failure leaves the convertor untouched */
    void *buf;
    ivshm_rsv_t rsv;
    ivshm_status_t st =
        ivshm_ep_reserve(IVSHMEM_COMPONENT->ep, endpoint->peer,
                         header_size + payload_size, &buf, &rsv);
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
            ivshm_ep_cancel(IVSHMEM_COMPONENT->ep, &rsv);
            return OPAL_ERROR;
        }
    }
    ivshm_ep_commit(IVSHMEM_COMPONENT->ep, &rsv, tag, header_size + packed);
    IVSHMEM_COUNT(endpoint, sends, bytes_out, header_size + packed);
    return OPAL_SUCCESS;
}

int mca_btl_ivshmem_sendi(struct mca_btl_base_module_t *btl,
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
    /* Behind queued sends (keep order) or no room: no descriptor back, so
     * ob1 parks the request and retries it from its own progress. That is
     * cheaper here than a descriptor that would be copied into our
     * pending list (docs/channels.md, Decisions). */
    if (total > btl->btl_eager_limit || !opal_list_is_empty(&endpoint->pending))
        return OPAL_ERR_OUT_OF_RESOURCE;
    if (total <= IVSHMEM_COMPONENT->sendi_max &&
        (payload_size == 0 || !opal_convertor_need_buffers(convertor))) {
        /* contiguous data inline in a cell or whole in the peer's fast
         * box: one channel call copies the header and the convertor's
         * current bytes (ob1 is done with the convertor once sendi
         * succeeds; a peer with smaller cells, or a full box, gets them in
         * a fragment). Larger ones go straight to the reservation, not
         * through the peer's checks twice */
        void *data = NULL;
        if (payload_size)
            opal_convertor_get_current_pointer(convertor, &data);
        ivshm_status_t st =
            ivshm_ep_try_send2(IVSHMEM_COMPONENT->ep, endpoint->peer, tag,
                               header, header_size, data, payload_size);
        if (st != IVSHM_OK)
            return status_to_opal(st);
        IVSHMEM_COUNT(endpoint, sends, bytes_out, total);
        return OPAL_SUCCESS;
    }
    return sendi_reserve(endpoint, convertor, header, header_size,
                         payload_size, tag);
}
