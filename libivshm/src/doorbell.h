/* Doorbell notifier of the channel layer (doorbell.c). */
#ifndef IVSHM_DOORBELL_H
#define IVSHM_DOORBELL_H

#include "chan_layout.h"

#pragma GCC visibility push(hidden) /* as internal.h */

/* directory entry doorbell word: valid bit, peer IVPosition, vector */
#define DB_VALID 0x80000000u
#define DB_WORD(peer, vec) (DB_VALID | ((uint32_t)(peer) << 8) | (uint32_t)(vec))
#define DB_PEER(w) (((w) >> 8) & 0xffffu)
#define DB_VEC(w) ((w)&0xffu)

struct ivshm__doorbell {
    int ring_fd;  /* the region's device file: rings go through it */
    int wait_fd;  /* our own file holding the claimed vector, or -1 */
    uint32_t ivpos, vector;
    struct dir_entry *dir;
    uint32_t max_eps;
    uint64_t recheck_ns;
    uint64_t rings, irqs; /* doorbells rung, interrupts received */
};

/* IVSHM_ERR_NOTSUP when the region has no doorbell (not dev:, plain
 * device, or $IVSHM_DOORBELL=0). Otherwise rings work; wait_fd >= 0 when a
 * vector could be claimed for waiting. */
ivshm_status_t ivshm__db_open(ivshm_region_t *r, struct dir_entry *dir,
                              uint32_t max_eps, struct ivshm__doorbell **out);
void ivshm__db_close(struct ivshm__doorbell *db);
/* the word to publish in our directory entry (0: none) */
uint32_t ivshm__db_word(const struct ivshm__doorbell *db);
/* ivshm_notifier_t callbacks (ctx = the doorbell). The wait returns
 * IVSHM_ERR_NODEV when the device went away: the channel then waits by
 * polling (it owns the notifier interface; the doorbell never calls it). */
void ivshm__db_ring(void *ctx, uint32_t peer_index);
ivshm_status_t ivshm__db_wait(void *ctx, const volatile uint64_t *word,
                              uint64_t seen, uint64_t timeout_ns);

#pragma GCC visibility pop

#endif
