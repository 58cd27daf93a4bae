/*
 * Remote memory access of the `ivshmem` transport: put, get and atomics
 * on a peer's region memory, named by a remote key (uct_ivshmem_mem.c).
 * Each access is one copy (or one C11 atomic) between local memory and the
 * region, done by the CPU of the caller, so it is complete when the call
 * returns.
 *
 * The remote key is untrusted (DESIGN.md section 3): the range asked for
 * must lie in the range the key names, and the owner's lease must hold
 * every byte of it before the access; a large copy asks again before each
 * piece, and the whole range is asked after the copy, as the BTL does
 * (btl_ivshmem_handle.h, docs/lifetimes.md). An access that fails a check
 * returns an error to UCP (the request fails), never a crash.
 */
#include "uct_ivshmem.h"

#include "../btl/btl_ivshmem_handle.h" /* ivshmem_copy_held */

#include <uct/base/uct_iov.inl>

#include <stdatomic.h>
#include <string.h>

/* Largest put and get served without registration (short, bcopy). */
#define UCT_IVSHMEM_RMA_MAX_SHORT 256
#define UCT_IVSHMEM_RMA_MAX_IOV 16

void uct_ivshmem_rma_query(const uct_ivshmem_iface_t *iface,
                           uct_iface_attr_t *attr)
{
    size_t region = ivshm_region_size(iface->md->r);
    attr->cap.flags |= UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                       UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_SHORT |
                       UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY |
                       UCT_IFACE_FLAG_ATOMIC_CPU;
    attr->cap.put.max_short = UCT_IVSHMEM_RMA_MAX_SHORT;
    attr->cap.put.max_bcopy = iface->max_bcopy;
    attr->cap.put.min_zcopy = 0;
    attr->cap.put.max_zcopy = region;
    attr->cap.put.opt_zcopy_align = 1;
    attr->cap.put.align_mtu = 1;
    attr->cap.put.max_iov = UCT_IVSHMEM_RMA_MAX_IOV;
    attr->cap.get.max_short = UCT_IVSHMEM_RMA_MAX_SHORT;
    attr->cap.get.max_bcopy = iface->max_bcopy;
    attr->cap.get.min_zcopy = 0;
    attr->cap.get.max_zcopy = region;
    attr->cap.get.opt_zcopy_align = 1;
    attr->cap.get.align_mtu = 1;
    attr->cap.get.max_iov = UCT_IVSHMEM_RMA_MAX_IOV;
    /* the CPU's own atomics on memory both VMs map (coherent like any
     * shared memory): as UCX's mm transports declare them */
    attr->cap.atomic32.op_flags = attr->cap.atomic64.op_flags =
        UCS_BIT(UCT_ATOMIC_OP_ADD) | UCS_BIT(UCT_ATOMIC_OP_AND) |
        UCS_BIT(UCT_ATOMIC_OP_OR) | UCS_BIT(UCT_ATOMIC_OP_XOR);
    attr->cap.atomic32.fop_flags = attr->cap.atomic64.fop_flags =
        UCS_BIT(UCT_ATOMIC_OP_ADD) | UCS_BIT(UCT_ATOMIC_OP_AND) |
        UCS_BIT(UCT_ATOMIC_OP_OR) | UCS_BIT(UCT_ATOMIC_OP_XOR) |
        UCS_BIT(UCT_ATOMIC_OP_SWAP) | UCS_BIT(UCT_ATOMIC_OP_CSWAP);
}

/* What a copy asks between pieces and after the last: the remote owner
 * still holds its range, and where the local side is region memory of
 * this mapping (the transport's own allocations), this process still
 * holds that too (a lease reclaimed under a stalled process gives its
 * chunks to others). */
typedef struct uct_ivshmem_owner_ref {
    ivshm_region_t *r;
    const ivshm_identity_t *owner;
    ivshm_identity_t self;
    uint64_t local_off; /* UINT64_MAX: the local side is private memory */
    uint64_t remote_off;
} uct_ivshmem_owner_ref_t;

static bool uct_ivshmem_owner_holds(void *arg, uint64_t off, uint64_t len)
{
    const uct_ivshmem_owner_ref_t *o = arg;
    if (ivshm_region_owned(o->r, o->owner, off, len) != IVSHM_OK)
        return false;
    return o->local_off == UINT64_MAX ||
           ivshm_region_owned(o->r, &o->self,
                              o->local_off + (off - o->remote_off),
                              len) == IVSHM_OK;
}

static ucs_status_t uct_ivshmem_rma_refuse(uct_ivshmem_iface_t *iface,
                                           const uct_ivshmem_rkey_t *k,
                                           ucs_status_t status,
                                           const char *what)
{
    iface->cnt.rma_refused++;
    ucs_error("ivshmem: remote access to pid %u's memory (region %s) "
              "refused: %s", k->owner.pid, iface->md->device, what);
    return status;
}

/* The region offset and local address of [remote_addr, + size) of the
 * memory k names, once its checks pass: inside the key's range, in this
 * interface's region, all of it the owner's under its live lease. */
static ucs_status_t uct_ivshmem_rma_target(const uct_ivshmem_ep_t *ep,
                                           uct_ivshmem_iface_t *iface,
                                           const uct_ivshmem_rkey_t *k,
                                           uint64_t remote_addr, size_t size,
                                           uint64_t *off, char **ptr)
{
    /* a lost peer, or this process' own lease lost (every endpoint fails
     * with it): no access at all */
    if (ep->failed != UCS_OK)
        return ep->failed;
    if (memcmp(k->owner.region_uuid, iface->md->uuid, 16) != 0)
        return uct_ivshmem_rma_refuse(iface, k, UCS_ERR_INVALID_PARAM,
                                      "its key names another region");
    if (remote_addr < k->addr || remote_addr - k->addr > k->len ||
        size > k->len - (remote_addr - k->addr))
        return uct_ivshmem_rma_refuse(iface, k, UCS_ERR_INVALID_PARAM,
                                      "the range is outside its key");
    /* the key's range lies in the region (checked at unpack), so does
     * this part of it */
    *off = k->off + (remote_addr - k->addr);
    *ptr = (char *)ivshm_region_base(iface->md->r) + *off;
    if (size == 0)
        return UCS_OK; /* nothing is touched */
    ivshm_status_t st = ivshm_region_owned(iface->md->r, &k->owner, *off,
                                           size);
    if (st == IVSHM_ERR_PEER_DEAD)
        return uct_ivshmem_rma_refuse(iface, k, UCS_ERR_CONNECTION_RESET,
                                      "its lease has ended");
    if (st != IVSHM_OK)
        return uct_ivshmem_rma_refuse(iface, k, UCS_ERR_INVALID_PARAM,
                                      "the range is not its memory");
    return UCS_OK;
}

/* One checked copy between local memory and the peer's range. */
static ucs_status_t uct_ivshmem_rma_copy(uct_ep_h tl_ep, int put, void *local,
                                         size_t size, uint64_t remote_addr,
                                         uct_rkey_t rkey)
{
    const uct_ivshmem_ep_t *ep = ucs_derived_of(tl_ep, uct_ivshmem_ep_t);
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    const uct_ivshmem_rkey_t *k = (const uct_ivshmem_rkey_t *)(uintptr_t)rkey;
    uint64_t off;
    char *remote;
    ucs_status_t status = uct_ivshmem_rma_target(ep, iface, k, remote_addr,
                                                 size, &off, &remote);
    if (status != UCS_OK || size == 0)
        return status;
    uct_ivshmem_owner_ref_t o = {.r = iface->md->r,
                                 .owner = &k->owner,
                                 .local_off = UINT64_MAX,
                                 .remote_off = off};
    if (ivshm_region_offset_of(iface->md->r, local, 1) != UINT64_MAX &&
        ivshm_region_locate(iface->md->r, local, size, &o.local_off,
                            &o.self) != IVSHM_OK)
        return uct_ivshmem_rma_refuse(iface, k, UCS_ERR_INVALID_PARAM,
                                      "the local buffer is region memory "
                                      "this process does not hold");
    if (!ivshmem_copy_held(put, local, remote, off, size, IVSHMEM_RDMA_PIECE,
                           uct_ivshmem_owner_holds, &o))
        return uct_ivshmem_rma_refuse(iface, k, UCS_ERR_CONNECTION_RESET,
                                      put ? "it lost the range during a put"
                                          : "it lost the range during a get "
                                            "(the bytes read are void)");
    return UCS_OK;
}

static ucs_status_t uct_ivshmem_rma_iov(uct_ep_h tl_ep, int put,
                                        const uct_iov_t *iov, size_t iovcnt,
                                        uint64_t remote_addr, uct_rkey_t rkey,
                                        size_t *total)
{
    *total = 0;
    for (size_t i = 0; i < iovcnt; i++) {
        size_t n = uct_iov_get_length(&iov[i]);
        ucs_status_t status = uct_ivshmem_rma_copy(tl_ep, put, iov[i].buffer,
                                                   n, remote_addr + *total,
                                                   rkey);
        if (status != UCS_OK)
            return status;
        *total += n;
    }
    return UCS_OK;
}

ucs_status_t uct_ivshmem_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                      unsigned length, uint64_t remote_addr,
                                      uct_rkey_t rkey)
{
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    UCT_CHECK_LENGTH(length, 0, UCT_IVSHMEM_RMA_MAX_SHORT, "put_short");
    ucs_status_t status = uct_ivshmem_rma_copy(tl_ep, 1, (void *)buffer,
                                               length, remote_addr, rkey);
    if (status == UCS_OK)
        iface->cnt.put_short += length;
    return status;
}

ssize_t uct_ivshmem_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                                 void *arg, uint64_t remote_addr,
                                 uct_rkey_t rkey)
{
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    /* packed privately: the checks must come right before the store */
    size_t length = pack_cb(iface->tx_buf, arg);
    UCT_CHECK_LENGTH(length, 0, iface->max_bcopy, "put_bcopy");
    ucs_status_t status = uct_ivshmem_rma_copy(tl_ep, 1, iface->tx_buf, length,
                                               remote_addr, rkey);
    if (status != UCS_OK)
        return status;
    iface->cnt.put_bcopy += length;
    return (ssize_t)length;
}

ucs_status_t uct_ivshmem_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                      size_t iovcnt, uint64_t remote_addr,
                                      uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    size_t total;
    (void)comp; /* done when it returns */
    UCT_CHECK_IOV_SIZE(iovcnt, UCT_IVSHMEM_RMA_MAX_IOV, "put_zcopy");
    ucs_status_t status = uct_ivshmem_rma_iov(tl_ep, 1, iov, iovcnt,
                                              remote_addr, rkey, &total);
    if (status == UCS_OK)
        iface->cnt.put_zcopy += total;
    return status;
}

ucs_status_t uct_ivshmem_ep_get_short(uct_ep_h tl_ep, void *buffer,
                                      unsigned length, uint64_t remote_addr,
                                      uct_rkey_t rkey)
{
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    UCT_CHECK_LENGTH(length, 0, UCT_IVSHMEM_RMA_MAX_SHORT, "get_short");
    ucs_status_t status = uct_ivshmem_rma_copy(tl_ep, 0, buffer, length,
                                               remote_addr, rkey);
    if (status == UCS_OK)
        iface->cnt.get_short += length;
    return status;
}

ucs_status_t uct_ivshmem_ep_get_bcopy(uct_ep_h tl_ep,
                                      uct_unpack_callback_t unpack_cb,
                                      void *arg, size_t length,
                                      uint64_t remote_addr, uct_rkey_t rkey,
                                      uct_completion_t *comp)
{
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    (void)comp;
    UCT_CHECK_LENGTH(length, 0, iface->max_bcopy, "get_bcopy");
    /* its own staging: UCP may ask for a get from an active message's
     * handler, while the message lies in rx_buf */
    ucs_status_t status = uct_ivshmem_rma_copy(tl_ep, 0, iface->get_buf,
                                               length, remote_addr, rkey);
    if (status != UCS_OK)
        return status;
    unpack_cb(arg, iface->get_buf, length);
    iface->cnt.get_bcopy += length;
    return UCS_OK;
}

ucs_status_t uct_ivshmem_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                      size_t iovcnt, uint64_t remote_addr,
                                      uct_rkey_t rkey, uct_completion_t *comp)
{
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    size_t total;
    (void)comp;
    UCT_CHECK_IOV_SIZE(iovcnt, UCT_IVSHMEM_RMA_MAX_IOV, "get_zcopy");
    ucs_status_t status = uct_ivshmem_rma_iov(tl_ep, 0, iov, iovcnt,
                                              remote_addr, rkey, &total);
    if (status == UCS_OK)
        iface->cnt.get_zcopy += total;
    return status;
}

/* ---- atomics ---- */

/* The word an atomic works on, once the checks pass (aligned to its
 * size, so that the CPU's atomic covers it whole). */
static ucs_status_t uct_ivshmem_amo_target(uct_ep_h tl_ep, size_t size,
                                           uint64_t remote_addr,
                                           uct_rkey_t rkey, void **word)
{
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    const uct_ivshmem_rkey_t *k = (const uct_ivshmem_rkey_t *)(uintptr_t)rkey;
    uint64_t off;
    char *p;
    ucs_status_t status =
        uct_ivshmem_rma_target(ucs_derived_of(tl_ep, uct_ivshmem_ep_t), iface,
                               k, remote_addr, size, &off, &p);
    if (status != UCS_OK)
        return status;
    if ((uintptr_t)p % size != 0)
        return uct_ivshmem_rma_refuse(iface, k, UCS_ERR_INVALID_PARAM,
                                      "an atomic on an unaligned word");
    *word = p;
    return UCS_OK;
}

/* After the atomic: the owner still held the word (else its result is
 * void: the chunk may be another process' by now). */
static ucs_status_t uct_ivshmem_amo_done(uct_ep_h tl_ep, size_t size,
                                         uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_ivshmem_iface_t *iface =
        ucs_derived_of(tl_ep->iface, uct_ivshmem_iface_t);
    const uct_ivshmem_rkey_t *k = (const uct_ivshmem_rkey_t *)(uintptr_t)rkey;
    uint64_t off = k->off + (remote_addr - k->addr);
    iface->cnt.atomics++;
    if (ivshm_region_owned(iface->md->r, &k->owner, off, size) != IVSHM_OK)
        return uct_ivshmem_rma_refuse(iface, k, UCS_ERR_CONNECTION_RESET,
                                      "it lost the word during an atomic");
    return UCS_OK;
}

#define UCT_IVSHMEM_AMO_APPLY(_w, _op, _v, _old)                             \
    do {                                                                   \
        switch (_op) {                                                     \
        case UCT_ATOMIC_OP_ADD:                                            \
            _old = atomic_fetch_add_explicit(_w, _v, memory_order_seq_cst); \
            break;                                                         \
        case UCT_ATOMIC_OP_AND:                                            \
            _old = atomic_fetch_and_explicit(_w, _v, memory_order_seq_cst); \
            break;                                                         \
        case UCT_ATOMIC_OP_OR:                                             \
            _old = atomic_fetch_or_explicit(_w, _v, memory_order_seq_cst);  \
            break;                                                         \
        case UCT_ATOMIC_OP_XOR:                                            \
            _old = atomic_fetch_xor_explicit(_w, _v, memory_order_seq_cst); \
            break;                                                         \
        case UCT_ATOMIC_OP_SWAP:                                           \
            _old = atomic_exchange_explicit(_w, _v, memory_order_seq_cst);  \
            break;                                                         \
        default:                                                           \
            return UCS_ERR_UNSUPPORTED;                                    \
        }                                                                  \
    } while (0)

/* The atomics of one width: post, fetch and compare-swap, each checked
 * before (uct_ivshmem_amo_target) and after (uct_ivshmem_amo_done). */
#define UCT_IVSHMEM_AMO_DEFINE(_bits)                                        \
    static ucs_status_t uct_ivshmem_amo##_bits(                              \
            uct_ep_h tl_ep, unsigned opcode, uint##_bits##_t value,          \
            uint##_bits##_t *result, uint64_t remote_addr, uct_rkey_t rkey)  \
    {                                                                        \
        void *p;                                                             \
        uint##_bits##_t old;                                                 \
        ucs_status_t status = uct_ivshmem_amo_target(                        \
                tl_ep, sizeof(old), remote_addr, rkey, &p);                  \
        if (status != UCS_OK)                                                \
            return status;                                                   \
        _Atomic uint##_bits##_t *w = p;                                      \
        UCT_IVSHMEM_AMO_APPLY(w, opcode, value, old);                        \
        status = uct_ivshmem_amo_done(tl_ep, sizeof(old), remote_addr, rkey); \
        if (status == UCS_OK && result)                                      \
            *result = old;                                                   \
        return status;                                                       \
    }                                                                        \
                                                                             \
    ucs_status_t uct_ivshmem_ep_atomic##_bits##_post(                        \
            uct_ep_h tl_ep, unsigned opcode, uint##_bits##_t value,          \
            uint64_t remote_addr, uct_rkey_t rkey)                           \
    {                                                                        \
        return uct_ivshmem_amo##_bits(tl_ep, opcode, value, NULL,            \
                                      remote_addr, rkey);                    \
    }                                                                        \
                                                                             \
    ucs_status_t uct_ivshmem_ep_atomic##_bits##_fetch(                       \
            uct_ep_h tl_ep, unsigned opcode, uint##_bits##_t value,          \
            uint##_bits##_t *result, uint64_t remote_addr, uct_rkey_t rkey,  \
            uct_completion_t *comp)                                          \
    {                                                                        \
        (void)comp; /* done when it returns */                               \
        return uct_ivshmem_amo##_bits(tl_ep, opcode, value, result,          \
                                      remote_addr, rkey);                    \
    }                                                                        \
                                                                             \
    ucs_status_t uct_ivshmem_ep_atomic_cswap##_bits(                         \
            uct_ep_h tl_ep, uint##_bits##_t compare, uint##_bits##_t swap,   \
            uint64_t remote_addr, uct_rkey_t rkey, uint##_bits##_t *result,  \
            uct_completion_t *comp)                                          \
    {                                                                        \
        void *p;                                                             \
        (void)comp;                                                          \
        ucs_status_t status = uct_ivshmem_amo_target(                        \
                tl_ep, sizeof(compare), remote_addr, rkey, &p);              \
        if (status != UCS_OK)                                                \
            return status;                                                   \
        /* old: the value found, swapped or not */                           \
        uint##_bits##_t old = compare;                                       \
        atomic_compare_exchange_strong((_Atomic uint##_bits##_t *)p, &old,   \
                                       swap);                                \
        status = uct_ivshmem_amo_done(tl_ep, sizeof(old), remote_addr, rkey); \
        if (status == UCS_OK)                                                \
            *result = old;                                                   \
        return status;                                                       \
    }

UCT_IVSHMEM_AMO_DEFINE(64)
UCT_IVSHMEM_AMO_DEFINE(32)
