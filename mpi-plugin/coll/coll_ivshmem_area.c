/*
 * coll ivshmem: the shared area of one communicator, and the step
 * counters every algorithm synchronises with.
 *
 * Setup (at the communicator's first collective, by every rank): rank 0
 * allocates the area from the region under its own lease and zeroes the
 * counters, then broadcasts (offset, ranks, slot size) with the modules
 * below us. Each rank checks what it got: the numbers against its own
 * view, the range against rank 0's lease (every chunk of it must be rank
 * 0's memory while rank 0 is alive). Then one allreduce makes the outcome
 * common: if any rank cannot use the area, none does, and every collective
 * of the communicator goes to the modules below.
 *
 * Steps: every collective is cut into steps (one slot of data per rank at
 * most); step numbers are the same on every rank because collectives on a
 * communicator are called in the same order. Rank i announces progress by
 * storing 4 * step + phase in its own counter (release); others load it
 * (acquire) and compare. Only the counters are read from the area as
 * control data; a counter's value decides when to read, never where: every
 * address comes from our own layout.
 *
 * Release: rank 0 gives the area back when the communicator is freed and
 * every rank is done with the last step; otherwise later (civ_area_reap).
 *
 * Buffers alternate between two sets (even and odd steps), so a rank may
 * refill its slot for step t as soon as every rank is done with step t - 2.
 * Most algorithms learn that for free (a rank that arrived at t - 1 was
 * done with t - 2); only then is no counter read again.
 */
#include "coll_ivshmem.h"

#include "ompi/constants.h"
#include "ompi/datatype/ompi_datatype.h"
#include "opal/runtime/opal_progress.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CIV_MAGIC 0x4c4c4f434d485649ull /* "IVHMCOLL" */
#define CIV_SLOT_MIN 4096u
#define CIV_SLOT_MAX (64u << 20)

/* what rank 0 broadcasts at setup */
typedef struct civ_setup_msg {
    uint64_t magic;
    uint64_t off; /* UINT64_MAX: rank 0 has no area */
    uint32_t n;
    uint32_t slot;
} civ_setup_msg_t;

static uint64_t area_size(uint32_t n, uint32_t slot)
{
    return (uint64_t)n * sizeof(civ_ctl_t) + 2ull * (n + 1) * slot;
}

static void area_place(civ_area_t *a, char *base, uint64_t off, uint32_t n,
                       uint32_t slot, bool owner)
{
    a->base = base;
    a->off = off;
    a->n = n;
    a->slot = slot;
    a->size = area_size(n, slot);
    a->ctl = (civ_ctl_t *)base;
    a->buf = base + (uint64_t)n * sizeof(civ_ctl_t);
    a->owner = owner;
}

/* the outcome of rank 0's broadcast here: 1 usable, 0 not (with a reason
 * at verbosity 1) */
static int area_accept(mca_coll_ivshmem_module_t *m, const civ_setup_msg_t *msg)
{
    mca_coll_ivshmem_component_t *cc = &mca_coll_ivshmem_component;
    const char *why = NULL;
    void *base = NULL;
    if (msg->magic != CIV_MAGIC)
        why = "the setup message is not ours";
    else if (msg->off == UINT64_MAX)
        why = "rank 0 could not allocate the area (region full or gone)";
    else if (msg->n != m->n)
        why = "rank 0 counts another number of ranks";
    else if (msg->slot < CIV_SLOT_MIN || msg->slot > CIV_SLOT_MAX ||
             msg->slot % 64)
        why = "rank 0's slot size is out of range";
    else if (!m->btl || !m->btl->coll_map)
        why = "this rank has no region";
    else if (m->area.owner)
        return 1;
    else if (m->btl->coll_map(&m->ids[0], msg->off,
                              area_size(msg->n, msg->slot), &base) != IVSHM_OK)
        why = "the area is not rank 0's memory in our region";
    if (why) {
        opal_output_verbose(1, cc->output,
                            "coll ivshmem: %s: rank %u: cannot use the "
                            "region: %s",
                            m->comm->c_name, m->me, why);
        return 0;
    }
    area_place(&m->area, base, msg->off, msg->n, msg->slot, false);
    return 1;
}

int civ_area_setup(mca_coll_ivshmem_module_t *m)
{
    mca_coll_ivshmem_component_t *cc = &mca_coll_ivshmem_component;
    ompi_communicator_t *comm = m->comm;
    civ_setup_msg_t msg = {CIV_MAGIC, UINT64_MAX, m->n, cc->slot_size};
    civ_area_reap(false); /* room from communicators freed earlier */
    if (m->me == 0 && m->btl && m->btl->coll_alloc) {
        uint64_t size = area_size(m->n, cc->slot_size), off;
        char *p = m->btl->coll_alloc(size, &off);
        if (p) {
            /* counters start at 0, below every step's values; the
             * broadcast below publishes them (its transport's release) */
            memset(p, 0, (size_t)m->n * sizeof(civ_ctl_t));
            area_place(&m->area, p, off, m->n, cc->slot_size, true);
            msg.off = off;
        }
    }
    int rc = m->prev.bcast(&msg, sizeof(msg), MPI_BYTE, 0, comm,
                           m->prev.bcast_module);
    if (rc != OMPI_SUCCESS)
        return rc;
    int ok = area_accept(m, &msg), all_ok = 0;
    rc = m->prev.allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm,
                           m->prev.allreduce_module);
    if (rc != OMPI_SUCCESS)
        return rc;
    if (!all_ok) {
        if (m->area.owner)
            m->btl->coll_free(m->area.base);
        memset(&m->area, 0, sizeof(m->area));
        m->setup = CIV_SETUP_FAILED;
        if (m->me == 0)
            opal_output_verbose(1, cc->output,
                                "coll ivshmem: %s: not every rank can use "
                                "the region: its collectives stay with the "
                                "modules below",
                                comm->c_name);
        return OMPI_SUCCESS;
    }
    m->step = 0;
    m->all_done = 0;
    civ_hold_init(&m->hold, &m->ids[0], m->area.off, m->area.size,
                  m->btl->coll_lease_ms());
    m->hold_said = false;
    m->setup = CIV_SETUP_OK;
    opal_output_verbose(2, cc->output,
                        "coll ivshmem: %s: %u ranks, area of %llu bytes at "
                        "region offset %llu",
                        comm->c_name, m->n, (unsigned long long)m->area.size,
                        (unsigned long long)m->area.off);
    return OMPI_SUCCESS;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline bool reached(const civ_area_t *a, uint32_t i, uint64_t want)
{
    /* acquire: pairs with the release in civ_post, so the rank's data of
     * the step is visible once its counter is */
    uint64_t v = atomic_load_explicit(&a->ctl[i].state, memory_order_acquire);
    return (int64_t)(v - want) >= 0;
}

/* ok: rank 0 still holds the area (civ_hold_check); else the collective
 * fails, with one message per communicator */
static int area_held(mca_coll_ivshmem_module_t *m, bool ok)
{
    if (ok)
        return OMPI_SUCCESS;
    if (!m->hold_said)
        opal_output(0,
                    "coll ivshmem: %s: rank 0's lease on the region ended "
                    "(the communicator's area [%llu, +%llu) is no longer its "
                    "memory): rank %u writes nothing more into it, the "
                    "collective fails",
                    m->comm->c_name, (unsigned long long)m->area.off,
                    (unsigned long long)m->area.size, m->me);
    m->hold_said = true;
    return OMPI_ERR_UNREACH;
}

/* Waits for rank i, letting the rest of MPI progress meanwhile; a rank
 * whose lease ended (killed, its VM gone) ends the wait with an error. */
static int wait_slow(mca_coll_ivshmem_module_t *m, uint32_t i, uint64_t want)
{
    const civ_area_t *a = &m->area;
    uint64_t spins = 0, next_check = 0;
    while (!reached(a, i, want)) {
        if (++spins % 128)
            continue;
        opal_progress();
        if (spins % 8192)
            continue;
        uint64_t t = now_ms();
        if (next_check == 0) {
            next_check = t + 200;
        } else if (t >= next_check) {
            next_check = t + 1000;
            if (!m->btl->r || !m->btl->coll_alive(&m->ids[i])) {
                opal_output(0,
                            "coll ivshmem: %s: rank %u is gone (its lease "
                            "on the region ended) while rank %u waited for "
                            "it in a collective: the collective fails",
                            m->comm->c_name, i, m->me);
                return OMPI_ERR_UNREACH;
            }
        }
    }
    /* the wait may have outlasted the last check: stores follow it */
    return area_held(m, civ_hold_check(&m->hold, m->btl->coll_map));
}

int civ_wait_one(mca_coll_ivshmem_module_t *m, uint32_t i, uint64_t step,
                 unsigned phase)
{
    uint64_t want = CIV_STATE(step, phase);
    if (reached(&m->area, i, want))
        return OMPI_SUCCESS;
    return wait_slow(m, i, want);
}

void civ_learn(mca_coll_ivshmem_module_t *m, uint64_t step)
{
    /* a rank posts a phase of step only after it is done with step - 1 */
    if (step >= 1 && m->all_done < step - 1)
        m->all_done = step - 1;
}

int civ_wait_all(mca_coll_ivshmem_module_t *m, uint64_t step, unsigned phase)
{
    for (uint32_t i = 0; i < m->n; i++) {
        if (i == m->me)
            continue;
        int rc = civ_wait_one(m, i, step, phase);
        if (rc != OMPI_SUCCESS)
            return rc;
    }
    civ_learn(m, phase == CIV_DONE ? step + 1 : step);
    return OMPI_SUCCESS;
}

int civ_step_begin(mca_coll_ivshmem_module_t *m, uint64_t *step)
{
    uint64_t t = ++m->step;
    m->steps++;
    *step = t;
    if (t >= 3 && m->all_done < t - 2) {
        m->scans++;
        CHECK(civ_wait_all(m, t - 2, CIV_DONE));
    }
    /* the step's stores into the slots follow */
    return area_held(m, civ_hold_check(&m->hold, m->btl->coll_map));
}

int civ_post(mca_coll_ivshmem_module_t *m, uint64_t step, unsigned phase)
{
    /* release: pairs with the acquire in reached(); the step's data this
     * rank wrote is published with it */
    return area_held(m, civ_hold_post(&m->hold, m->btl->coll_map,
                                      &m->area.ctl[m->me].state,
                                      CIV_STATE(step, phase)));
}

/* Areas whose communicator was freed while some rank was still in its
 * last step (a broadcast's root leaves first): given back once every rank
 * is done, checked at each later setup and release. Waiting for them at
 * the free instead could deadlock a program in which that rank first waits
 * for a message the freeing rank sends after the free. What is left at
 * the end goes back with the lease, when the BTL detaches. */
typedef struct civ_parked {
    struct civ_parked *next;
    mca_btl_ivshmem_component_t *btl;
    char *base;
    const civ_ctl_t *ctl;
    uint32_t n;
    uint64_t step;
} civ_parked_t;
static civ_parked_t *parked;
static pthread_mutex_t parked_lock = PTHREAD_MUTEX_INITIALIZER;

static bool all_done(const civ_ctl_t *ctl, uint32_t n, uint64_t step)
{
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v = atomic_load_explicit(&ctl[i].state, memory_order_acquire);
        if ((int64_t)(v - CIV_STATE(step, CIV_DONE)) < 0)
            return false;
    }
    return true;
}

void civ_area_reap(bool last)
{
    pthread_mutex_lock(&parked_lock);
    for (civ_parked_t **pp = &parked; *pp;) {
        civ_parked_t *p = *pp;
        /* the region gone: so are the areas (our lease ended); at the
         * last call the lease takes what is left */
        bool gone = !p->btl->r || last;
        if (!gone && !all_done(p->ctl, p->n, p->step)) {
            pp = &p->next;
            continue;
        }
        if (p->btl->r && all_done(p->ctl, p->n, p->step))
            p->btl->coll_free(p->base);
        *pp = p->next;
        free(p);
    }
    pthread_mutex_unlock(&parked_lock);
}

void civ_area_release(mca_coll_ivshmem_module_t *m)
{
    civ_area_t *a = &m->area;
    if (m->setup == CIV_SETUP_OK && a->owner && m->btl->r) {
        if (all_done(a->ctl, a->n, m->step)) {
            m->btl->coll_free(a->base);
        } else {
            civ_parked_t *p = malloc(sizeof(*p));
            if (p) { /* else it stays with our lease until the end */
                *p = (civ_parked_t){NULL, m->btl, a->base, a->ctl, a->n, m->step};
                pthread_mutex_lock(&parked_lock);
                p->next = parked;
                parked = p;
                pthread_mutex_unlock(&parked_lock);
            }
        }
    }
    memset(a, 0, sizeof(*a));
    civ_area_reap(false);
}
