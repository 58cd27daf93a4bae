/*
 * Channel configuration: one table (environment name, default, range,
 * documentation) that fills and validates ivshm_ep_config_t, and that
 * `ivshm config` prints (docs/channels.md's table is checked against it in
 * make check). The MPI component registers its MCA parameters on top.
 */
#include "chan_internal.h"

#include <stdlib.h>
#include <string.h>

static const ivshm_config_param_t params[] = {
    {"IVSHM_FIFO_CELLS", 256, 8, 1u << 20, 1, "receive FIFO cells"},
    {"IVSHM_CELL_SIZE", 128, 128, CELL_SIZE_MAX, 0,
     "bytes per FIFO and fast-box cell (multiple of 64; a message of up to "
     "this minus 32 travels inline)"},
    {"IVSHM_FBOX_CELLS", 64, 0, 4096, 1,
     "cells per fast box (0 disables fast boxes)"},
    {"IVSHM_FBOX_THRESHOLD", 16, 0, 1u << 30, 0,
     "sends to a peer before it asks for a fast box"},
    {"IVSHM_FBOX_BUDGET", 32, 0, 4096, 0,
     "fast boxes one receiver grants at most"},
    {"IVSHM_FRAG_COUNT", 16, 2, 4096, 0, "fragments in the send pool"},
    {"IVSHM_FRAG_SIZE", 32768, FRAG_SIZE_MIN, 1u << 24, 1,
     "bytes per fragment"},
    {"IVSHM_MAX_PER_POLL", 64, 1, 1u << 20, 0,
     "pieces handled per progress call"},
};
/* where each entry lives in ivshm_ep_config_t, in the same order */
static const size_t offsets[] = {
    offsetof(ivshm_ep_config_t, fifo_cells),
    offsetof(ivshm_ep_config_t, cell_size),
    offsetof(ivshm_ep_config_t, fbox_cells),
    offsetof(ivshm_ep_config_t, fbox_threshold),
    offsetof(ivshm_ep_config_t, fbox_budget),
    offsetof(ivshm_ep_config_t, frag_count),
    offsetof(ivshm_ep_config_t, frag_size),
    offsetof(ivshm_ep_config_t, max_per_poll),
};
#define NCFG (sizeof(params) / sizeof(params[0]))
_Static_assert(sizeof(offsets) / sizeof(offsets[0]) == NCFG,
               "one offset per parameter");
_Static_assert(NCFG * sizeof(uint32_t) == sizeof(ivshm_ep_config_t),
               "every field of ivshm_ep_config_t is in the table");

const ivshm_config_param_t *ivshm_ep_config_param(unsigned i)
{
    return i < NCFG ? &params[i] : NULL;
}

void ivshm_ep_config_defaults(ivshm_ep_config_t *c)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < NCFG; i++)
        *(uint32_t *)((char *)c + offsets[i]) = params[i].def;
}

void ivshm_ep_config_env(ivshm_ep_config_t *c)
{
    for (size_t i = 0; i < NCFG; i++) {
        const char *e = getenv(params[i].env);
        if (e && *e)
            *(uint32_t *)((char *)c + offsets[i]) =
                (uint32_t)strtoul(e, NULL, 0);
    }
}

void ivshm_ep_config_init(ivshm_ep_config_t *c)
{
    ivshm_ep_config_defaults(c);
    ivshm_ep_config_env(c);
}

ivshm_status_t ivshm_ep_config_check(const ivshm_ep_config_t *c)
{
    for (size_t i = 0; i < NCFG; i++) {
        const ivshm_config_param_t *t = &params[i];
        uint32_t v = *(const uint32_t *)((const char *)c + offsets[i]);
        if (v < t->min || v > t->max || (t->pow2 && v && (v & (v - 1))))
            return ivshm__fail(IVSHM_ERR_INVAL,
                               "%s (%s) is %u; allowed %u..%u%s", t->env,
                               t->doc, v, t->min, t->max,
                               t->pow2 ? ", a power of two" : "");
    }
    if (c->cell_size % 64)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "IVSHM_CELL_SIZE %u is not a multiple of 64",
                           c->cell_size);
    uint64_t fbox = fbox_ring_bytes(c->fbox_cells, c->cell_size);
    if (fbox > FBOX_MAX)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "a fast box of %llu bytes exceeds %u; lower "
                           "IVSHM_FBOX_CELLS or IVSHM_CELL_SIZE",
                           (unsigned long long)fbox, FBOX_MAX);
    return IVSHM_OK;
}
