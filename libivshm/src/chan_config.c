/*
 * Channel configuration: one table (environment name, default, range,
 * documentation) that fills and validates ivshm_ep_config_t. The MPI
 * component registers its MCA parameters on top of these defaults.
 */
#include "chan_internal.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *env;
    size_t off;
    uint32_t def, min, max;
    bool pow2;
    const char *doc;
} cfg_table[] = {
    {"IVSHM_FIFO_CELLS", offsetof(ivshm_ep_config_t, fifo_cells), 256, 8,
     1u << 20, true, "receive FIFO cells"},
    {"IVSHM_CELL_SIZE", offsetof(ivshm_ep_config_t, cell_size), 128, 128,
     4096, false, "bytes per FIFO cell (multiple of 64)"},
    {"IVSHM_FBOX_CELLS", offsetof(ivshm_ep_config_t, fbox_cells), 64, 0, 4096,
     true, "cells per fast box (0 disables fast boxes)"},
    {"IVSHM_FBOX_THRESHOLD", offsetof(ivshm_ep_config_t, fbox_threshold), 16,
     0, 1u << 30, false, "sends to a peer before it asks for a fast box"},
    {"IVSHM_FBOX_BUDGET", offsetof(ivshm_ep_config_t, fbox_budget), 32, 0,
     4096, false, "fast boxes one receiver grants at most"},
    {"IVSHM_FRAG_COUNT", offsetof(ivshm_ep_config_t, frag_count), 16, 2, 4096,
     false, "fragments in the send pool"},
    {"IVSHM_FRAG_SIZE", offsetof(ivshm_ep_config_t, frag_size), 32768, 4096,
     1u << 24, true, "bytes per fragment"},
    {"IVSHM_MAX_PER_POLL", offsetof(ivshm_ep_config_t, max_per_poll), 64, 1,
     1u << 20, false, "pieces handled per progress call"},
};
#define NCFG (sizeof(cfg_table) / sizeof(cfg_table[0]))

void ivshm_ep_config_init(ivshm_ep_config_t *c)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < NCFG; i++) {
        uint32_t *f = (uint32_t *)((char *)c + cfg_table[i].off);
        *f = cfg_table[i].def;
        const char *e = getenv(cfg_table[i].env);
        if (e && *e)
            *f = (uint32_t)strtoul(e, NULL, 0);
    }
}

ivshm_status_t ivshm_ep_config_check(const ivshm_ep_config_t *c)
{
    for (size_t i = 0; i < NCFG; i++) {
        uint32_t v = *(const uint32_t *)((const char *)c + cfg_table[i].off);
        if (v < cfg_table[i].min || v > cfg_table[i].max ||
            (cfg_table[i].pow2 && v && (v & (v - 1))))
            return ivshm__fail(IVSHM_ERR_INVAL,
                               "%s (%s) is %u; allowed %u..%u%s",
                               cfg_table[i].env, cfg_table[i].doc, v,
                               cfg_table[i].min, cfg_table[i].max,
                               cfg_table[i].pow2 ? ", a power of two" : "");
    }
    if (c->cell_size % 64)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "IVSHM_CELL_SIZE %u is not a multiple of 64",
                           c->cell_size);
    uint64_t fbox = c->fbox_cells ? sizeof(struct fbox_hdr) +
                                        (uint64_t)c->fbox_cells * c->cell_size
                                  : 0;
    if (fbox > FBOX_BANK)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "a fast box of %llu bytes exceeds %u; lower "
                           "IVSHM_FBOX_CELLS or IVSHM_CELL_SIZE",
                           (unsigned long long)fbox, FBOX_BANK);
    return IVSHM_OK;
}
