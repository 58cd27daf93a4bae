/*
 * BTL ivshmem module: peer selection (add_procs), the eager data path
 * (alloc, prepare_src, send, sendi) and delivery of received pieces to
 * ob1's registered callbacks. Sends never block: a descriptor that finds
 * no room in the peer's queue waits in the endpoint's pending list (in
 * order, later sends queue behind it) and progress retries it, then calls
 * ob1 back, as vader does; sendi simply fails while anything waits.
 * Buffers that live in the region (MPI_Alloc_mem through the ivshmem
 * mpool) are registered by region offset and read or written by peers
 * with one copy (put/get, which ob1 uses for its RGET protocol).
 */
#include "btl_ivshmem.h"

#include "opal/class/opal_bitmap.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"

#include <stddef.h>
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
        if (vpid < C->npeers && C->seen && !C->seen[vpid]) {
            C->seen[vpid] = 1;
            C->others_seen++;
        }
        mca_btl_ivshmem_modex_t *mx = mca_btl_ivshmem_modex_get(&proc->proc_name);
        if (!mx || !(mx->flags & IVSHMEM_MODEX_REGION)) {
            opal_output_verbose(1, C->output,
                                "btl ivshmem: rank %u: no region there: "
                                "left to other routes",
                                vpid);
            free(mx);
            continue;
        }
        ivshm_locality_t loc;
        bool take = mca_btl_ivshmem_region_takes(mx, &loc);
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
        if (!ep->proc)
            C->reached++;
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

/* Shared by both modules: the per-peer counters (btl_ivshmem_stats). */
void mca_btl_ivshmem_print_stats(struct mca_btl_base_endpoint_t *ep,
                                 const char *route)
{
    char host[256] = "?";
    gethostname(host, sizeof(host));
    opal_output(0,
                "btl ivshmem stats: host %s rank %u -> rank %u: route %s: "
                "%llu sends %llu bytes, %llu receives %llu bytes, %llu queued "
                "for room, %llu gets %llu bytes, %llu puts %llu bytes, %llu "
                "refused",
                host, (unsigned)OPAL_PROC_MY_NAME.vpid, ep->vpid, route,
                (unsigned long long)ep->sends, (unsigned long long)ep->bytes_out,
                (unsigned long long)ep->recvs, (unsigned long long)ep->bytes_in,
                (unsigned long long)ep->queued, (unsigned long long)ep->gets,
                (unsigned long long)ep->get_bytes, (unsigned long long)ep->puts,
                (unsigned long long)ep->put_bytes,
                (unsigned long long)ep->rdma_refused);
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
                mca_btl_ivshmem_print_stats(ep, "region");
            C->peers[ep->peer] = NULL;
            C->reached--;
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
                mca_btl_ivshmem_print_stats(C->peers[i], "region");
    if (C->stats) /* 4 KiB with the region heap, unless set (component) */
        opal_output(0, "btl ivshmem stats: rank %u: eager limit %zu",
                    (unsigned)OPAL_PROC_MY_NAME.vpid, btl->btl_eager_limit);
    if (C->stats && C->threads)
        opal_output(0, "btl ivshmem stats: rank %u: %llu gets copied after "
                       "the progress pass that started them "
                       "(MPI_THREAD_MULTIPLE)",
                    (unsigned)OPAL_PROC_MY_NAME.vpid,
                    (unsigned long long)C->gets_after_pass);
    if (C->stats)
        mca_btl_ivshmem_heap_print_stats();
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
    f->reserved = false;
    /* A message larger than a cell goes into one of our channel fragments
     * right away, so that ob1 packs it into shared memory and send only
     * publishes it (two copies in all, not three). Under
     * MPI_THREAD_MULTIPLE the reservation takes the component's lock and
     * the pack (ob1's, after alloc returns) runs outside it, so threads
     * copy in parallel. Small messages, any without a free fragment and
     * any behind queued sends (those get freed fragments first) are staged
     * privately. */
    void *buf;
    if (endpoint && size > C->inline_max) {
        IVSHMEM_LOCK();
        if (C->ep && opal_list_is_empty(&endpoint->pending) &&
            ivshm_ep_reserve_frag(C->ep, endpoint->peer, size, &buf,
                                  &f->rsv) == IVSHM_OK) {
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
    (void)endpoint;
    return &f->base;
}

static int ivshmem_free(struct mca_btl_base_module_t *btl,
                        mca_btl_base_descriptor_t *des)
{
    (void)btl;
    mca_btl_ivshmem_frag_t *f = (mca_btl_ivshmem_frag_t *)des;
    if (f->reserved) { /* never sent: the fragment comes back */
        IVSHMEM_LOCK();
        if (C->ep)
            ivshm_ep_cancel(C->ep, &f->rsv);
        IVSHMEM_UNLOCK();
    }
    f->reserved = false;
    opal_free_list_return(&C->frags, (opal_free_list_item_t *)des);
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
        if ((st = ivshm_ep_commit(C->ep, &f->rsv, f->tag, len)) != IVSHM_OK)
            return st;
        f->reserved = false;
    } else {
        void *buf;
        ivshm_rsv_t rsv;
        st = ivshm_ep_reserve(C->ep, endpoint->peer, len, &buf, &rsv);
        if (st != IVSHM_OK)
            return st;
        memcpy(buf, f->segment.seg_addr.pval, len);
        ivshm_ep_commit(C->ep, &rsv, f->tag, len);
    }
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
            C->pending_frags--;
            /* the callback may send and queue: start again from the head */
            complete(&mca_btl_ivshmem_module.super, ep, &f->base,
                     status_to_opal(st));
            done++;
            it = opal_list_get_first(&ep->pending);
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
    /* Behind queued sends (keep order) or no room: no descriptor back, so
     * ob1 parks the request and retries it from its own progress. That is
     * cheaper here than a descriptor that would be copied into our
     * pending list (8-byte window bandwidth 43 -> 30 MB/s when tried,
     * benchmarks/results/2026-11-23-verbs-route). */
    if (total > btl->btl_eager_limit || !opal_list_is_empty(&endpoint->pending))
        return OPAL_ERR_OUT_OF_RESOURCE;
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

/* ---- single copy: registration, put and get ---- */

uint64_t mca_btl_ivshmem_region_offset(const void *p, size_t len)
{
    if (!C->r)
        return UINT64_MAX;
    uintptr_t base = (uintptr_t)ivshm_region_base(C->r);
    uint64_t size = ivshm_region_size(C->r);
    uintptr_t a = (uintptr_t)p;
    if (a < base || len > size || a - base > size - len)
        return UINT64_MAX;
    return (uint64_t)(a - base);
}

static struct mca_btl_base_registration_handle_t *
ivshmem_register_mem(struct mca_btl_base_module_t *btl,
                     struct mca_btl_base_endpoint_t *endpoint, void *base,
                     size_t size, uint32_t flags)
{
    (void)btl;
    (void)endpoint;
    uint64_t off = mca_btl_ivshmem_region_offset(base, size);
    /* memory outside the region cannot be reached by a peer in another VM:
     * refuse any registration a peer would use (ob1 then copies), grant
     * the local side of a transfer (no remote access asked for, or local
     * write as ob1 asks for the target of a get) */
    bool remote = (flags & (MCA_BTL_REG_FLAG_REMOTE_READ |
                            MCA_BTL_REG_FLAG_REMOTE_WRITE |
                            MCA_BTL_REG_FLAG_REMOTE_ATOMIC)) != 0;
    bool local_only = !remote || ((flags & MCA_BTL_REG_FLAG_LOCAL_WRITE) &&
                                  !(flags & MCA_BTL_REG_FLAG_REMOTE_ATOMIC));
    if (off == UINT64_MAX && !local_only)
        return NULL;
    mca_btl_ivshmem_reg_t *reg =
        (mca_btl_ivshmem_reg_t *)opal_free_list_get(&C->regs);
    if (!reg)
        return NULL;
    reg->handle.addr = (uint64_t)(uintptr_t)base;
    reg->handle.len = size;
    reg->handle.off = off == UINT64_MAX ? 0 : off;
    reg->handle.flags = off == UINT64_MAX ? 0 : IVSHMEM_REG_IN_REGION;
    reg->handle.check = IVSHMEM_REG_CHECK ^ reg->handle.flags;
    return &reg->handle;
}

static int ivshmem_deregister_mem(struct mca_btl_base_module_t *btl,
                                  struct mca_btl_base_registration_handle_t *h)
{
    (void)btl;
    mca_btl_ivshmem_reg_t *reg =
        (mca_btl_ivshmem_reg_t *)((char *)h -
                                  offsetof(mca_btl_ivshmem_reg_t, handle));
    opal_free_list_return(&C->regs, &reg->super);
    return OPAL_SUCCESS;
}

/* Our mapping of [raddr, raddr + size) of a peer's registered buffer, or
 * NULL. The handle came from the peer: every field is checked. */
static void *remote_ptr(const mca_btl_base_registration_handle_t *h,
                        uint64_t raddr, size_t size, uint32_t owner)
{
    if (!h || !C->r)
        return NULL;
    mca_btl_base_registration_handle_t hd;
    memcpy(&hd, h, sizeof(hd)); /* one read of shared bytes */
    uint64_t rsize = ivshm_region_size(C->r);
    if (hd.flags != IVSHMEM_REG_IN_REGION ||
        hd.check != (IVSHMEM_REG_CHECK ^ hd.flags) || hd.len > rsize ||
        hd.off > rsize - hd.len || raddr < hd.addr ||
        raddr - hd.addr > hd.len || size > hd.len - (raddr - hd.addr))
        return NULL;
    uint64_t off = hd.off + (raddr - hd.addr);
    /* the range must be the peer's own memory, under its live lease: a
     * stale handle of a dead or restarted peer is refused */
    if (ivshm_ep_peer_holds(C->ep, owner, off, size) != IVSHM_OK)
        return NULL;
    return (char *)ivshm_region_base(C->r) + off;
}

static int refuse_rdma(struct mca_btl_base_endpoint_t *endpoint,
                       const char *op, uint64_t raddr, size_t size)
{
    if (endpoint->rdma_refused++ == 0)
        opal_output_verbose(1, C->output,
                            "btl ivshmem: %s of %zu bytes at 0x%llx of rank "
                            "%u refused: the handle does not name memory "
                            "of the shared region",
                            op, size, (unsigned long long)raddr,
                            endpoint->vpid);
    /* ob1 falls back to copying through sends */
    return OPAL_ERROR;
}

/* One copy between local memory and a peer's registered region buffer,
 * checked (remote_ptr) before: the copy, the counters, whether a get's
 * owner lived through it, and ob1's callback. */
typedef struct rdma_op {
    struct mca_btl_base_module_t *btl;
    struct mca_btl_base_endpoint_t *endpoint;
    bool put;
    void *local, *remote;
    size_t size;
    struct mca_btl_base_registration_handle_t *local_handle;
    mca_btl_base_rdma_completion_fn_t cbfunc;
    void *cbcontext, *cbdata;
} rdma_op_t;

static void rdma_finish(const rdma_op_t *op)
{
    struct mca_btl_base_endpoint_t *endpoint = op->endpoint;
    if (op->put)
        memcpy(op->remote, op->local, op->size);
    else
        memcpy(op->local, op->remote, op->size);
    int rc = OPAL_SUCCESS;
    IVSHMEM_LOCK();
    if (op->put) {
        endpoint->puts++;
        endpoint->put_bytes += op->size;
    } else {
        endpoint->gets++;
        endpoint->get_bytes += op->size;
        /* the owner died during the copy: its chunks may have been
         * reclaimed and reused, the bytes may be someone else's */
        if (ivshm_ep_peer_alive(C->ep, endpoint->peer) != IVSHM_OK) {
            opal_output(0, "btl ivshmem: rank %u died while its buffer was "
                           "read; the message is failed, not delivered",
                        endpoint->vpid);
            rc = OPAL_ERR_UNREACH;
        }
    }
    IVSHMEM_UNLOCK();
    op->cbfunc(op->btl, endpoint, op->local, op->local_handle, op->cbcontext,
               op->cbdata, rc);
}

/* MPI_THREAD_MULTIPLE: the gets that ob1 starts from callbacks of this
 * thread's progress pass (an RGET header matched there) wait here and run
 * once the pass has let the lock go; `passes` counts this thread's nested
 * passes (a callback may progress again), the outermost runs them all */
#define RDMA_DEFER_MAX 32
static __thread struct {
    unsigned passes, n;
    rdma_op_t op[RDMA_DEFER_MAX];
} rdma_deferred;

void mca_btl_ivshmem_progress_begin(void)
{
    if (rdma_deferred.passes++ == 0)
        rdma_deferred.n = 0;
}

int mca_btl_ivshmem_progress_end(void)
{
    if (--rdma_deferred.passes != 0)
        return 0;
    /* a callback of one of these may start more: they run inline */
    unsigned n = rdma_deferred.n;
    rdma_op_t op[RDMA_DEFER_MAX];
    memcpy(op, rdma_deferred.op, n * sizeof(op[0]));
    rdma_deferred.n = 0;
    for (unsigned i = 0; i < n; i++)
        rdma_finish(&op[i]);
    if (n)
        __atomic_fetch_add(&C->gets_after_pass, n, __ATOMIC_RELAXED);
    return (int)n;
}

/* Complete at once, as vader's single-copy mechanisms are, except a get
 * started inside a progress pass under MPI_THREAD_MULTIPLE: it completes
 * when the pass ends, outside the component's lock, so the pass does not
 * hold every other thread's sends for the length of a large copy. Only the
 * checks against the peer's records take the lock. */
static int rdma_copy(struct mca_btl_base_module_t *btl,
                     struct mca_btl_base_endpoint_t *endpoint, bool put,
                     void *local_address, uint64_t remote_address,
                     struct mca_btl_base_registration_handle_t *local_handle,
                     struct mca_btl_base_registration_handle_t *remote_handle,
                     size_t size, mca_btl_base_rdma_completion_fn_t cbfunc,
                     void *cbcontext, void *cbdata)
{
    IVSHMEM_LOCK();
    void *remote = remote_ptr(remote_handle, remote_address, size,
                              endpoint->peer);
    if (!remote) {
        int refused = refuse_rdma(endpoint, put ? "put" : "get",
                                  remote_address, size);
        IVSHMEM_UNLOCK();
        return refused;
    }
    IVSHMEM_UNLOCK();
    rdma_op_t op = {btl,  endpoint,     put,    local_address, remote,
                    size, local_handle, cbfunc, cbcontext,     cbdata};
    /* threads first: the single-threaded path reads no thread-local */
    if (!put && C->threads && rdma_deferred.passes &&
        rdma_deferred.n < RDMA_DEFER_MAX)
        rdma_deferred.op[rdma_deferred.n++] = op;
    else
        rdma_finish(&op);
    return OPAL_SUCCESS;
}

#define IVSHMEM_RDMA_FN(name, put)                                            \
    static int name(IVSHMEM_RDMA_PARAMS)                                      \
    {                                                                         \
        (void)flags;                                                          \
        (void)order;                                                          \
        return rdma_copy(btl, endpoint, put, local_address, remote_address,   \
                         local_handle, remote_handle, size, cbfunc,           \
                         cbcontext, cbdata);                                  \
    }
IVSHMEM_RDMA_FN(ivshmem_get, false)
IVSHMEM_RDMA_FN(ivshmem_put, true)

static int ivshmem_register_error(struct mca_btl_base_module_t *btl,
                                  mca_btl_base_module_error_cb_fn_t cbfunc)
{
    (void)btl;
    C->error_cb = cbfunc;
    return OPAL_SUCCESS;
}

void mca_btl_ivshmem_event(void *arg, int kind, uint32_t peer)
{
    (void)arg;
    (void)peer;
    if (kind != IVSHM_EV_LEASE_LOST)
        return; /* a dead peer: its sends fail with OPAL_ERR_UNREACH */
    /* This process was stalled past the region's lease timeout (a paused
     * or swapped VM) and its region memory went to others: nothing may be
     * sent or received through it any more, and messages may be lost. */
    opal_output(0, "btl ivshmem: rank %u lost its lease on the shared region "
                   "%s: the process was stalled longer than the region's "
                   "lease timeout (ivshm info shows it) and its region "
                   "memory was reclaimed; the job cannot continue",
                (unsigned)OPAL_PROC_MY_NAME.vpid, C->region);
    if (C->error_cb)
        C->error_cb(&mca_btl_ivshmem_module.super, MCA_BTL_ERROR_FLAGS_FATAL,
                    NULL, "btl ivshmem: lease on the shared region lost");
    abort(); /* no PML took errors from us */
}

/* A piece from a peer: its tag and length are untrusted; the callback sees
 * a descriptor whose one segment points at the data in the region. */
void mca_btl_ivshmem_recv(void *arg, const ivshm_msg_t *m)
{
    (void)arg;
    if (m->tag >= MCA_BTL_TAG_MAX || m->offset != 0 || m->len != m->total)
        return; /* not something our sends produce */
    struct mca_btl_base_endpoint_t *ep =
        m->sender < C->npeers ? C->peers[m->sender] : NULL;
    if (ep) {
        ep->recvs++;
        ep->bytes_in += m->len;
    }
    mca_btl_ivshmem_deliver(&mca_btl_ivshmem_module.super, ep,
                            (mca_btl_base_tag_t)m->tag, (void *)m->data, m->len);
}

/* Shared by both modules: hands one received message to the callback ob1
 * registered for its tag (the tag was checked by the caller). */
void mca_btl_ivshmem_deliver(struct mca_btl_base_module_t *btl,
                             struct mca_btl_base_endpoint_t *ep,
                             mca_btl_base_tag_t tag, void *data, size_t len)
{
    const mca_btl_active_message_callback_t *reg =
        mca_btl_base_active_message_trigger + tag;
    if (!reg->cbfunc)
        return;
    mca_btl_base_segment_t seg;
    seg.seg_addr.pval = data;
    seg.seg_len = len;
#if BTL_VERSION >= 330
    /* Open MPI 5.x (BTL 3.3): a receive descriptor replaces the descriptor */
    mca_btl_base_receive_descriptor_t rd = {
        .endpoint = ep,
        .des_segments = &seg,
        .des_segment_count = 1,
        .tag = tag,
        .cbdata = reg->cbdata,
    };
    reg->cbfunc(btl, &rd);
#else
    (void)ep;
    mca_btl_base_descriptor_t des;
    memset(&des, 0, sizeof(des));
    des.des_segments = &seg;
    des.des_segment_count = 1;
    reg->cbfunc(btl, tag, &des, reg->cbdata);
#endif
}

/* ---- MPI_THREAD_MULTIPLE ----
 * ob1 calls from any thread. Each entry point that reaches the endpoint,
 * its peers or our pending lists runs under the component's lock, which
 * is recursive because a receive callback, made by our progress under the
 * lock, may send. Progress only tries the lock: a thread that finds it
 * taken returns at once (another thread is progressing or sending). The
 * wrappers are installed only for MPI_THREAD_MULTIPLE, so the single-
 * threaded path has no lock and no test for one.
 *
 * The lock itself is btl_ivshmem_lock.c. A recursive pthread mutex cost
 * one thread 41 ns a message (docs/channels.md, Threads). */

#define LOCKED(ret, name, params, args)                                       \
    static ret name##_mt params                                               \
    {                                                                         \
        ivshmem_lock_take(&C->lock);                                          \
        ret rc = name args;                                                   \
        ivshmem_lock_give(&C->lock);                                          \
        return rc;                                                            \
    }
LOCKED(int, ivshmem_add_procs,
       (struct mca_btl_base_module_t * btl, size_t nprocs,
        struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **peers,
        struct opal_bitmap_t *reachable),
       (btl, nprocs, procs, peers, reachable))
LOCKED(int, ivshmem_del_procs,
       (struct mca_btl_base_module_t * btl, size_t nprocs,
        struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **peers),
       (btl, nprocs, procs, peers))
LOCKED(int, ivshmem_finalize, (struct mca_btl_base_module_t * btl), (btl))
LOCKED(int, ivshmem_send,
       (struct mca_btl_base_module_t * btl,
        struct mca_btl_base_endpoint_t *endpoint,
        struct mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag),
       (btl, endpoint, des, tag))
LOCKED(int, ivshmem_sendi,
       (struct mca_btl_base_module_t * btl,
        struct mca_btl_base_endpoint_t *endpoint,
        struct opal_convertor_t *convertor, void *header, size_t header_size,
        size_t payload_size, uint8_t order, uint32_t flags,
        mca_btl_base_tag_t tag, mca_btl_base_descriptor_t **descriptor),
       (btl, endpoint, convertor, header, header_size, payload_size, order,
        flags, tag, descriptor))

void mca_btl_ivshmem_threads_enable(void)
{
    C->lock = 0;
    C->threads = true;
    mca_btl_base_module_t *m = &mca_btl_ivshmem_module.super;
    m->btl_add_procs = ivshmem_add_procs_mt;
    m->btl_del_procs = ivshmem_del_procs_mt;
    m->btl_finalize = ivshmem_finalize_mt;
    m->btl_send = ivshmem_send_mt;
    m->btl_sendi = ivshmem_sendi_mt;
}

mca_btl_ivshmem_module_t mca_btl_ivshmem_module = {
    .super = {
        .btl_component = &mca_btl_ivshmem_component.super,
        .btl_add_procs = ivshmem_add_procs,
        .btl_del_procs = ivshmem_del_procs,
        .btl_finalize = ivshmem_finalize,
        .btl_alloc = ivshmem_alloc,
        .btl_free = ivshmem_free,
        .btl_prepare_src = mca_btl_ivshmem_prepare_src,
        .btl_send = ivshmem_send,
        .btl_sendi = ivshmem_sendi,
        .btl_put = ivshmem_put,
        .btl_get = ivshmem_get,
        .btl_register_mem = ivshmem_register_mem,
        .btl_register_error = ivshmem_register_error,
        .btl_deregister_mem = ivshmem_deregister_mem,
    },
};
