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
 * communicators at verbosity 1).
 */
#include "coll_ivshmem.h"

#include "ompi/constants.h"
#include "ompi/proc/proc.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define CIV_AGREE_MAGIC 0x45455247u /* "GREE" */
#define CIV_AGREE_VERSION 1u

/* the settings compared, by name: every parameter that changes what a
 * rank does in a collective or whether it takes the communicator; stats
 * and verbose change only what is printed */
enum {
    AG_PRIORITY,
    AG_ENABLED,
    AG_SLOT_SIZE,
    AG_REDUCE_SPLIT,
    AG_REDUCE_ROOT_MAX,
    AG_MAX_BYTES,
    AG_ALLTOALL_MAX,
    AG_ALLGATHER_DIRECT_MIN,
    AG_MAX_RANKS,
    AG_HIERARCHY,
    AG_N
};
static const char *const ag_names[AG_N] = {
    "coll_ivshmem_priority",     "coll_ivshmem_enable (as a bit mask)",
    "coll_ivshmem_slot_size",    "coll_ivshmem_reduce_split",
    "coll_ivshmem_reduce_root_max", "coll_ivshmem_max_bytes",
    "coll_ivshmem_alltoall_max", "coll_ivshmem_allgather_direct_min",
    "coll_ivshmem_max_ranks",    "coll_ivshmem_hierarchy",
};

typedef struct civ_agree_msg {
    uint32_t magic;
    uint32_t version;
    int64_t value[AG_N];
} civ_agree_msg_t;

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

/* what member i published; false: no usable entry */
static bool member_settings(ompi_communicator_t *comm, int i,
                            civ_agree_msg_t *out)
{
    ompi_proc_t *p = ompi_comm_peer_lookup(comm, i);
    civ_agree_msg_t *msg = NULL;
    size_t size = 0;
    int rc;
    if (!p)
        return false;
    OPAL_MODEX_RECV(rc, &mca_coll_ivshmem_component.super.collm_version,
                    &p->super.proc_name, (void **)&msg, &size);
    bool ok = rc == OPAL_SUCCESS && msg && size == sizeof(*msg) &&
              msg->magic == CIV_AGREE_MAGIC &&
              msg->version == CIV_AGREE_VERSION;
    if (ok)
        *out = *msg;
    free(msg);
    return ok;
}

static bool is_off(const civ_agree_msg_t *s)
{
    return s->value[AG_PRIORITY] <= 0 || s->value[AG_ENABLED] == 0;
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
    civ_agree_msg_t first, s;
    char why[768];
    size_t len = 0;
    int lowest = 0, off_at = -1, missing_at = -1;
    int differ_at[AG_N], differ_count[AG_N];
    int64_t differ_value[AG_N];
    bool differ = false;
    for (int k = 0; k < AG_N; k++) {
        differ_at[k] = -1;
        differ_count[k] = 0;
    }
    for (int i = 0; i < n; i++) {
        if (!member_settings(comm, i, i == 0 ? &first : &s)) {
            if (missing_at < 0)
                missing_at = i;
            continue;
        }
        const civ_agree_msg_t *e = i == 0 ? &first : &s;
        if (is_off(e) && off_at < 0)
            off_at = i;
        if (i == 0 || e->value[AG_PRIORITY] < lowest)
            lowest = (int)e->value[AG_PRIORITY];
        if (i == 0 || missing_at == 0)
            continue;
        for (int k = 0; k < AG_N; k++)
            if (e->value[k] != first.value[k]) {
                if (differ_at[k] < 0) {
                    differ_at[k] = i;
                    differ_value[k] = e->value[k];
                }
                differ_count[k]++;
                differ = true;
            }
    }
    if (missing_at >= 0 || off_at >= 0) {
        /* all off: the user's choice, nothing to say */
        bool all_off = missing_at < 0 && is_off(&first);
        for (int i = 1; i < n && all_off; i++)
            all_off = member_settings(comm, i, &s) && is_off(&s);
        if (!all_off) {
            snprintf(why, sizeof(why),
                     "rank %d has coll ivshmem %s while others use it: the "
                     "region collectives step aside on this communicator "
                     "(Open MPI's other components run them all)",
                     missing_at >= 0 ? missing_at : off_at,
                     missing_at >= 0 ? "not loaded (no published settings)"
                                     : "off (priority 0 or nothing enabled)");
            say(comm, why);
        }
        return CIV_AGREE_OFF;
    }
    if (!differ)
        return CIV_AGREE_SAME;
    len = (size_t)snprintf(why, sizeof(why), "ranks disagree on");
    for (int k = 0; k < AG_N && len < sizeof(why); k++) {
        if (differ_at[k] < 0)
            continue;
        len += (size_t)snprintf(why + len, sizeof(why) - len,
                                " %s (rank 0: %lld, rank %d: %lld, %d rank%s "
                                "differ%s from rank 0);",
                                ag_names[k], (long long)first.value[k],
                                differ_at[k], (long long)differ_value[k],
                                differ_count[k], differ_count[k] > 1 ? "s" : "",
                                differ_count[k] > 1 ? "" : "s");
    }
    if (len < sizeof(why))
        snprintf(why + len, sizeof(why) - len,
                 " the region collectives step aside on this communicator: "
                 "every collective goes to the modules below");
    say(comm, why);
    *priority = lowest;
    return CIV_AGREE_DIFFER;
}
