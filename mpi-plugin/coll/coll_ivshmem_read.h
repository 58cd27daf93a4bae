/*
 * coll ivshmem: reading another rank's memory in place (the direct reads
 * of alltoall and allgather). Open MPI free, so that the multi-process
 * test runs this very code against a real region, with a real owner
 * killed in the middle of a copy (tests/mp/test_coll_read.c).
 *
 * The peer's memory is checked against its owner's life before the copy
 * (the range must be the owner's memory under its live lease: a stale or
 * forged offset is never read) and again after it: if the owner's lease
 * ended during the copy, its chunks may have been handed to another
 * process meanwhile, and the bytes copied may be that process' data. Such
 * a read fails; the caller fails the collective (never success with
 * foreign bytes). DESIGN.md §3.9.
 */
#ifndef COLL_IVSHMEM_READ_H
#define COLL_IVSHMEM_READ_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <ivshm/ivshm.h>

/* our address of [off, off + len) if it is wholly memory of owner's live
 * lease (IVSHM_OK), as the BTL's coll_map */
typedef int (*civ_map_fn)(const ivshm_identity_t *owner, uint64_t off,
                          uint64_t len, void **addr);
/* the copy itself: memcpy, except in the test that kills the owner in
 * the middle of it (a seam no setting reaches) */
typedef void *(*civ_copy_fn)(void *dst, const void *src, size_t len);

enum civ_read_status {
    CIV_READ_OK,
    CIV_READ_REFUSED, /* before the copy: not the owner's live memory */
    CIV_READ_LOST,    /* after the copy: the owner's lease ended during it */
};

/* Copies len bytes at `at` of owner's range [off, off + span) into dst. */
static inline enum civ_read_status
civ_read_peer(civ_map_fn map, civ_copy_fn copy, const ivshm_identity_t *owner,
              uint64_t off, uint64_t span, uint64_t at, void *dst, size_t len)
{
    void *peer;
    if (at > span || len > span - at ||
        map(owner, off, span, &peer) != IVSHM_OK)
        return CIV_READ_REFUSED;
    copy(dst, (const char *)peer + at, len);
    /* after: the same range, still the owner's under the same lease (a
     * lease ends before its chunks are freed and taken again) */
    if (map(owner, off, span, &peer) != IVSHM_OK)
        return CIV_READ_LOST;
    return CIV_READ_OK;
}

#endif
