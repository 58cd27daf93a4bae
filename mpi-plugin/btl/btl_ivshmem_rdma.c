/*
 * BTL ivshmem, single copy: buffers that live in the region (MPI_Alloc_mem
 * through the ivshmem mpool, or the region heap) are registered by region
 * offset, and peers read or write them with one copy (put/get, which ob1
 * uses for its RGET and put protocols). Every handle from a peer is
 * checked against the region and the owner's lease before the copy; the
 * copy goes in pieces with the owner's hold on its range checked before
 * each piece and after the last (btl_ivshmem_handle.h), for a put as for a
 * get, and a failed check fails the transfer. Under MPI_THREAD_MULTIPLE a
 * get started inside a progress pass completes after the pass lets the
 * lock go.
 */
#include "btl_ivshmem.h"

#include "opal/util/output.h"

#include <ivshm/locate.h>

#include <stddef.h>
#include <string.h>

uint64_t mca_btl_ivshmem_region_offset(const void *p, size_t len)
{
    ivshm_region_t *r = IVSHMEM_COMPONENT->r;
    return r ? ivshm_region_offset_of(r, p, len) : UINT64_MAX;
}

/* The lookup of ivshm/locate.h, for the UCT transport in this process (it
 * maps the region again under a lease of its own): the region heap's
 * blocks and MPI_Alloc_mem buffers lie in this component's mapping and
 * belong to its lease, so the transport's peers may reach them by get and
 * put once they know that lease. Lock-free: the chunk table is read as
 * every owner check reads it. */
int ivshm_locate_v1(const void *addr, size_t len, ivshm_location_t *loc)
{
    /* the region read once, as the component's close clears it before it
     * closes the region (another thread may register meanwhile) */
    ivshm_region_t *r = __atomic_load_n(&IVSHMEM_COMPONENT->r,
                                        __ATOMIC_ACQUIRE);
    ivshm_identity_t self;
    uint64_t off = 0; /* set where the locate succeeds */
    if (r == NULL || ivshm_region_locate(r, addr, len, &off, &self) != IVSHM_OK)
        return -1;
    memset(loc, 0, sizeof(*loc));
    memcpy(loc->region_uuid, self.region_uuid, 16);
    loc->off = off;
    loc->vm_id = self.vm_id;
    loc->slot = self.slot;
    loc->gen = self.gen;
    loc->pid = self.pid;
    return 0;
}

struct mca_btl_base_registration_handle_t *
mca_btl_ivshmem_register_mem(struct mca_btl_base_module_t *btl,
                             struct mca_btl_base_endpoint_t *endpoint,
                             void *base, size_t size, uint32_t flags)
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
        (mca_btl_ivshmem_reg_t *)opal_free_list_get(&IVSHMEM_COMPONENT->regs);
    if (!reg)
        return NULL;
    reg->handle.addr = (uint64_t)(uintptr_t)base;
    reg->handle.len = size;
    reg->handle.off = off == UINT64_MAX ? 0 : off;
    reg->handle.flags = off == UINT64_MAX ? 0 : IVSHMEM_REG_IN_REGION;
    reg->handle.check = IVSHMEM_REG_CHECK ^ reg->handle.flags;
    return &reg->handle;
}

int mca_btl_ivshmem_deregister_mem(struct mca_btl_base_module_t *btl,
                                   struct mca_btl_base_registration_handle_t *h)
{
    (void)btl;
    mca_btl_ivshmem_reg_t *reg =
        (mca_btl_ivshmem_reg_t *)((char *)h -
                                  offsetof(mca_btl_ivshmem_reg_t, handle));
    opal_free_list_return(&IVSHMEM_COMPONENT->regs, &reg->super);
    return OPAL_SUCCESS;
}

/* Our mapping of [raddr, raddr + size) of a peer's registered buffer, or
 * NULL (btl_ivshmem_handle.h checks the handle). */
static void *remote_ptr(const mca_btl_base_registration_handle_t *h,
                        uint64_t raddr, size_t size, uint32_t owner)
{
    if (!IVSHMEM_COMPONENT->r)
        return NULL;
    uint64_t off = ivshmem_handle_range(
        IVSHMEM_COMPONENT->ep, ivshm_region_size(IVSHMEM_COMPONENT->r), owner,
        h, raddr, size);
    if (off == UINT64_MAX)
        return NULL;
    return (char *)ivshm_region_base(IVSHMEM_COMPONENT->r) + off;
}

static int refuse_rdma(struct mca_btl_base_endpoint_t *endpoint, const char *op,
                       uint64_t raddr, size_t size)
{
    if (endpoint->rdma_refused++ == 0)
        opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                            "btl ivshmem: %s of %zu bytes at 0x%llx of rank "
                            "%u refused: the handle does not name memory "
                            "of the shared region",
                            op, size, (unsigned long long)raddr,
                            endpoint->vpid);
    /* ob1 falls back to copying through sends */
    return OPAL_ERROR;
}

/* One copy between local memory and a peer's registered region buffer,
 * checked (remote_ptr) before: the copy in checked pieces, the counters,
 * and ob1's callback. */
typedef struct rdma_op {
    struct mca_btl_base_module_t *btl;
    struct mca_btl_base_endpoint_t *endpoint;
    bool put;
    void *local, *remote;
    uint64_t remote_off; /* region offset of remote */
    size_t size;
    struct mca_btl_base_registration_handle_t *local_handle;
    mca_btl_base_rdma_completion_fn_t cbfunc;
    void *cbcontext, *cbdata;
} rdma_op_t;

/* ivshmem_held_fn for the copy: the endpoint's records need the lock */
static bool rdma_owner_holds(void *arg, uint64_t off, uint64_t len)
{
    struct mca_btl_base_endpoint_t *endpoint = arg;
    IVSHMEM_LOCK();
    bool held = ivshmem_range_held(IVSHMEM_COMPONENT->ep, endpoint->peer,
                                   off, len);
    IVSHMEM_UNLOCK();
    return held;
}

static void rdma_finish(const rdma_op_t *op)
{
    struct mca_btl_base_endpoint_t *endpoint = op->endpoint;
    bool held = ivshmem_copy_held(op->put, op->local, op->remote,
                                  op->remote_off, op->size,
                                  IVSHMEM_RDMA_PIECE, rdma_owner_holds,
                                  endpoint);
    int rc = OPAL_SUCCESS;
    IVSHMEM_LOCK();
    if (!held) {
        /* the owner died (or gave the buffer up) during the copy: its
         * chunks may be someone else's now. A get's bytes may be theirs,
         * a put stopped before the piece that would have written theirs;
         * either way the message is not delivered */
        opal_output(0, "btl ivshmem: rank %u died or released its buffer "
                       "during a %s of %zu bytes; the message is failed, "
                       "not delivered",
                    endpoint->vpid, op->put ? "put" : "get", op->size);
        rc = OPAL_ERR_UNREACH;
    } else if (op->put) {
        endpoint->puts++;
        endpoint->put_bytes += op->size;
    } else {
        endpoint->gets++;
        endpoint->get_bytes += op->size;
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
        __atomic_fetch_add(&IVSHMEM_COMPONENT->gets_after_pass, n,
                           __ATOMIC_RELAXED);
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
    uint64_t remote_off =
        (uint64_t)((char *)remote -
                   (char *)ivshm_region_base(IVSHMEM_COMPONENT->r));
    rdma_op_t op = {btl,          endpoint, put,       local_address,
                    remote,       remote_off, size,    local_handle,
                    cbfunc,       cbcontext,  cbdata};
    /* threads first: the single-threaded path reads no thread-local */
    if (!put && IVSHMEM_COMPONENT->threads && rdma_deferred.passes &&
        rdma_deferred.n < RDMA_DEFER_MAX)
        rdma_deferred.op[rdma_deferred.n++] = op;
    else
        rdma_finish(&op);
    return OPAL_SUCCESS;
}

#define IVSHMEM_RDMA_FN(name, put)                                            \
    int name(IVSHMEM_RDMA_PARAMS)                                             \
    {                                                                         \
        (void)flags;                                                          \
        (void)order;                                                          \
        return rdma_copy(btl, endpoint, put, local_address, remote_address,   \
                         local_handle, remote_handle, size, cbfunc,           \
                         cbcontext, cbdata);                                  \
    }
IVSHMEM_RDMA_FN(mca_btl_ivshmem_get, false)
IVSHMEM_RDMA_FN(mca_btl_ivshmem_put, true)
