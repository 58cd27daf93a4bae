/*
 * coll ivshmem: communicators that span regions (several hosts, or ranks
 * without a region). Two levels, made at the first collective:
 *   local    the ranks of my region (ranks in one VM included), where the
 *            flat module of coll_ivshmem_ops.c runs;
 *   leaders  the lowest rank of each region group, over the network (the
 *            BTL's verbs route, or tcp) with the modules Open MPI picks.
 * Groups are numbered by their lowest rank, so group g's leader is rank g
 * of the leaders' communicator and every member's local rank follows its
 * rank order.
 *
 * Reductions go two levels only for commutative operations (a level per
 * group breaks rank order otherwise); others, and alltoall (no leader
 * phase to gain), stay with the modules below.
 */
#include "coll_ivshmem.h"

#include "ompi/constants.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/op/op.h"
#include "ompi/mca/coll/base/coll_tags.h"
#include "ompi/mca/pml/pml.h"

#include <limits.h>
#include <string.h>


static int local_rank_of(const mca_coll_ivshmem_module_t *m, uint32_t i)
{
    int k = 0;
    for (uint32_t j = 0; j < i; j++)
        k += m->group_of[j] == m->group_of[i];
    return k;
}

static int group_size(const mca_coll_ivshmem_module_t *m, int g)
{
    int k = 0;
    for (uint32_t j = 0; j < m->n; j++)
        k += m->group_of[j] == g;
    return k;
}

/* Makes the two communicators. ompi_comm_split is itself a collective
 * over comm: meanwhile our entry points hand comm's collectives to the
 * modules below (CIV_SETUP_SPLITTING). comm's table of collectives stays
 * as the base set it: a module below may change its own entries there
 * and count references by them (Open MPI 5's han, falling back, takes
 * itself out of every entry that names it and drops a reference for
 * each), so entries we swapped in and back would leave it released once
 * too often and freed while in use. */
static int hier_setup(mca_coll_ivshmem_module_t *m)
{
    if (m->setup == CIV_SETUP_OK)
        return OMPI_SUCCESS;
    if (m->setup == CIV_SETUP_FAILED)
        return OMPI_ERROR;
    ompi_communicator_t *comm = m->comm;
    m->leader_of_group = malloc((size_t)m->ngroups * sizeof(int));
    if (!m->leader_of_group)
        return OMPI_ERR_OUT_OF_RESOURCE;
    for (int g = 0; g < m->ngroups; g++)
        m->leader_of_group[g] = -1;
    for (uint32_t i = 0; i < m->n; i++)
        if (m->leader_of_group[m->group_of[i]] < 0)
            m->leader_of_group[m->group_of[i]] = (int)i;
    bool leader = m->leader_of_group[m->my_group] == (int)m->me;
    m->setup = CIV_SETUP_SPLITTING;
    int rc = ompi_comm_split(comm, m->my_group, (int)m->me, &m->local, false);
    if (rc == OMPI_SUCCESS)
        rc = ompi_comm_split(comm, leader ? 0 : MPI_UNDEFINED, (int)m->me,
                             &m->leaders, false);
    if (m->leaders == &ompi_mpi_comm_null.comm)
        m->leaders = NULL;
    m->setup = rc == OMPI_SUCCESS ? CIV_SETUP_OK : CIV_SETUP_FAILED;
    if (rc == OMPI_SUCCESS) {
        char name[MPI_MAX_OBJECT_NAME];
        snprintf(name, sizeof(name), "%.40s/region", comm->c_name);
        ompi_comm_set_name(m->local, name);
    }
    return rc;
}

void civ_hier_release(mca_coll_ivshmem_module_t *m)
{
    if (m->local && m->local != &ompi_mpi_comm_null.comm)
        ompi_comm_free(&m->local);
    if (m->leaders)
        ompi_comm_free(&m->leaders);
    m->local = m->leaders = NULL;
}

/* a collective of sub-communicator c through its own modules */
#define SUB(c, api, ...) (c)->c_coll->coll_##api(__VA_ARGS__, (c), (c)->c_coll->coll_##api##_module)

int civ_hier_barrier(ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_ivshmem_module_t *m = MOD(module);
    if (m->setup == CIV_SETUP_SPLITTING)
        return m->prev.barrier(comm, m->prev.barrier_module);
    CHECK(hier_setup(m));
    m->count[CIV_BARRIER]++;
    CHECK(m->local->c_coll->coll_barrier(m->local,
                                         m->local->c_coll->coll_barrier_module));
    if (m->leaders)
        CHECK(m->leaders->c_coll->coll_barrier(
            m->leaders, m->leaders->c_coll->coll_barrier_module));
    return m->local->c_coll->coll_barrier(m->local,
                                          m->local->c_coll->coll_barrier_module);
}

int civ_hier_bcast(void *buf, int count, ompi_datatype_t *dt, int root,
                   ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_ivshmem_module_t *m = MOD(module);
    if (m->setup == CIV_SETUP_SPLITTING)
        return m->prev.bcast(buf, count, dt, root, comm, m->prev.bcast_module);
    CHECK(hier_setup(m));
    m->count[CIV_BCAST]++;
    int rg = m->group_of[root];
    if (m->my_group == rg)
        CHECK(SUB(m->local, bcast, buf, count, dt,
                  local_rank_of(m, (uint32_t)root)));
    if (m->leaders)
        CHECK(SUB(m->leaders, bcast, buf, count, dt, rg));
    if (m->my_group != rg)
        CHECK(SUB(m->local, bcast, buf, count, dt, 0));
    return OMPI_SUCCESS;
}

/* room for count elements of dt, and the pointer MPI calls use for it */
static char *tmp_alloc(ompi_datatype_t *dt, int count, char **base)
{
    ptrdiff_t lb, ext, tlb, text;
    ompi_datatype_get_extent(dt, &lb, &ext);
    ompi_datatype_get_true_extent(dt, &tlb, &text);
    size_t size = (size_t)text + (count > 1 ? (size_t)(count - 1) * (size_t)ext : 0);
    *base = malloc(size ? size : 1);
    return *base ? *base - tlb : NULL;
}

int civ_hier_reduce(const void *sbuf, void *rbuf, int count,
                    ompi_datatype_t *dt, ompi_op_t *op, int root,
                    ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_ivshmem_module_t *m = MOD(module);
    if (m->setup == CIV_SETUP_SPLITTING)
        return m->prev.reduce(sbuf, rbuf, count, dt, op, root, comm,
                              m->prev.reduce_module);
    if (!ompi_op_is_commute(op)) {
        m->fallback[CIV_REDUCE]++;
        return m->prev.reduce(sbuf, rbuf, count, dt, op, root, comm,
                              m->prev.reduce_module);
    }
    CHECK(hier_setup(m));
    m->count[CIV_REDUCE]++;
    bool me_root = (int)m->me == root;
    const void *in = sbuf == MPI_IN_PLACE ? rbuf : sbuf;
    int rg = m->group_of[root];
    int rg_leader = m->leader_of_group[rg];
    if (!m->leaders) /* a member: its input goes to its leader */
        CHECK(SUB(m->local, reduce, in, NULL, count, dt, op, 0));
    else {
        /* a leader: its group's sum, then the leaders' at rg's leader */
        char *base = NULL, *acc = me_root ? (char *)rbuf : tmp_alloc(dt, count, &base);
        if (!acc)
            return OMPI_ERR_OUT_OF_RESOURCE;
        int rc = SUB(m->local, reduce,
                     me_root && sbuf == MPI_IN_PLACE ? MPI_IN_PLACE : in, acc,
                     count, dt, op, 0);
        if (rc == OMPI_SUCCESS)
            rc = SUB(m->leaders, reduce,
                     m->my_group == rg ? MPI_IN_PLACE : acc, acc, count, dt,
                     op, rg);
        if (rc == OMPI_SUCCESS && (int)m->me == rg_leader && !me_root)
            rc = MCA_PML_CALL(send(acc, count, dt, root,
                                   MCA_COLL_BASE_TAG_REDUCE,
                                   MCA_PML_BASE_SEND_STANDARD, comm));
        free(base);
        return rc;
    }
    if (me_root) /* a root that is not its group's leader */
        return MCA_PML_CALL(recv(rbuf, count, dt, rg_leader,
                                 MCA_COLL_BASE_TAG_REDUCE, comm,
                                 MPI_STATUS_IGNORE));
    return OMPI_SUCCESS;
}

int civ_hier_allreduce(const void *sbuf, void *rbuf, int count,
                       ompi_datatype_t *dt, ompi_op_t *op,
                       ompi_communicator_t *comm,
                       mca_coll_base_module_t *module)
{
    mca_coll_ivshmem_module_t *m = MOD(module);
    if (m->setup == CIV_SETUP_SPLITTING)
        return m->prev.allreduce(sbuf, rbuf, count, dt, op, comm,
                                 m->prev.allreduce_module);
    if (!ompi_op_is_commute(op)) {
        m->fallback[CIV_ALLREDUCE]++;
        return m->prev.allreduce(sbuf, rbuf, count, dt, op, comm,
                                 m->prev.allreduce_module);
    }
    CHECK(hier_setup(m));
    m->count[CIV_ALLREDUCE]++;
    if (m->leaders) {
        CHECK(SUB(m->local, reduce, sbuf, rbuf, count, dt, op, 0));
        CHECK(SUB(m->leaders, allreduce, MPI_IN_PLACE, rbuf, count, dt, op));
    } else {
        CHECK(SUB(m->local, reduce, sbuf == MPI_IN_PLACE ? rbuf : sbuf, NULL,
                  count, dt, op, 0));
    }
    return SUB(m->local, bcast, rbuf, count, dt, 0);
}

int civ_hier_allgather(const void *sbuf, int scount, ompi_datatype_t *sdt,
                       void *rbuf, int rcount, ompi_datatype_t *rdt,
                       ompi_communicator_t *comm,
                       mca_coll_base_module_t *module)
{
    mca_coll_ivshmem_module_t *m = MOD(module);
    if (m->setup == CIV_SETUP_SPLITTING)
        return m->prev.allgather(sbuf, scount, sdt, rbuf, rcount, rdt, comm,
                                 m->prev.allgather_module);
    bool in_place = sbuf == MPI_IN_PLACE;
    civ_buf_t in, out;
    civ_buf_init(&out, rbuf, (size_t)rcount * m->n, rdt);
    size_t b = out.bytes / m->n; /* every rank's block, packed */
    if (b == 0)
        return OMPI_SUCCESS;
    if (out.bytes > INT_MAX) {
        m->fallback[CIV_ALLGATHER]++;
        return m->prev.allgather(sbuf, scount, sdt, rbuf, rcount, rdt, comm,
                                 m->prev.allgather_module);
    }
    CHECK(hier_setup(m));
    m->count[CIV_ALLGATHER]++;
    /* packed blocks: my group's, then all in group order */
    int gs = group_size(m, m->my_group);
    char *all = malloc(out.bytes);
    int *counts = malloc((size_t)m->ngroups * 2 * sizeof(int));
    int rc = OMPI_ERR_OUT_OF_RESOURCE;
    bool staged = false;
    if (!all || !counts)
        goto out;
    rc = civ_buf_stage_io(&in, sbuf, (size_t)scount, sdt, &out, in_place);
    if (rc != OMPI_SUCCESS)
        goto out;
    staged = true;
    const char *mine = in_place ? out.base + m->me * b : in.base;
    int *displs = counts + m->ngroups;
    for (int g = 0, d = 0; g < m->ngroups; g++) {
        counts[g] = group_size(m, g) * (int)b;
        displs[g] = d;
        d += counts[g];
    }
    char *grp = all + displs[m->my_group];
    rc = SUB(m->local, allgather, mine, (int)b, MPI_BYTE, grp, (int)b,
             MPI_BYTE);
    if (rc == OMPI_SUCCESS && m->leaders)
        rc = SUB(m->leaders, allgatherv, MPI_IN_PLACE, gs * (int)b, MPI_BYTE,
                 all, counts, displs, MPI_BYTE);
    if (rc == OMPI_SUCCESS)
        rc = SUB(m->local, bcast, all, (int)out.bytes, MPI_BYTE, 0);
    if (rc != OMPI_SUCCESS)
        goto out;
    int *seen = counts; /* reused: members placed per group so far */
    for (int g = 0; g < m->ngroups; g++)
        seen[g] = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        int g = m->group_of[i];
        memcpy(out.base + i * b, all + displs[g] + (size_t)seen[g]++ * b, b);
    }
out:
    if (staged)
        civ_buf_unstage_io(&in, &out, in_place, rc == OMPI_SUCCESS);
    free(all);
    free(counts);
    return rc;
}
