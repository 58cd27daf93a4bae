/*
 * BTL ivshmem: the registration handle that names a buffer in the region
 * (ob1 passes it to peers for put and get), and the checks of a handle
 * that came from a peer. Open MPI free, so that the multi-process tests
 * run these very checks, and the copy of a put or get, against a real
 * region without MPI (tests/mp/test_chan_faults.c: the owner dies during
 * a get, during a put).
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

/* Whether peer `owner` still holds [off, off + len) under its live lease:
 * asked before each piece of a put or get and after the last one. */
static inline bool ivshmem_range_held(ivshm_ep_t *ep, uint32_t owner,
                                      uint64_t off, uint64_t len)
{
    return ivshm_ep_peer_holds(ep, owner, off, len) == IVSHM_OK;
}

/* A put or get moves a peer's buffer in pieces of this many bytes at
 * most, the owner checked before each: a target that dies during a large
 * put is noticed within one piece (about 0.1 ms of copying), far within
 * the lease timeout for which the chunks of an owner proven dead are not
 * handed out again (DESIGN.md section 3, invariant 9). They do not protect
 * a copier that is itself paused between its check and its store for
 * longer than the cooling period (docs/lifetimes.md, decision 2). */
#define IVSHMEM_RDMA_PIECE (1u << 20)

/* The check a copy asks for before each piece but the first, and for the
 * whole range after the last one: `ivshmem_range_held` under the caller's lock. */
typedef bool (*ivshmem_held_fn)(void *arg, uint64_t off, uint64_t len);

/* Copies size bytes between local memory and the peer's region buffer at
 * region offset off (mapped at remote): into it for a put, out of it for
 * a get, in pieces of at most `piece` bytes. The caller has checked the
 * whole range just before (the handle's checks), which stands for the
 * first piece: a copy of one piece costs one check, after it. Returns
 * true when every piece was copied while the owner held its range, and it
 * still held the whole range after the copy. On false nothing more is written into the
 * range after the failed check (a put), and the bytes read must be
 * discarded (a get): the owner died and its chunks may be another
 * process's now. */
static inline bool ivshmem_copy_held(bool put, void *local, void *remote,
                                     uint64_t off, uint64_t size,
                                     uint64_t piece, ivshmem_held_fn held,
                                     void *arg)
{
    for (uint64_t done = 0; done < size;) {
        uint64_t n = size - done < piece ? size - done : piece;
        if (done > 0 && !held(arg, off + done, n))
            return false;
        if (put)
            memcpy((char *)remote + done, (const char *)local + done, n);
        else
            memcpy((char *)local + done, (const char *)remote + done, n);
        done += n;
    }
    return held(arg, off, size);
}

#endif
