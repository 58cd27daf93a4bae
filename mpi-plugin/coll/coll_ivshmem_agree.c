/*
 * coll ivshmem: agreement on the settings that change the protocol
 * (DESIGN.md §3.10). Ranks may be started with different parameters (a
 * per-VM parameter file, `-x OMPI_MCA_...` for some ranks): two ranks that
 * take different paths for one collective deadlock, or return another
 * collective's data as success.
 *
 * Each process publishes its settings (the values in force after
 * civ_open's checks) in its modex entry when the component opens, before
 * Open MPI's modex exchange. When a communicator is queried, every rank
 * reads every member's entry: the same entries on every rank, so every
 * rank reaches the same verdict without a message, before any function of
 * the communicator is chosen (the choice of which collectives the module
 * takes, and whether it takes the communicator at all, depend on these
 * settings too, so comparing them at the first collective would be late):
 *   - same everywhere: the module works as configured;
 *   - some member has the component off (priority 0, no collective
 *     enabled, no entry: not loaded there): no member takes the
 *     communicator;
 *   - otherwise they differ: every member takes the communicator with a
 *     module that steps aside (every collective to the modules below,
 *     counted as fallbacks), at the lowest priority any member has.
 * Comm rank 0 says why, once per process at verbosity 0 (later
 * communicators at verbosity 1). The verdict itself is Open MPI free
 * (coll_ivshmem_verdict.h); this file reads each member's entry once.
 */
#include "coll_ivshmem.h"

#include "ompi/constants.h"
#include "ompi/proc/proc.h"

#include <stdlib.h>
#include <string.h>

static void my_settings(civ_agree_msg_t *msg)
{
    const mca_coll_ivshmem_component_t *cc = &mca_coll_ivshmem_component;
    memset(msg, 0, sizeof(*msg));
    msg->magic = CIV_AGREE_MAGIC;
    msg->version = CIV_AGREE_VERSION;
    msg->value[AG_PRIORITY] = cc->priority;
    msg->value[AG_ENABLED] = cc->enabled;
    msg->value[AG_SLOT_SIZE] = cc->slot_size;
    msg->value[AG_REDUCE_SPLIT] = cc->reduce_split;
    msg->value[AG_REDUCE_ROOT_MAX] = cc->reduce_root_max;
    msg->value[AG_MAX_BYTES] = (int64_t)cc->max_bytes;
    msg->value[AG_ALLTOALL_MAX] = cc->alltoall_max;
    msg->value[AG_ALLGATHER_DIRECT_MIN] = cc->allgather_direct_min;
    msg->value[AG_MAX_RANKS] = cc->max_ranks;
    msg->value[AG_HIERARCHY] = cc->hierarchy != 0;
}

void civ_agree_publish(void)
{
    mca_coll_ivshmem_component_t *cc = &mca_coll_ivshmem_component;
    civ_agree_msg_t msg;
    int rc;
    my_settings(&msg);
    OPAL_MODEX_SEND(rc, IVSHMEM_PMIX_GLOBAL, &cc->super.collm_version, &msg,
                    sizeof(msg));
    if (rc != OPAL_SUCCESS) /* the others find no entry: none takes ours */
        opal_output_verbose(1, cc->output,
                            "coll ivshmem: cannot publish its settings (%d)",
                            rc);
}

/* reads member i's entry (once) and adds it to the verdict */
static void add_member(ompi_communicator_t *comm, int i, civ_verdict_t *v)
{
    ompi_proc_t *p = ompi_comm_peer_lookup(comm, i);
    civ_agree_msg_t *msg = NULL;
    size_t size = 0;
    int rc = OPAL_ERROR;
    if (p)
        rc = ivshmem_modex_recv_if_posted(
            &mca_coll_ivshmem_component.super.collm_version,
            &p->super.proc_name, (void **)&msg, &size);
    civ_verdict_add(v, rc == OPAL_SUCCESS && msg && size == sizeof(*msg)
                           ? msg : NULL);
    free(msg);
}

/* comm rank 0's one message: at verbosity 0 the first time, 1 after */
static void say(ompi_communicator_t *comm, const char *what)
{
    static bool said;
    mca_coll_ivshmem_component_t *cc = &mca_coll_ivshmem_component;
    if (ompi_comm_rank(comm) != 0)
        return;
    if (!said)
        opal_output(0, "coll ivshmem: %s: %s", comm->c_name, what);
    else
        opal_output_verbose(1, cc->output, "coll ivshmem: %s: %s",
                            comm->c_name, what);
    said = true;
}

enum civ_agreement civ_agree(ompi_communicator_t *comm, int *priority)
{
    int n = ompi_comm_size(comm);
    civ_verdict_t v;
    char why[768];
    civ_verdict_init(&v);
    for (int i = 0; i < n; i++)
        add_member(comm, i, &v);
    enum civ_agreement verdict = civ_verdict(&v, priority, why, sizeof(why));
    if (why[0])
        say(comm, why);
    return verdict;
}
