/*
 * BTL ivshmem module: peer selection (add_procs, del_procs), finalize,
 * channel events, delivery of received pieces to ob1's registered
 * callbacks, the switch to the locked entry points for
 * MPI_THREAD_MULTIPLE, and the module's table of entry points. Sending is
 * btl_ivshmem_send.c, single copy (register, put, get) btl_ivshmem_rdma.c.
 */
#include "btl_ivshmem.h"

#include "opal/class/opal_bitmap.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* add_procs of both modules: every proc but this one is offered to
 * reach(), which returns its endpoint, or NULL to leave it to other BTLs
 * (an error in *rc ends the call). */
int mca_btl_ivshmem_add_each(size_t nprocs, struct opal_proc_t **procs,
                             struct mca_btl_base_endpoint_t **peers,
                             struct opal_bitmap_t *reachable,
                             mca_btl_ivshmem_reach_fn_t reach)
{
    opal_proc_t *self = opal_proc_local_get();
    for (size_t i = 0; i < nprocs; i++) {
        int rc = OPAL_SUCCESS;
        peers[i] = procs[i] == self ? NULL : reach(procs[i], self, &rc);
        if (rc != OPAL_SUCCESS)
            return rc;
        if (peers[i] && reachable)
            opal_bitmap_set_bit(reachable, (int)i);
    }
    return OPAL_SUCCESS;
}

/* The region route's endpoint for proc: the peer maps our region in
 * another VM (or ours, where btl_ivshmem_same_vm allows) and its channel
 * endpoint connects. */
static struct mca_btl_base_endpoint_t *
region_reach(opal_proc_t *proc, opal_proc_t *self, int *rc)
{
    if (!IVSHMEM_COMPONENT->ep)
        return NULL;
    uint32_t vpid = (uint32_t)proc->proc_name.vpid;
    if (vpid < IVSHMEM_COMPONENT->npeers && IVSHMEM_COMPONENT->seen &&
        !IVSHMEM_COMPONENT->seen[vpid]) {
        IVSHMEM_COMPONENT->seen[vpid] = 1;
        IVSHMEM_COMPONENT->others_seen++;
    }
    mca_btl_ivshmem_modex_t *mx = mca_btl_ivshmem_modex_get(&proc->proc_name);
    if (!mx || !(mx->flags & IVSHMEM_MODEX_REGION)) {
        opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                            "btl ivshmem: rank %u: no region there: "
                            "left to other routes",
                            vpid);
        free(mx);
        return NULL;
    }
    ivshm_locality_t loc;
    bool take = mca_btl_ivshmem_region_takes(mx, &loc);
    uint32_t peer = 0;
    if (take) {
        ivshm_status_t st = ivshm_ep_connect(IVSHMEM_COMPONENT->ep, mx->addr,
                                             sizeof(mx->addr), &peer);
        if (st != IVSHM_OK || peer >= IVSHMEM_COMPONENT->npeers) {
            opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                                "btl ivshmem: rank %u: cannot connect: %s",
                                vpid, ivshm_last_error());
            take = false;
        }
    }
    opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                        "btl ivshmem: rank %u -> rank %u: %s: %s",
                        (unsigned)self->proc_name.vpid, vpid,
                        ivshm_locality_str(loc),
                        take ? "reached through ivshmem"
                             : "left to other BTLs");
    free(mx);
    if (!take)
        return NULL;
    struct mca_btl_base_endpoint_t *ep = IVSHMEM_COMPONENT->peers[peer];
    if (!ep) {
        if (!(ep = calloc(1, sizeof(*ep)))) {
            *rc = OPAL_ERR_OUT_OF_RESOURCE;
            return NULL;
        }
        OBJ_CONSTRUCT(&ep->pending, opal_list_t);
    }
    if (!ep->proc)
        IVSHMEM_COMPONENT->reached++;
    ep->proc = proc;
    ep->peer = peer;
    ep->vpid = vpid;
    IVSHMEM_COMPONENT->peers[peer] = ep;
    return ep;
}

static int add_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                     struct opal_proc_t **procs,
                     struct mca_btl_base_endpoint_t **peers,
                     struct opal_bitmap_t *reachable)
{
    (void)btl;
    return mca_btl_ivshmem_add_each(nprocs, procs, peers, reachable,
                                    region_reach);
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
                "waits for credits, %llu refused",
                host, (unsigned)OPAL_PROC_MY_NAME.vpid, ep->vpid, route,
                (unsigned long long)ep->sends, (unsigned long long)ep->bytes_out,
                (unsigned long long)ep->recvs, (unsigned long long)ep->bytes_in,
                (unsigned long long)ep->queued, (unsigned long long)ep->gets,
                (unsigned long long)ep->get_bytes, (unsigned long long)ep->puts,
                (unsigned long long)ep->put_bytes,
                (unsigned long long)ep->credit_waits,
                (unsigned long long)ep->rdma_refused);
}

static int del_procs(struct mca_btl_base_module_t *btl, size_t nprocs,
                     struct opal_proc_t **procs,
                     struct mca_btl_base_endpoint_t **peers)
{
    (void)procs;
    for (size_t i = 0; i < nprocs; i++) {
        struct mca_btl_base_endpoint_t *ep = peers[i];
        if (ep && ep->peer < IVSHMEM_COMPONENT->npeers &&
            IVSHMEM_COMPONENT->peers[ep->peer] == ep) {
            if (IVSHMEM_COMPONENT->stats)
                mca_btl_ivshmem_print_stats(ep, "region");
            IVSHMEM_COMPONENT->peers[ep->peer] = NULL;
            IVSHMEM_COMPONENT->reached--;
            opal_list_item_t *it;
            while ((it = opal_list_remove_first(&ep->pending)) != NULL) {
                mca_btl_base_descriptor_t *des = (mca_btl_base_descriptor_t *)it;
                IVSHMEM_COMPONENT->pending_frags--;
                if (des->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP)
                    mca_btl_ivshmem_free(btl, des);
            }
            OBJ_DESTRUCT(&ep->pending);
            free(ep);
        }
    }
    return OPAL_SUCCESS;
}

static int finalize(struct mca_btl_base_module_t *btl)
{
    (void)btl;
    if (IVSHMEM_COMPONENT->stats && IVSHMEM_COMPONENT->peers)
        for (uint32_t i = 0; i < IVSHMEM_COMPONENT->npeers; i++)
            if (IVSHMEM_COMPONENT->peers[i])
                mca_btl_ivshmem_print_stats(IVSHMEM_COMPONENT->peers[i],
                                            "region");
    if (IVSHMEM_COMPONENT
            ->stats) /* 4 KiB with the region heap, unless set (component) */
        opal_output(0, "btl ivshmem stats: rank %u: eager limit %zu",
                    (unsigned)OPAL_PROC_MY_NAME.vpid, btl->btl_eager_limit);
    if (IVSHMEM_COMPONENT->stats && IVSHMEM_COMPONENT->threads)
        opal_output(0, "btl ivshmem stats: rank %u: %llu gets copied after "
                       "the progress pass that started them "
                       "(MPI_THREAD_MULTIPLE)",
                    (unsigned)OPAL_PROC_MY_NAME.vpid,
                    (unsigned long long)IVSHMEM_COMPONENT->gets_after_pass);
    if (IVSHMEM_COMPONENT->stats) {
        const uint64_t *d = IVSHMEM_COMPONENT->rx_dropped;
        opal_output(0, "btl ivshmem stats: rank %u: received pieces dropped: "
                       "%llu bad tag, %llu bad length, %llu unknown sender",
                    (unsigned)OPAL_PROC_MY_NAME.vpid,
                    (unsigned long long)d[IVSHMEM_RX_BAD_TAG],
                    (unsigned long long)d[IVSHMEM_RX_BAD_LENGTH],
                    (unsigned long long)d[IVSHMEM_RX_UNKNOWN_SENDER]);
        mca_btl_ivshmem_heap_print_stats();
    }
    mca_btl_ivshmem_teardown();
    return OPAL_SUCCESS;
}

static int register_error(struct mca_btl_base_module_t *btl,
                          mca_btl_base_module_error_cb_fn_t cbfunc)
{
    (void)btl;
    IVSHMEM_COMPONENT->error_cb = cbfunc;
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
                (unsigned)OPAL_PROC_MY_NAME.vpid, IVSHMEM_COMPONENT->region);
    if (IVSHMEM_COMPONENT->error_cb)
        IVSHMEM_COMPONENT->error_cb(
            &mca_btl_ivshmem_module.super, MCA_BTL_ERROR_FLAGS_FATAL, NULL,
            "btl ivshmem: lease on the shared region lost");
    abort(); /* no PML took errors from us */
}

/* A piece from a peer: its tag and length are untrusted; the callback sees
 * a descriptor whose one segment points at the data in the region. The
 * channel hands whole messages to mca_btl_ivshmem_recv_whole, so this one
 * sees only pieces of longer messages, which our sends never make: each
 * is dropped and counted. */
void mca_btl_ivshmem_recv(void *arg, const ivshm_msg_t *m)
{
    void *slot;
    if (!ivshmem_rx_accept(m, MCA_BTL_TAG_MAX,
                           (void *const *)IVSHMEM_COMPONENT->peers,
                           IVSHMEM_COMPONENT->npeers,
                           IVSHMEM_COMPONENT->rx_dropped, &slot))
        return; /* not something our sends produce: counted */
    mca_btl_ivshmem_recv_whole(arg, m->sender, m->tag, m->data, m->len);
}

/* The region route's receive descriptor, zero but for what each delivery
 * sets: the channel runs one handler at a time (none nests: a progress
 * call inside a handler returns at once), and under MPI_THREAD_MULTIPLE
 * only the thread holding the component's lock progresses. */
static mca_btl_base_descriptor_t rx_des;

/* A whole message, the usual one: the channel passes its fields, no
 * descriptor of the piece (docs/channels.md, "The whole-message handler"). */
void mca_btl_ivshmem_recv_whole(void *arg, uint32_t sender, uint32_t tag,
                                const void *data, uint32_t len)
{
    (void)arg;
    void *slot;
    if (!ivshmem_rx_accept_whole(sender, tag, MCA_BTL_TAG_MAX,
                                 (void *const *)IVSHMEM_COMPONENT->peers,
                                 IVSHMEM_COMPONENT->npeers,
                                 IVSHMEM_COMPONENT->rx_dropped, &slot))
        return; /* not something our sends produce: counted */
    struct mca_btl_base_endpoint_t *ep = slot;
    if (ep)
        IVSHMEM_COUNT(ep, recvs, bytes_in, len);
    mca_btl_ivshmem_deliver(&mca_btl_ivshmem_module.super, ep,
                            (mca_btl_base_tag_t)tag, (void *)data, len,
                            &rx_des);
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

/* name##_mt: the entry point `name` under the component's lock */
#define LOCKED(ret, name, params, args)                                       \
    static ret name##_mt params                                               \
    {                                                                         \
        ivshmem_lock_take(&IVSHMEM_COMPONENT->lock);                          \
        ret rc = name args;                                                   \
        ivshmem_lock_give(&IVSHMEM_COMPONENT->lock);                          \
        return rc;                                                            \
    }

LOCKED(int, add_procs,
       (struct mca_btl_base_module_t * btl, size_t nprocs,
        struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **peers,
        struct opal_bitmap_t *reachable),
       (btl, nprocs, procs, peers, reachable))
LOCKED(int, del_procs,
       (struct mca_btl_base_module_t * btl, size_t nprocs,
        struct opal_proc_t **procs, struct mca_btl_base_endpoint_t **peers),
       (btl, nprocs, procs, peers))
LOCKED(int, finalize, (struct mca_btl_base_module_t * btl), (btl))
LOCKED(int, mca_btl_ivshmem_send,
       (struct mca_btl_base_module_t * btl,
        struct mca_btl_base_endpoint_t *endpoint,
        struct mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag),
       (btl, endpoint, des, tag))
LOCKED(int, mca_btl_ivshmem_sendi,
       (struct mca_btl_base_module_t * btl,
        struct mca_btl_base_endpoint_t *endpoint,
        struct opal_convertor_t *convertor, void *header, size_t header_size,
        size_t payload_size, uint8_t order, uint32_t flags,
        mca_btl_base_tag_t tag, mca_btl_base_descriptor_t **descriptor),
       (btl, endpoint, convertor, header, header_size, payload_size, order,
        flags, tag, descriptor))

void mca_btl_ivshmem_threads_enable(void)
{
    IVSHMEM_COMPONENT->lock = 0;
    IVSHMEM_COMPONENT->threads = true;
    mca_btl_base_module_t *m = &mca_btl_ivshmem_module.super;
    m->btl_add_procs = add_procs_mt;
    m->btl_del_procs = del_procs_mt;
    m->btl_finalize = finalize_mt;
    m->btl_send = mca_btl_ivshmem_send_mt;
    m->btl_sendi = mca_btl_ivshmem_sendi_mt;
}

mca_btl_ivshmem_module_t mca_btl_ivshmem_module = {
    .super = {
        .btl_component = &mca_btl_ivshmem_component.super,
        .btl_add_procs = add_procs,
        .btl_del_procs = del_procs,
        .btl_finalize = finalize,
        .btl_alloc = mca_btl_ivshmem_alloc,
        .btl_free = mca_btl_ivshmem_free,
        .btl_prepare_src = mca_btl_ivshmem_prepare_src,
        .btl_send = mca_btl_ivshmem_send,
        .btl_sendi = mca_btl_ivshmem_sendi,
        .btl_put = mca_btl_ivshmem_put,
        .btl_get = mca_btl_ivshmem_get,
        .btl_register_mem = mca_btl_ivshmem_register_mem,
        .btl_register_error = register_error,
        .btl_deregister_mem = mca_btl_ivshmem_deregister_mem,
    },
};
