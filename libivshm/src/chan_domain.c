/*
 * Domains: the job area that holds a directory of endpoints (one 64-byte
 * entry per index), and inspection of every domain of a region for
 * `ivshm stat` and `ivshm check`. Inspection reads damaged regions too:
 * every area and block is validated before it is looked at.
 */
#include "chan_internal.h"
#include "doorbell.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ivshm_status_t ivshm_domain_join(ivshm_region_t *r, const char *key,
                                 uint32_t max_eps, ivshm_domain_t **out)
{
    *out = NULL;
    if (max_eps == 0 || max_eps > MAX_EPS_LIMIT)
        return ivshm__fail(IVSHM_ERR_INVAL, "max_eps %u outside 1..%u",
                           max_eps, MAX_EPS_LIMIT);
    ivshm_domain_t *d = calloc(1, sizeof(*d));
    if (!d)
        return ivshm__fail(IVSHM_ERR_SYS, "out of memory");
    ivshm_status_t st = ivshm_job_join(r, key,
                                       (uint64_t)max_eps * DIR_ENTRY_SIZE,
                                       &d->job);
    if (st != IVSHM_OK) {
        free(d);
        return st;
    }
    d->r = r;
    /* The directory's size comes from the (validated) job area, which the
     * first member sized: later members may ask for another max_eps. */
    d->max_eps = (uint32_t)(ivshm_job_area_size(d->job) / DIR_ENTRY_SIZE);
    if (d->max_eps > MAX_EPS_LIMIT)
        d->max_eps = MAX_EPS_LIMIT;
    d->dir = (struct dir_entry *)((char *)ivshm_region_base(r) +
                                  ivshm_job_area_off(d->job));
    d->job_idx = ivshm_job_index(d->job);
    d->job_gen = ivshm__job_gen(d->job);
    snprintf(d->key, sizeof(d->key), "%s", key);
    *out = d;
    return IVSHM_OK;
}

void ivshm_domain_leave(ivshm_domain_t *d)
{
    if (!d)
        return;
    ivshm_job_leave(d->job);
    free(d);
}

ivshm_status_t ivshm_region_endpoints(ivshm_region_t *r, ivshm_ep_visit_fn fn,
                                      void *arg)
{
    for (uint32_t j = 0; j < r->g.job_slots; j++) {
        ivshm_job_info_t ji;
        /* set where the area is found (LTO's inlining hides that) */
        uint64_t area_off = 0, area_size = 0;
        if (ivshm_region_job(r, j, &ji) != IVSHM_OK ||
            ji.state != SLOT_ALIVE ||
            ivshm__job_area(r, j, ji.gen, &area_off, &area_size) != IVSHM_OK)
            continue; /* a damaged slot is `ivshm check`'s to report */
        uint32_t max = (uint32_t)(area_size / DIR_ENTRY_SIZE);
        struct dir_entry *dir =
            (struct dir_entry *)((char *)ivshm_region_base(r) + area_off);
        for (uint32_t i = 0; i < max && i < MAX_EPS_LIMIT; i++) {
            uint64_t w = atomic_load(&dir[i].word);
            if (DIR_STATE(w) != DIR_READY)
                continue;
            uint64_t off = atomic_load(&dir[i].ctl_off);
            if (!ivshm__owned_by(r, off, sizeof(struct ep_ctl), DIR_SLOT(w),
                                 DIR_GEN(w)))
                continue;
            const struct ep_ctl *c =
                (const struct ep_ctl *)((char *)ivshm_region_base(r) + off);
            ivshm_ep_stats_t s = {
                atomic_load(&c->msgs_in),   atomic_load(&c->bytes_in),
                atomic_load(&c->msgs_out),  atomic_load(&c->bytes_out),
                atomic_load(&c->stalls),    atomic_load(&c->invalid),
                atomic_load(&c->dead_peers), atomic_load(&c->fbox_granted),
                atomic_load(&c->fbox_used), atomic_load(&c->wakeups), 0, -1};
            uint32_t db = atomic_load(&dir[i].doorbell);
            if (db & DB_VALID)
                s.doorbell_vector = (int32_t)DB_VEC(db);
            fn(arg, ji.key, i, __atomic_load_n(&dir[i].pid, __ATOMIC_RELAXED), &s);
        }
    }
    return IVSHM_OK;
}

ivshm_status_t ivshm_domain_valid(ivshm_domain_t *d, ivshm_report_fn report,
                                  void *arg)
{
    ivshm_status_t first = IVSHM_OK;
    for (uint32_t i = 0; i < d->max_eps; i++) {
        uint64_t w = atomic_load(&d->dir[i].word);
        char msg[160];
        if (DIR_STATE(w) > DIR_READY) {
            snprintf(msg, sizeof(msg), "endpoint %u: state %u unknown", i,
                     DIR_STATE(w));
        } else if (DIR_STATE(w) == DIR_READY &&
                   ivshm__proc_state(d->r, DIR_SLOT(w), DIR_GEN(w)) ==
                       PROC_LIVE) {
            uint64_t off = atomic_load(&d->dir[i].ctl_off);
            struct ctl_geom g;
            if (ivshm__check_ctl(d->r, d->max_eps, i, w, off, &g) != IVSHM_OK) {
                snprintf(msg, sizeof(msg), "%s", ivshm_last_error());
            } else {
                const struct ep_ctl *c =
                    (const struct ep_ctl *)((char *)ivshm_region_base(d->r) +
                                            off);
                if (ring_used(atomic_load(&c->head), atomic_load(&c->tail)) <=
                    g.fifo_cells)
                    continue;
                snprintf(msg, sizeof(msg),
                         "endpoint %u: head and tail more than a lap apart", i);
            }
        } else {
            continue;
        }
        if (report)
            report(arg, IVSHM_ERR_CORRUPT, msg);
        if (first == IVSHM_OK)
            first = IVSHM_ERR_CORRUPT;
    }
    return first;
}
