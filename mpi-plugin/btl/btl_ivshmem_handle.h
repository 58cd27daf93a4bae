/*
 * BTL ivshmem: the registration handle that names a buffer in the region
 * (ob1 passes it to peers for put and get), and the checks of a handle
 * that came from a peer. Open MPI free, so that the multi-process tests
 * run these very checks against a real region without MPI
 * (tests/mp/test_chan_faults.c, test_owner_dies_during_get).
 */
#ifndef BTL_IVSHMEM_HANDLE_H
#define BTL_IVSHMEM_HANDLE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <ivshm/channel.h>

/* A registration. Memory inside the region can be reached by peers: its
 * handle names it by region offset. Other memory is registered for local
 * use only (the local side of a put or get), so that ob1 never offers it
 * to a peer. Handles from peers are untrusted and checked before use. */
#define IVSHMEM_REG_IN_REGION 0x1u
struct mca_btl_base_registration_handle_t {
    uint64_t addr;  /* the registering process' address of the buffer */
    uint64_t len;
    uint64_t off;   /* region offset of addr (IVSHMEM_REG_IN_REGION) */
    uint32_t flags;
    uint32_t check; /* IVSHMEM_REG_CHECK ^ flags, a cheap sanity mark */
};
#define IVSHMEM_REG_CHECK 0x52474849u /* "IHGR" */

/* Before a put or get: the region offset of [raddr, raddr + size) of the
 * buffer that peer `owner` registered as h, or UINT64_MAX. h came from the
 * peer (one read of its bytes, every field checked against a region of
 * rsize bytes), and the range must be the owner's own memory under its
 * live lease: a stale handle of a dead or restarted peer is refused. */
static inline uint64_t
ivshmem_handle_range(ivshm_ep_t *ep, uint64_t rsize, uint32_t owner,
                     const struct mca_btl_base_registration_handle_t *h,
                     uint64_t raddr, uint64_t size)
{
    struct mca_btl_base_registration_handle_t hd;
    if (!h)
        return UINT64_MAX;
    memcpy(&hd, h, sizeof(hd));
    if (hd.flags != IVSHMEM_REG_IN_REGION ||
        hd.check != (IVSHMEM_REG_CHECK ^ hd.flags) || hd.len > rsize ||
        hd.off > rsize - hd.len || raddr < hd.addr ||
        raddr - hd.addr > hd.len || size > hd.len - (raddr - hd.addr))
        return UINT64_MAX;
    uint64_t off = hd.off + (raddr - hd.addr);
    if (ivshm_ep_peer_holds(ep, owner, off, size) != IVSHM_OK)
        return UINT64_MAX;
    return off;
}

/* After a get: whether the owner's lease held through the copy. If not,
 * its chunks may have been reclaimed and reused during the copy, and the
 * bytes read may be someone else's: the get must fail. */
static inline bool ivshmem_get_held(ivshm_ep_t *ep, uint32_t owner)
{
    return ivshm_ep_peer_alive(ep, owner) == IVSHM_OK;
}

#endif
