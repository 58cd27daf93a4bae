/*
 * Where a buffer lies in a region, asked across the copies of libivshm in
 * one process.
 *
 * A process may map one region several times, each copy of libivshm with
 * its own mapping and its own lease: the BTL ivshmem (which hands out
 * MPI_Alloc_mem buffers through the mpool and the region heap's blocks)
 * and the UCT transport each link libivshm in, hidden. A buffer from one
 * copy is private memory to the other, which sees an address outside its
 * own mapping. The copy that owns such memory exports one lookup, found
 * by name at run time (dlsym(RTLD_DEFAULT, IVSHM_LOCATE_SYMBOL)): the
 * asking side needs no link to the answering one, and a process without
 * it is unchanged.
 *
 * Versioning: the name carries the version. A change of the structure or
 * of the meaning makes a new name (ivshm_locate_v2), so an old caller
 * never reads a new answer, and a provider may export both.
 *
 * The answer is a snapshot: the buffer's owner (the answering copy's
 * lease) held every byte of it when asked. It stays true while the
 * buffer lives (an address of a mapping names one region offset while
 * the mapping lasts, and a block's chunks keep their owner until it is
 * freed); whoever reaches the memory by it must still ask the region
 * whether the owner holds the range at each access (ivshm_region_owned),
 * as the transport's peers do.
 */
#ifndef IVSHM_LOCATE_H
#define IVSHM_LOCATE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IVSHM_LOCATE_SYMBOL "ivshm_locate_v1"

typedef struct ivshm_location {
    uint8_t region_uuid[16]; /* the region the buffer lies in */
    uint64_t off;            /* region offset of the buffer's first byte */
    /* the lease that owns every chunk of the buffer (ivshm_identity_t
     * less the UUID) */
    uint64_t vm_id;
    uint32_t slot, gen, pid;
    uint32_t reserved; /* 0 */
} ivshm_location_t;

/* 0 and *loc filled when [addr, addr + len) lies in the provider's mapping
 * of a region and every chunk of it is owned by the provider's live lease;
 * -1 otherwise (not its memory, a range that is only partly its memory,
 * len 0, no region mapped). Safe from any thread; takes no lock a malloc
 * could hold and never calls malloc. */
typedef int (*ivshm_locate_fn)(const void *addr, size_t len,
                               ivshm_location_t *loc);
/* What the provider defines and exports (the BTL ivshmem, for the region
 * heap's blocks and MPI_Alloc_mem buffers). Callers look it up by
 * IVSHM_LOCATE_SYMBOL and never link it. */
int ivshm_locate_v1(const void *addr, size_t len, ivshm_location_t *loc);

#ifdef __cplusplus
}
#endif
#endif
