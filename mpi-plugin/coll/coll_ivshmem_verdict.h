/*
 * coll ivshmem: the verdict on the members' published settings
 * (coll_ivshmem_agree.c reads them; docs/collectives.md, "Ranks agree on
 * the settings first"). Open MPI free, so that tests/unit/test_coll_verdict
 * runs this very code.
 *
 * Members are added in comm rank order, each entry read once (NULL: no
 * usable entry); every member adds the same entries, so every member
 * reaches the same verdict.
 */
#ifndef COLL_IVSHMEM_VERDICT_H
#define COLL_IVSHMEM_VERDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CIV_AGREE_MAGIC 0x45455247u /* "GREE" */
#define CIV_AGREE_VERSION 1u

/* the settings compared: every parameter that changes what a rank does in
 * a collective or whether it takes the communicator; stats and verbose
 * change only what is printed */
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

/* what a process publishes in its modex entry */
typedef struct civ_agree_msg {
    uint32_t magic;
    uint32_t version;
    int64_t value[AG_N];
} civ_agree_msg_t;

enum civ_agreement {
    CIV_AGREE_SAME,   /* every member has the same settings */
    CIV_AGREE_DIFFER, /* they differ: every member steps aside */
    CIV_AGREE_OFF,    /* some member has the component off: none takes it */
};

/* what the members added so far tell */
typedef struct civ_verdict {
    int added;
    civ_agree_msg_t first; /* comm rank 0's, if it has one */
    bool have_first;
    int lowest;                 /* lowest priority of any member */
    int off_at, missing_at;     /* first member off, without an entry */
    bool all_off;               /* every member has one, and all are off */
    int differ_at[AG_N];        /* first member differing from rank 0 */
    int differ_count[AG_N];
    int64_t differ_value[AG_N]; /* the first differing member's value */
    bool differ;
} civ_verdict_t;

static inline void civ_verdict_init(civ_verdict_t *v)
{
    memset(v, 0, sizeof(*v));
    v->off_at = v->missing_at = -1;
    v->all_off = true;
    for (int k = 0; k < AG_N; k++)
        v->differ_at[k] = -1;
}

static inline bool civ_agree_is_off(const civ_agree_msg_t *s)
{
    return s->value[AG_PRIORITY] <= 0 || s->value[AG_ENABLED] == 0;
}

/* adds the next member (comm rank v->added): its entry, NULL if it has
 * none; an entry of another format counts as none */
static inline void civ_verdict_add(civ_verdict_t *v, const civ_agree_msg_t *e)
{
    int i = v->added++;
    if (e && (e->magic != CIV_AGREE_MAGIC || e->version != CIV_AGREE_VERSION))
        e = NULL;
    if (!e) {
        if (v->missing_at < 0)
            v->missing_at = i;
        v->all_off = false;
        return;
    }
    bool off = civ_agree_is_off(e);
    if (off && v->off_at < 0)
        v->off_at = i;
    v->all_off = v->all_off && off;
    if (i == 0 || e->value[AG_PRIORITY] < v->lowest)
        v->lowest = (int)e->value[AG_PRIORITY];
    if (i == 0) {
        v->first = *e;
        v->have_first = true;
        return;
    }
    if (!v->have_first)
        return; /* rank 0 has none: the verdict is off anyway */
    for (int k = 0; k < AG_N; k++)
        if (e->value[k] != v->first.value[k]) {
            if (v->differ_at[k] < 0) {
                v->differ_at[k] = i;
                v->differ_value[k] = e->value[k];
            }
            v->differ_count[k]++;
            v->differ = true;
        }
}

/* The verdict once every member is added; why gets comm rank 0's message
 * ("" when there is nothing to say: all the same, or all off by choice);
 * CIV_AGREE_DIFFER sets *priority to the lowest any member has. */
static inline enum civ_agreement civ_verdict(const civ_verdict_t *v,
                                             int *priority, char *why,
                                             size_t why_size)
{
    static const char *const names[AG_N] = {
        "coll_ivshmem_priority",     "coll_ivshmem_enable (as a bit mask)",
        "coll_ivshmem_slot_size",    "coll_ivshmem_reduce_split",
        "coll_ivshmem_reduce_root_max", "coll_ivshmem_max_bytes",
        "coll_ivshmem_alltoall_max", "coll_ivshmem_allgather_direct_min",
        "coll_ivshmem_max_ranks",    "coll_ivshmem_hierarchy",
    };
    size_t len = 0;
    why[0] = '\0';
    if (v->missing_at >= 0 || v->off_at >= 0) {
        if (!v->all_off) /* all off: the user's choice, nothing to say */
            snprintf(why, why_size,
                     "rank %d has coll ivshmem %s while others use it: the "
                     "region collectives step aside on this communicator "
                     "(Open MPI's other components run them all)",
                     v->missing_at >= 0 ? v->missing_at : v->off_at,
                     v->missing_at >= 0 ? "not loaded (no published settings)"
                                        : "off (priority 0 or nothing enabled)");
        return CIV_AGREE_OFF;
    }
    if (!v->differ)
        return CIV_AGREE_SAME;
    len = (size_t)snprintf(why, why_size, "ranks disagree on");
    for (int k = 0; k < AG_N && len < why_size; k++) {
        if (v->differ_at[k] < 0)
            continue;
        int c = v->differ_count[k];
        len += (size_t)snprintf(why + len, why_size - len,
                                " %s (rank 0: %lld, rank %d: %lld, %d rank%s "
                                "differ%s from rank 0);",
                                names[k], (long long)v->first.value[k],
                                v->differ_at[k], (long long)v->differ_value[k],
                                c, c > 1 ? "s" : "", c > 1 ? "" : "s");
    }
    if (len < why_size)
        snprintf(why + len, why_size - len,
                 " the region collectives step aside on this communicator: "
                 "every collective goes to the modules below");
    *priority = v->lowest;
    return CIV_AGREE_DIFFER;
}

#endif
