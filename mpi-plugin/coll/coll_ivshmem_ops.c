/*
 * coll ivshmem: the algorithms among ranks that map one region.
 *
 * Every collective is cut into steps of at most one slot per rank
 * (coll_ivshmem_area.c says how steps synchronise):
 *   barrier    every rank arrives; rank 0, having seen all, is done, which
 *              releases the others (two cache-line hand-offs);
 *   bcast      the root writes its slot and is done; readers copy out;
 *   reduce     every rank copies its input into its slot; small: the root
 *   allreduce  (allreduce: rank 0) folds all slots (a reduce's other ranks
 *              leave at once); large (reduce_split, reduce_root_max): each
 *              rank folds its share of the elements into the result slot,
 *              then readers copy out. Folding runs from the
 *              last rank to the first (a_i op acc), so non-commutative
 *              operations keep rank order;
 *   allgather  every rank places its block in its slot, then reads all;
 *              from allgather_direct_min bytes a rank, where every rank's
 *              block is region memory, each reads the blocks straight
 *              from the peers' buffers instead (direct reads, below);
 *   alltoall   every rank places the blocks for all in its slot, then
 *              reads its own block from every slot (up to alltoall_max
 *              bytes a pair); larger ones are read straight from the
 *              peers' send buffers where all of them are region memory,
 *              otherwise they go below, to point-to-point.
 * Datatypes: any layout (a non-contiguous buffer is packed whole into
 * private memory first, or unpacked whole at the end: steps cut the
 * packed bytes anywhere), since a decision must not depend on what only
 * one rank sees; reductions take contiguous types only (the same on every rank),
 * others go to the modules below, as does anything above max_bytes.
 */
#include "coll_ivshmem.h"
#include "coll_ivshmem_read.h"

#include "ompi/constants.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/op/op.h"

#include <stdlib.h>
#include <string.h>


/* Whether this collective goes through the region: every argument of the
 * decision is the same on every rank (fits: what the collective itself
 * allows, e.g. a contiguous reduction type). Sets the area up at the first
 * one taken. A collective not taken counts as a fallback. */
static bool take(mca_coll_ivshmem_module_t *m, int kind, size_t bytes,
                 bool fits, int *rc)
{
    mca_coll_ivshmem_component_t *cc = &mca_coll_ivshmem_component;
    *rc = OMPI_SUCCESS;
    if (!fits) {
        m->fallback[kind]++;
        return false;
    }
    if (m->setup == CIV_SETUP_NOT_YET) {
        *rc = civ_area_setup(m);
        if (*rc != OMPI_SUCCESS)
            return true; /* report the error, do not fall back */
    }
    if (m->setup != CIV_SETUP_OK || (cc->max_bytes && bytes > cc->max_bytes)) {
        m->fallback[kind]++;
        return false;
    }
    m->count[kind]++;
    return true;
}


int civ_barrier(ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_ivshmem_module_t *m = MOD(module);
    int rc;
    if (!take(m, CIV_BARRIER, 0, true, &rc))
        return m->prev.barrier(comm, m->prev.barrier_module);
    CHECK(rc);
    uint64_t t = ++m->step; /* no buffers: no reuse check */
    m->steps++;
    if (m->me == 0) {
        CHECK(civ_wait_all(m, t, CIV_ARRIVED));
        CHECK(civ_post(m, t, CIV_DONE)); /* the release */
    } else {
        CHECK(civ_post(m, t, CIV_ARRIVED));
        CHECK(civ_wait_one(m, 0, t, CIV_DONE));
        civ_learn(m, t); /* rank 0 saw everyone arrive */
        CHECK(civ_post(m, t, CIV_DONE));
    }
    return OMPI_SUCCESS;
}

int civ_bcast(void *buf, int count, ompi_datatype_t *dt, int root,
              ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_ivshmem_module_t *m = MOD(module);
    civ_buf_t b;
    civ_buf_init(&b, buf, (size_t)count, dt);
    int rc;
    if (b.bytes == 0)
        return OMPI_SUCCESS;
    if (!take(m, CIV_BCAST, b.bytes, true, &rc))
        return m->prev.bcast(buf, count, dt, root, comm, m->prev.bcast_module);
    CHECK(rc);
    uint32_t r = (uint32_t)root;
    CHECK(civ_buf_stage(&b, m->me == r));
    for (size_t off = 0; off < b.bytes && rc == OMPI_SUCCESS; off += m->area.slot) {
        size_t len = b.bytes - off < m->area.slot ? b.bytes - off : m->area.slot;
        uint64_t t;
        if (m->me == r) {
            rc = civ_step_begin(m, &t);
            if (rc != OMPI_SUCCESS)
                break;
            memcpy(civ_slot(&m->area, t, r), b.base + off, len);
            rc = civ_post(m, t, CIV_DONE); /* written, and reads nothing */
        } else {
            t = ++m->step;
            m->steps++;
            rc = civ_wait_one(m, r, t, CIV_ARRIVED);
            if (rc != OMPI_SUCCESS)
                break;
            memcpy(b.base + off, civ_slot(&m->area, t, r), len);
            rc = civ_post(m, t, CIV_DONE);
        }
    }
    civ_buf_unstage(&b, m->me != r && rc == OMPI_SUCCESS);
    return rc;
}

/* A reduction's operands: the same contiguous type on every rank. */
typedef struct civ_red {
    ompi_op_t *op;
    ompi_datatype_t *dt;
    size_t ext;   /* bytes per element */
    size_t count;
    const char *in; /* this rank's input (first byte) */
    char *out;      /* its output, or NULL */
} civ_red_t;

static bool red_init(civ_red_t *rd, const void *sbuf, void *rbuf, int count,
                     ompi_datatype_t *dt, ompi_op_t *op, bool has_out)
{
    size_t sz = 0;
    ptrdiff_t lb = 0, ext = 0, tlb = 0, text = 0;
    ompi_datatype_type_size(dt, &sz);
    ompi_datatype_get_extent(dt, &lb, &ext);
    ompi_datatype_get_true_extent(dt, &tlb, &text);
    if (!ompi_datatype_is_contiguous_memory_layout(dt, count) ||
        (size_t)ext != sz || sz == 0 ||
        sz > mca_coll_ivshmem_component.slot_size)
        return false;
    rd->op = op;
    rd->dt = dt;
    rd->ext = sz;
    rd->count = (size_t)count;
    const void *in = sbuf == MPI_IN_PLACE ? rbuf : sbuf;
    rd->in = (const char *)in + tlb;
    rd->out = has_out ? (char *)rbuf + tlb : NULL;
    return true;
}

/* target = a_0 op (a_1 op (... op a_{n-1})) over elements [e, e + k) of
 * the step's slots, e counted from the step's first element */
static void fold(mca_coll_ivshmem_module_t *m, const civ_red_t *rd,
                 uint64_t t, size_t e, size_t k, char *target)
{
    if (k == 0)
        return;
    size_t off = e * rd->ext;
    memcpy(target, civ_slot(&m->area, t, m->n - 1) + off, k * rd->ext);
    for (uint32_t i = m->n - 1; i-- > 0;)
        ompi_op_reduce(rd->op, civ_slot(&m->area, t, i) + off, target, k,
                       rd->dt);
}

/* one reduction, result at rank root (or every rank: root < 0) */
static int reduce_steps(mca_coll_ivshmem_module_t *m, const civ_red_t *rd,
                        int root)
{
    mca_coll_ivshmem_component_t *cc = &mca_coll_ivshmem_component;
    size_t per_step = m->area.slot / rd->ext;
    size_t bytes = rd->count * rd->ext;
    bool split = root < 0 ? bytes >= cc->reduce_split
                          : bytes > cc->reduce_root_max;
    uint32_t folder = root < 0 ? 0 : (uint32_t)root;
    for (size_t e0 = 0; e0 < rd->count; e0 += per_step) {
        size_t k = rd->count - e0 < per_step ? rd->count - e0 : per_step;
        uint64_t t;
        CHECK(civ_step_begin(m, &t));
        memcpy(civ_slot(&m->area, t, m->me), rd->in + e0 * rd->ext,
               k * rd->ext);
        char *result = civ_slot(&m->area, t, m->n);
        if (!split) {
            if (m->me == folder) {
                CHECK(civ_wait_all(m, t, CIV_ARRIVED));
                /* a reduce's root folds straight into its buffer */
                fold(m, rd, t, 0, k, root < 0 ? result : rd->out + e0 * rd->ext);
                if (root >= 0) {
                    CHECK(civ_post(m, t, CIV_DONE));
                    continue;
                }
                CHECK(civ_post(m, t, CIV_REDUCED));
            } else if (root >= 0) {
                /* input given, reads nothing */
                CHECK(civ_post(m, t, CIV_DONE));
                continue;
            } else {
                CHECK(civ_post(m, t, CIV_ARRIVED));
                CHECK(civ_wait_one(m, folder, t, CIV_REDUCED));
                civ_learn(m, t);
            }
        } else {
            CHECK(civ_post(m, t, CIV_ARRIVED));
            CHECK(civ_wait_all(m, t, CIV_ARRIVED));
            size_t lo = k * m->me / m->n, hi = k * (m->me + 1) / m->n;
            fold(m, rd, t, lo, hi - lo, result + lo * rd->ext);
            if (root >= 0 && m->me != (uint32_t)root) {
                CHECK(civ_post(m, t, CIV_DONE));
                continue;
            }
            CHECK(civ_post(m, t, CIV_REDUCED));
            CHECK(civ_wait_all(m, t, CIV_REDUCED));
        }
        memcpy(rd->out + e0 * rd->ext, result, k * rd->ext);
        CHECK(civ_post(m, t, CIV_DONE));
    }
    return OMPI_SUCCESS;
}

int civ_reduce(const void *sbuf, void *rbuf, int count, ompi_datatype_t *dt,
               ompi_op_t *op, int root, ompi_communicator_t *comm,
               mca_coll_base_module_t *module)
{
    mca_coll_ivshmem_module_t *m = MOD(module);
    civ_red_t rd;
    int rc;
    bool mine = ompi_comm_rank(comm) == root;
    if (count == 0)
        return OMPI_SUCCESS;
    bool fits = red_init(&rd, sbuf, rbuf, count, dt, op, mine);
    if (!take(m, CIV_REDUCE, fits ? rd.count * rd.ext : 0, fits, &rc))
        return m->prev.reduce(sbuf, rbuf, count, dt, op, root, comm,
                              m->prev.reduce_module);
    CHECK(rc);
    return reduce_steps(m, &rd, root);
}

int civ_allreduce(const void *sbuf, void *rbuf, int count,
                  ompi_datatype_t *dt, ompi_op_t *op,
                  ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_ivshmem_module_t *m = MOD(module);
    civ_red_t rd;
    int rc;
    if (count == 0)
        return OMPI_SUCCESS;
    bool fits = red_init(&rd, sbuf, rbuf, count, dt, op, true);
    if (!take(m, CIV_ALLREDUCE, fits ? rd.count * rd.ext : 0, fits, &rc))
        return m->prev.allreduce(sbuf, rbuf, count, dt, op, comm,
                                 m->prev.allreduce_module);
    CHECK(rc);
    return reduce_steps(m, &rd, -1);
}

/* Direct reads: where every rank's source is region memory (the region
 * heap, MPI_Alloc_mem), ranks read their data straight from the peers'
 * buffers (one copy, no slots) instead of through the slots (two). Each
 * rank publishes its source's region offset in one step (UINT64_MAX: not
 * region memory, not contiguous, or no source) and reads every rank's
 * offset once into private memory; all of them valid, every rank reads
 * directly, otherwise every rank, having read the same offsets, takes the
 * other path. An offset is untrusted: it is read only where coll_map finds
 * the range in memory of the publisher's live lease, and a bad one ends
 * the collective with an error. A rank's source is the user's again once
 * every rank has posted that it is done reading. */
typedef struct civ_direct {
    int kind;       /* CIV_ALLGATHER, CIV_ALLTOALL */
    civ_buf_t *out; /* the output, staged while reading directly */
    uint64_t *offs; /* by rank: its source's region offset */
    uint64_t step;  /* the publishing step; 0 until published */
    bool all;       /* every rank published one: read directly */
} civ_direct_t;

#define CIV_DIRECT_BACKOFF_MAX 64u

/* Whether this call tries direct reads: after a miss, jobs whose buffers
 * are not region memory (no heap) pay the exchange step once in up to
 * CIV_DIRECT_BACKOFF_MAX calls, not at every call. */
static bool direct_try(mca_coll_ivshmem_module_t *m, int kind)
{
    if (m->direct_skip[kind] == 0)
        return true;
    m->direct_skip[kind]--;
    return false;
}

static void direct_outcome(mca_coll_ivshmem_module_t *m, int kind, bool hit)
{
    uint32_t *b = &m->direct_backoff[kind];
    if (hit)
        *b = 0;
    else if (*b == 0)
        *b = 1;
    else if (*b < CIV_DIRECT_BACKOFF_MAX)
        *b *= 2;
    m->direct_skip[kind] = *b;
}

/* Publishes src (NULL: none) and reads every rank's offset; with direct
 * reads (d->all), the output is ready to be written. */
static int direct_begin(mca_coll_ivshmem_module_t *m, int kind,
                        const void *src, size_t bytes, civ_buf_t *out,
                        civ_direct_t *d)
{
    uint64_t mine = UINT64_MAX;
    *d = (civ_direct_t){kind, out, NULL, 0, false};
    d->offs = malloc(m->n * sizeof(*d->offs)); /* without: publish none */
    if (d->offs && src)
        mine = m->btl->coll_offset(src, bytes);
    if (mine == UINT64_MAX)
        opal_output_verbose(2, mca_coll_ivshmem_component.output,
                            "coll ivshmem: rank %u: %s source %p is not "
                            "contiguous region memory: no direct read",
                            m->me,
                            kind == CIV_ALLTOALL ? "alltoall" : "allgather",
                            src);
    uint64_t t;
    int rc = civ_step_begin(m, &t);
    if (rc != OMPI_SUCCESS)
        return rc;
    memcpy(civ_slot(&m->area, t, m->me), &mine, sizeof(mine));
    if ((rc = civ_post(m, t, CIV_ARRIVED)) != OMPI_SUCCESS)
        return rc;
    d->step = t; /* posted: direct_end posts DONE */
    if ((rc = civ_wait_all(m, t, CIV_ARRIVED)) != OMPI_SUCCESS)
        return rc;
    d->all = d->offs != NULL;
    for (uint32_t j = 0; j < m->n && d->all; j++) {
        memcpy(&d->offs[j], civ_slot(&m->area, d->step, j), sizeof(d->offs[j]));
        d->all = d->offs[j] != UINT64_MAX;
    }
    return d->all ? civ_buf_stage(out, false) : OMPI_SUCCESS;
}

/* copies len bytes at `at` of rank j's published source of `span` bytes,
 * checked against j's lease before and after the copy (coll_ivshmem_read.h) */
static int direct_read(mca_coll_ivshmem_module_t *m, const civ_direct_t *d,
                       uint32_t j, size_t span, size_t at, void *dst,
                       size_t len)
{
    switch (civ_read_peer(m->btl->coll_map, memcpy, &m->ids[j], d->offs[j],
                          span, at, dst, len)) {
    case CIV_READ_OK:
        return OMPI_SUCCESS;
    case CIV_READ_REFUSED:
        opal_output(0, "coll ivshmem: %s: rank %u published a buffer [%llu, "
                       "+%zu) that is not its region memory: the %s fails",
                    m->comm->c_name, j, (unsigned long long)d->offs[j], span,
                    d->kind == CIV_ALLTOALL ? "alltoall" : "allgather");
        return OMPI_ERR_BAD_PARAM;
    case CIV_READ_LOST:
    default:
        opal_output(0, "coll ivshmem: %s: rank %u's lease on the region ended "
                       "while rank %u copied its buffer: the bytes may be "
                       "another process' memory, the %s fails",
                    m->comm->c_name, j, m->me,
                    d->kind == CIV_ALLTOALL ? "alltoall" : "allgather");
        return OMPI_ERR_UNREACH;
    }
}

/* Done reading (rc: how the reads went); with direct reads, waits until
 * every rank is done with this rank's source and writes the output back.
 * *direct: whether the collective was done here. */
static int direct_end(mca_coll_ivshmem_module_t *m, civ_direct_t *d, int rc,
                      bool *direct)
{
    if (d->step) { /* reads nothing more */
        int posted = civ_post(m, d->step, CIV_DONE);
        if (rc == OMPI_SUCCESS)
            rc = posted;
    }
    if (d->all && rc == OMPI_SUCCESS)
        rc = civ_wait_all(m, d->step, CIV_DONE);
    free(d->offs);
    direct_outcome(m, d->kind, d->all);
    *direct = d->all;
    if (d->all) {
        civ_buf_unstage(d->out, rc == OMPI_SUCCESS);
        m->direct[d->kind]++;
    }
    return rc;
}

/* Alltoall above alltoall_max: each rank's source is its whole send
 * buffer; rank i reads rank i+k's buffer in round k, so each buffer has
 * one reader at a time, not all of them at once. */
static int alltoall_direct(mca_coll_ivshmem_module_t *m, const void *sbuf,
                           int scount, ompi_datatype_t *sdt, civ_buf_t *out,
                           size_t blk, bool *direct)
{
    civ_direct_t d;
    const void *src = NULL;
    if (sbuf != MPI_IN_PLACE) {
        civ_buf_t in;
        civ_buf_init(&in, sbuf, (size_t)scount * m->n, sdt);
        if (in.contig && in.bytes == out->bytes)
            src = in.base;
    }
    int rc = direct_begin(m, CIV_ALLTOALL, src, out->bytes, out, &d);
    for (uint32_t k = 0; k < m->n && d.all && rc == OMPI_SUCCESS; k++) {
        uint32_t j = (m->me + k) % m->n;
        rc = direct_read(m, &d, j, out->bytes, m->me * blk,
                         out->base + j * blk, blk);
    }
    return direct_end(m, &d, rc, direct);
}

/* Allgather from allgather_direct_min bytes a rank: each rank's source is
 * its send buffer (in place: its own block of the output); rank i reads
 * rank i+k's block in round k. */
static int allgather_direct(mca_coll_ivshmem_module_t *m, const void *sbuf,
                            int scount, ompi_datatype_t *sdt, civ_buf_t *out,
                            size_t blk, bool *direct)
{
    civ_direct_t d;
    bool in_place = sbuf == MPI_IN_PLACE;
    const void *src = NULL;
    if (in_place) {
        if (out->contig)
            src = out->base + m->me * blk;
    } else {
        civ_buf_t in;
        civ_buf_init(&in, sbuf, (size_t)scount, sdt);
        if (in.contig && in.bytes == blk)
            src = in.base;
    }
    /* in place, the output is contiguous: not staged */
    int rc = direct_begin(m, CIV_ALLGATHER, src, blk, out, &d);
    for (uint32_t k = 0; k < m->n && d.all && rc == OMPI_SUCCESS; k++) {
        uint32_t j = (m->me + k) % m->n;
        if (j != m->me || !in_place)
            rc = direct_read(m, &d, j, blk, 0, out->base + j * blk, blk);
    }
    return direct_end(m, &d, rc, direct);
}

int civ_allgather(const void *sbuf, int scount, ompi_datatype_t *sdt,
                  void *rbuf, int rcount, ompi_datatype_t *rdt,
                  ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_ivshmem_module_t *m = MOD(module);
    bool in_place = sbuf == MPI_IN_PLACE;
    civ_buf_t in, out;
    civ_buf_init(&out, rbuf, (size_t)rcount * m->n, rdt);
    size_t blk = out.bytes / m->n; /* every rank's block, packed */
    int rc;
    if (blk == 0)
        return OMPI_SUCCESS;
    if (!take(m, CIV_ALLGATHER, out.bytes, true, &rc))
        return m->prev.allgather(sbuf, scount, sdt, rbuf, rcount, rdt, comm,
                                 m->prev.allgather_module);
    CHECK(rc);
    unsigned dmin = mca_coll_ivshmem_component.allgather_direct_min;
    if (dmin && blk >= dmin && direct_try(m, CIV_ALLGATHER)) {
        bool direct;
        CHECK(allgather_direct(m, sbuf, scount, sdt, &out, blk, &direct));
        if (direct)
            return OMPI_SUCCESS;
    }
    /* in place, my block is already in the output */
    CHECK(civ_buf_stage_io(&in, sbuf, (size_t)scount, sdt, &out, in_place));
    const char *mine = in_place ? out.base + m->me * blk : in.base;
    for (size_t off = 0; off < blk && rc == OMPI_SUCCESS; off += m->area.slot) {
        size_t len = blk - off < m->area.slot ? blk - off : m->area.slot;
        uint64_t t;
        rc = civ_step_begin(m, &t);
        if (rc != OMPI_SUCCESS)
            break;
        memcpy(civ_slot(&m->area, t, m->me), mine + off, len);
        rc = civ_post(m, t, CIV_ARRIVED);
        if (rc != OMPI_SUCCESS)
            break;
        rc = civ_wait_all(m, t, CIV_ARRIVED);
        if (rc != OMPI_SUCCESS)
            break;
        for (uint32_t j = 0; j < m->n; j++)
            if (j != m->me || !in_place)
                memcpy(out.base + j * blk + off, civ_slot(&m->area, t, j), len);
        rc = civ_post(m, t, CIV_DONE);
    }
    civ_buf_unstage_io(&in, &out, in_place, rc == OMPI_SUCCESS);
    return rc;
}

int civ_alltoall(const void *sbuf, int scount, ompi_datatype_t *sdt,
                 void *rbuf, int rcount, ompi_datatype_t *rdt,
                 ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_ivshmem_module_t *m = MOD(module);
    bool in_place = sbuf == MPI_IN_PLACE;
    civ_buf_t in, out;
    civ_buf_init(&out, rbuf, (size_t)rcount * m->n, rdt);
    size_t blk = out.bytes / m->n; /* bytes a pair, packed */
    int rc;
    if (blk == 0)
        return OMPI_SUCCESS;
    unsigned limit = mca_coll_ivshmem_component.alltoall_max;
    if (!take(m, CIV_ALLTOALL, out.bytes, true, &rc))
        return m->prev.alltoall(sbuf, scount, sdt, rbuf, rcount, rdt, comm,
                                m->prev.alltoall_module);
    CHECK(rc);
    if (limit && blk > limit) {
        bool direct = false;
        if (direct_try(m, CIV_ALLTOALL))
            CHECK(alltoall_direct(m, sbuf, scount, sdt, &out, blk, &direct));
        if (direct)
            return OMPI_SUCCESS;
        m->count[CIV_ALLTOALL]--; /* not through the region after all */
        m->fallback[CIV_ALLTOALL]++;
        return m->prev.alltoall(sbuf, scount, sdt, rbuf, rcount, rdt, comm,
                                m->prev.alltoall_module);
    }
    /* in place, the blocks to send are the output's own: each step reads
     * its range of every block before it overwrites that range */
    CHECK(civ_buf_stage_io(&in, sbuf, (size_t)scount * m->n, sdt, &out,
                           in_place));
    const char *src = in_place ? out.base : in.base;
    /* per destination and step; the area exists now (its first use may
     * be this call); max_ranks keeps it at 64 bytes or more */
    size_t per = m->area.slot / m->n;
    for (size_t off = 0; off < blk && rc == OMPI_SUCCESS; off += per) {
        size_t len = blk - off < per ? blk - off : per;
        uint64_t t;
        rc = civ_step_begin(m, &t);
        if (rc != OMPI_SUCCESS)
            break;
        char *mine = civ_slot(&m->area, t, m->me);
        for (uint32_t j = 0; j < m->n; j++)
            memcpy(mine + j * len, src + j * blk + off, len);
        rc = civ_post(m, t, CIV_ARRIVED);
        if (rc != OMPI_SUCCESS)
            break;
        rc = civ_wait_all(m, t, CIV_ARRIVED);
        if (rc != OMPI_SUCCESS)
            break;
        for (uint32_t j = 0; j < m->n; j++)
            memcpy(out.base + j * blk + off,
                   civ_slot(&m->area, t, j) + m->me * len, len);
        rc = civ_post(m, t, CIV_DONE);
    }
    civ_buf_unstage_io(&in, &out, in_place, rc == OMPI_SUCCESS);
    return rc;
}
