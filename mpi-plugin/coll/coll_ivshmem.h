/*
 * coll ivshmem: MPI collectives through the ivshmem region, for the ranks
 * of a communicator that map the same region (one host, any number of VMs,
 * any number of ranks per VM). docs/collectives.md says why it is built
 * this way.
 *
 * Parts, one file each:
 *   coll_ivshmem_component.c  parameters, which communicators it takes,
 *                             the module's life, the fallback functions
 *   coll_ivshmem_area.c       the shared area of a communicator: setup by
 *                             agreement, per-rank step counters, waiting
 *                             (with progress and liveness), teardown
 *   coll_ivshmem_ops.c        the algorithms over one region
 *   coll_ivshmem_hier.c       communicators that span regions: one level
 *                             in each region, leaders over the network
 *   coll_ivshmem_agree.c      every member's protocol settings compared
 *                             when a communicator is queried
 *   coll_ivshmem_verdict.h    the verdict on them (Open MPI free)
 *   coll_ivshmem_read.h       reads of a peer's memory in place, checked
 *                             against the owner's lease before and after
 *   coll_ivshmem_hold.h       writes into rank 0's area, checked against
 *                             rank 0's lease (at most a quarter lease old)
 *
 * The region itself is the BTL ivshmem's (found among the initialised
 * BTLs, like the mpool does); which region each rank maps is read from
 * the BTL's modex entries, which every rank sees alike, so every rank of a
 * communicator takes the same decision.
 */
#ifndef MCA_COLL_IVSHMEM_H
#define MCA_COLL_IVSHMEM_H

#include "btl_ivshmem.h"
#include "coll_ivshmem_hold.h"
#include "coll_ivshmem_verdict.h"

#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/op/op.h"
#include "ompi/mca/coll/coll.h"

#include <stdatomic.h>

BEGIN_C_DECLS

/* the collectives the component may take (coll_ivshmem_enable) */
enum coll_ivshmem_kind {
    CIV_BARRIER,
    CIV_BCAST,
    CIV_REDUCE,
    CIV_ALLREDUCE,
    CIV_ALLGATHER,
    CIV_ALLTOALL,
    CIV_NKINDS
};

typedef struct mca_coll_ivshmem_component_t {
    IVSHMEM_COLL_COMPONENT_T super;
    int priority;
    char *enable;             /* comma list of collective names */
    unsigned enabled;         /* bit per kind, parsed from enable */
    unsigned slot_size;       /* bytes per rank and step buffer */
    unsigned reduce_split;    /* allreduces from this size: all ranks fold */
    unsigned reduce_root_max; /* reduces up to this size: the root folds */
    unsigned long max_bytes;  /* larger collectives go to the fallback */
    unsigned alltoall_max;    /* larger alltoall blocks: the fallback */
    unsigned allgather_direct_min; /* blocks read from peers' buffers */
    unsigned max_ranks;       /* largest region group it serves */
    int hierarchy;            /* also communicators that span regions */
    int stats;
    int verbose;
    int output;
} mca_coll_ivshmem_component_t;

OPAL_MODULE_DECLSPEC extern mca_coll_ivshmem_component_t
    mca_coll_ivshmem_component;

/* One rank's step counter: 4 * step + phase, written only by that rank,
 * on a line of its own (two lines: no adjacent-line prefetch sharing). */
#define CIV_LINE 128
typedef struct civ_ctl {
    _Atomic uint64_t state;
    char pad[CIV_LINE - sizeof(uint64_t)];
} civ_ctl_t;
_Static_assert(sizeof(civ_ctl_t) == CIV_LINE, "one counter per line pair");

/* phases within a step */
#define CIV_ARRIVED 1u /* this rank's input of the step is in its slot */
#define CIV_REDUCED 2u /* its share of the step's result is written */
#define CIV_DONE 3u    /* it reads nothing of the step any more */
#define CIV_STATE(step, phase) (4 * (uint64_t)(step) + (phase))

/* The shared area of one communicator (in region chunks of the owner,
 * comm rank 0): n counters, then two step buffers (even and odd steps),
 * each with a slot per rank and one for a result. Its layout is computed
 * by every rank from (n, slot): nothing of it is read from the region. */
typedef struct civ_area {
    char *base;      /* our address of the area */
    uint64_t off;    /* its region offset */
    uint64_t size;
    uint32_t n;      /* ranks */
    uint32_t slot;   /* bytes per slot */
    civ_ctl_t *ctl;  /* n counters */
    char *buf;       /* [2][n + 1][slot] */
    bool owner;      /* we allocated it */
} civ_area_t;

static inline char *civ_slot(const civ_area_t *a, uint64_t step, uint32_t i)
{
    return a->buf + ((step & 1) * (a->n + 1) + i) * (uint64_t)a->slot;
}

/* what the component saves of the modules below it, to fall back to */
typedef struct civ_prev {
    mca_coll_base_module_barrier_fn_t barrier;
    mca_coll_base_module_t *barrier_module;
    mca_coll_base_module_bcast_fn_t bcast;
    mca_coll_base_module_t *bcast_module;
    mca_coll_base_module_reduce_fn_t reduce;
    mca_coll_base_module_t *reduce_module;
    mca_coll_base_module_allreduce_fn_t allreduce;
    mca_coll_base_module_t *allreduce_module;
    mca_coll_base_module_allgather_fn_t allgather;
    mca_coll_base_module_t *allgather_module;
    mca_coll_base_module_alltoall_fn_t alltoall;
    mca_coll_base_module_t *alltoall_module;
} civ_prev_t;

enum civ_mode {
    CIV_FLAT,   /* every rank maps the same region */
    CIV_HIER,   /* several regions (or ranks without one) */
};

/* CIV_SETUP_SPLITTING: the two-level module is making its communicators;
 * ompi_comm_split runs collectives on comm meanwhile, which go to the
 * modules below */
enum civ_setup {
    CIV_SETUP_NOT_YET,
    CIV_SETUP_SPLITTING,
    CIV_SETUP_OK,
    CIV_SETUP_FAILED
};

typedef struct mca_coll_ivshmem_module_t {
    mca_coll_base_module_t super;
    enum civ_mode mode;
    ompi_communicator_t *comm;
    civ_prev_t prev;
    enum civ_setup setup; /* agreed by every rank at the first collective */
    bool aside; /* the members' settings differ: everything goes below */
    uint32_t n, me;
    ivshm_identity_t *ids; /* by comm rank (flat mode) */
    mca_btl_ivshmem_component_t *btl;
    civ_area_t area;
    civ_hold_t hold;   /* rank 0 still holds the area: before each store */
    bool hold_said;    /* its loss was reported */
    uint64_t step;     /* the last step this rank began */
    uint64_t all_done; /* every rank is known done with steps up to here */
    /* hierarchy (CIV_HIER): made at the first collective */
    int *group_of;           /* by comm rank: its region group */
    int *leader_of_group;    /* comm rank of each group's leader */
    int ngroups, my_group;
    ompi_communicator_t *local;   /* my group (flat ivshmem module there) */
    ompi_communicator_t *leaders; /* the groups' leaders; NULL elsewhere */
    /* counters (coll_ivshmem_stats) */
    uint64_t count[CIV_NKINDS];    /* collectives run through the region */
    uint64_t fallback[CIV_NKINDS]; /* handed to the modules below */
    uint64_t steps, scans;         /* steps; full scans of the counters */
    uint64_t direct[CIV_NKINDS];   /* read straight from peers' buffers */
    /* direct reads that found a rank without region memory: the next
     * `direct_skip` calls skip the offset exchange, doubling up to
     * CIV_DIRECT_BACKOFF_MAX after each miss (the same on every rank: all
     * read the same offsets) */
    uint32_t direct_skip[CIV_NKINDS], direct_backoff[CIV_NKINDS];
} mca_coll_ivshmem_module_t;
OBJ_CLASS_DECLARATION(mca_coll_ivshmem_module_t);

#define MOD(module) ((mca_coll_ivshmem_module_t *)(module))
/* an error ends the collective (the communicator's error handler) */
#define CHECK(x)                                                             \
    do {                                                                     \
        int rc_ = (x);                                                       \
        if (rc_ != OMPI_SUCCESS)                                             \
            return rc_;                                                      \
    } while (0)

/* A user buffer seen as a run of packed bytes (coll_ivshmem_buf.c). */
typedef struct civ_buf {
    const void *user;
    char *base; /* the packed bytes: the user's (contiguous) or staged */
    ompi_datatype_t *dt;
    size_t count;
    size_t bytes;
    bool contig;
    char *staged; /* private packed copy of a non-contiguous buffer */
} civ_buf_t;
void civ_buf_init(civ_buf_t *b, const void *buf, size_t count,
                  ompi_datatype_t *dt);
/* makes b->base hold the packed bytes: non-contiguous buffers get a
 * private copy, filled from the user's buffer if fill */
int civ_buf_stage(civ_buf_t *b, bool fill);
/* drops the copy, unpacking it into the user's buffer first if write_back */
void civ_buf_unstage(civ_buf_t *b, bool write_back);
/* an output (initialised by the caller) and, unless in place, an input
 * made from (sbuf, scount, sdt), staged together; in place, the output's
 * own bytes are the input (filled first) */
int civ_buf_stage_io(civ_buf_t *in, const void *sbuf, size_t scount,
                     ompi_datatype_t *sdt, civ_buf_t *out, bool in_place);
/* drops both, writing the output back if ok */
void civ_buf_unstage_io(civ_buf_t *in, civ_buf_t *out, bool in_place, bool ok);

/* coll_ivshmem_agree.c */
/* publishes this process' settings (in its modex entry, at open) */
void civ_agree_publish(void);
/* compares every member's published settings, alike on every member;
 * CIV_AGREE_DIFFER sets *priority to the lowest any member has */
enum civ_agreement civ_agree(ompi_communicator_t *comm, int *priority);

/* coll_ivshmem_area.c */
/* Agrees on the area at the first collective (collective over comm,
 * through the fallback functions); sets m->setup. */
int civ_area_setup(mca_coll_ivshmem_module_t *m);
/* gives the area back now, or once every rank is done (civ_area_reap) */
void civ_area_release(mca_coll_ivshmem_module_t *m);
/* gives back the areas whose ranks are all done now; last: forgets the
 * others (they go back with this process' lease) */
void civ_area_reap(bool last);
/* begins the next step: returns it, after making sure every rank is done
 * with the step that used the same buffers (two steps back) */
/* (and that rank 0 still holds the area: the step's stores may follow) */
int civ_step_begin(mca_coll_ivshmem_module_t *m, uint64_t *step);
/* stores this rank's counter, if rank 0 still holds the area */
int civ_post(mca_coll_ivshmem_module_t *m, uint64_t step, unsigned phase);
/* waits until rank i's counter reaches (step, phase) */
int civ_wait_one(mca_coll_ivshmem_module_t *m, uint32_t i, uint64_t step,
                 unsigned phase);
/* waits until every rank's counter reaches (step, phase) */
int civ_wait_all(mca_coll_ivshmem_module_t *m, uint64_t step, unsigned phase);
/* what a rank that reached (step, phase) tells about the others */
void civ_learn(mca_coll_ivshmem_module_t *m, uint64_t step);

/* coll_ivshmem_ops.c: one region (m->mode == CIV_FLAT) */
int civ_barrier(ompi_communicator_t *comm, mca_coll_base_module_t *module);
int civ_bcast(void *buf, int count, ompi_datatype_t *dt, int root,
              ompi_communicator_t *comm, mca_coll_base_module_t *module);
int civ_reduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dt,
               ompi_op_t *op, int root, ompi_communicator_t *comm,
               mca_coll_base_module_t *module);
int civ_allreduce(const void *sbuf, void *rbuf, int count,
                  ompi_datatype_t *dt, ompi_op_t *op,
                  ompi_communicator_t *comm, mca_coll_base_module_t *module);
int civ_allgather(const void *sbuf, int scount, ompi_datatype_t *sdt,
                  void *rbuf, int rcount, ompi_datatype_t *rdt,
                  ompi_communicator_t *comm, mca_coll_base_module_t *module);
int civ_alltoall(const void *sbuf, int scount, ompi_datatype_t *sdt,
                 void *rbuf, int rcount, ompi_datatype_t *rdt,
                 ompi_communicator_t *comm, mca_coll_base_module_t *module);

/* coll_ivshmem_hier.c: several regions (m->mode == CIV_HIER) */
int civ_hier_barrier(ompi_communicator_t *comm, mca_coll_base_module_t *module);
int civ_hier_bcast(void *buf, int count, ompi_datatype_t *dt, int root,
                   ompi_communicator_t *comm, mca_coll_base_module_t *module);
int civ_hier_reduce(const void *sbuf, void *rbuf, int count,
                    ompi_datatype_t *dt, ompi_op_t *op, int root,
                    ompi_communicator_t *comm, mca_coll_base_module_t *module);
int civ_hier_allreduce(const void *sbuf, void *rbuf, int count,
                       ompi_datatype_t *dt, ompi_op_t *op,
                       ompi_communicator_t *comm,
                       mca_coll_base_module_t *module);
int civ_hier_allgather(const void *sbuf, int scount, ompi_datatype_t *sdt,
                       void *rbuf, int rcount, ompi_datatype_t *rdt,
                       ompi_communicator_t *comm,
                       mca_coll_base_module_t *module);
void civ_hier_release(mca_coll_ivshmem_module_t *m);

END_C_DECLS
#endif
