/*
 * Channels: endpoints, the multi-producer receive FIFO, fast boxes,
 * fragments, single-copy region sends, wake-ups and dead-peer handling.
 *
 * Synchronisation edges (C: cell, F: fast box, T: tail, N: notify):
 *  C0 producer claims a FIFO position by CAS on head (no one waits on it);
 *  C1 producer writes the cell, then release-stores seq = position + 1;
 *     the consumer acquire-loads seq and only then reads the cell;
 *  T0 consumer release-stores tail after it is done with the cells below;
 *     producers acquire-load it only when the FIFO looks full;
 *  F0/F1 as C1/T0 for the single-producer fast boxes;
 *  N0 sender: publish (seq_cst store), then seq_cst load of notify;
 *     receiver: seq_cst CAS of the armed bit, then re-check its queues.
 *     One of them sees the other.
 *
 * A producer stopped between C0 and C1 leaves an unpublished cell: the
 * consumer skips it (keeps it pending) and goes on with later cells, so
 * other senders are not blocked; per-pair sequence numbers keep each
 * pair's order. The stuck cell holds the tail back, so the FIFO fills
 * after one lap; hot senders have fast boxes by then.
 */
#include "chan_layout.h"
#include "doorbell.h"
#include "ivshm/channel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PENDING_MAX 64
#define STUCK_CHECK_NS 2000000ull /* look at a pending cell's owner after */
#define LIVENESS_PERIOD 1024      /* progress calls between clock reads */
#define LIVENESS_NS 100000000ull  /* peer checks at most every 100 ms */
#define FBOX_BANK 65536u          /* bytes allocated per fast-box bank */

struct ivshm_domain {
    ivshm_region_t *r;
    ivshm_job_t *job;
    struct dir_entry *dir;
    uint32_t max_eps;
    uint32_t job_idx, job_gen;
    char key[IVSHM_JOB_KEY_MAX + 1];
};

/* What we know of a peer: its validated layout and both directions' state */
struct peer {
    bool valid, dead;
    uint64_t entry_word;
    uint32_t owner_slot, owner_gen;
    struct ep_ctl *ctl;
    struct ctl_geom g; /* private, validated copy */
    char *cells;
    _Atomic uint64_t *grants, *rdone, *fdone;
    char *pool;
    /* we send to it */
    uint64_t cached_tail;
    uint32_t pseq_out;
    uint32_t sends;
    bool fbox_asked;
    char *tx_fbox; /* fast box it granted us */
    struct fbox_hdr *tx_fbox_hdr;
    uint64_t tx_fbox_pos, tx_fbox_tail;
    uint64_t region_tickets;
    bool peer_may_block; /* it has blocked once: wake it with a fence */
    /* we receive from it */
    uint32_t pseq_in;
    char *rx_fbox; /* fast box we granted it */
    struct fbox_hdr *rx_fbox_hdr;
    uint64_t rx_fbox_pos, rx_fbox_released;
    int rx_fbox_slot;
};

struct pending {
    uint64_t pos;
    uint64_t first_seen;
};

struct fbox_bank {
    uint64_t off;
    uint32_t used_mask;
};

struct ivshm_ep {
    ivshm_domain_t *d;
    ivshm_region_t *r;
    uint32_t index;
    ivshm_ep_config_t cfg;
    struct ep_ctl *ctl;
    uint64_t ctl_off;
    struct ctl_geom g;
    char *cells;
    char *pool;
    _Atomic uint64_t *grants, *rdone, *fdone;
    uint64_t *frag_issued;
    uint32_t frag_next;
    ivshm_msg_handler_t handler;
    void *harg;
    ivshm_event_handler_t ev;
    void *earg;
    ivshm_notifier_t notifier;
    struct ivshm__doorbell *db; /* NULL without the guest driver */
    struct peer **peers; /* lazily allocated, by directory index */
    uint32_t *active;    /* peers that hold a fast box we granted */
    uint32_t nactive;
    /* consumer state */
    uint64_t rx_pos;
    uint64_t tail_published;
    struct pending pend[PENDING_MAX];
    uint32_t npend;
    uint32_t polls;
    uint64_t last_liveness;
    struct fbox_bank *banks;
    uint32_t nbanks;
    uint32_t fbox_bytes;
    uint32_t fbox_granted;
    bool in_handler;
    struct {
        uint64_t msgs_in, bytes_in, invalid, dead_peers, fbox_granted;
        uint64_t msgs_out, bytes_out, stalls, fbox_used, wakeups;
    } st; /* authoritative; mirrored to the shared stats lines */
};

/* ------------------------------------------------------------------ */
/* configuration                                                       */

static const struct {
    const char *env;
    size_t off;
    uint32_t def, min, max;
    bool pow2;
    const char *doc;
} cfg_table[] = {
    {"IVSHM_FIFO_CELLS", offsetof(ivshm_ep_config_t, fifo_cells), 256, 8,
     1u << 20, true, "receive FIFO cells"},
    {"IVSHM_CELL_SIZE", offsetof(ivshm_ep_config_t, cell_size), 128, 64, 4096,
     false, "bytes per FIFO cell (multiple of 64)"},
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
    return IVSHM_OK;
}

/* ------------------------------------------------------------------ */
/* domains                                                             */

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

/* ------------------------------------------------------------------ */
/* validation of another endpoint's published layout                   */

static uint64_t ctl_size_for(const ivshm_ep_config_t *c, uint32_t max_eps,
                             struct ctl_geom *g)
{
    uint64_t off = sizeof(struct ep_ctl);
    g->grants_off = off;
    off += (uint64_t)max_eps * 8;
    g->rdone_off = off;
    off += (uint64_t)max_eps * 8;
    g->fdone_off = off;
    off += (uint64_t)c->frag_count * 8;
    off = (off + 63) & ~63ull;
    g->cells_off = off;
    off += (uint64_t)c->fifo_cells * c->cell_size;
    off = (off + 4095) & ~4095ull;
    g->pool_off = off;
    off += (uint64_t)c->frag_count * c->frag_size;
    g->total = off;
    g->fifo_cells = c->fifo_cells;
    g->cell_size = c->cell_size;
    g->frag_count = c->frag_count;
    g->frag_size = c->frag_size;
    g->max_eps = max_eps;
    g->magic = CTL_MAGIC;
    return off;
}

/* Is [off, off+len) inside memory owned by process lease (slot, gen)? */
static bool owned_by(ivshm_region_t *r, uint64_t off, uint64_t len,
                     uint32_t slot, uint32_t gen)
{
    const struct ivshm_geom *g = &r->g;
    if (!ivshm__in_heap(g, off, len))
        return false;
    uint64_t tag = OWNER_TAG(OWNER_PROC, slot, gen);
    uint32_t first = (uint32_t)((off - g->heap_off) >> g->chunk_shift);
    uint32_t last = (uint32_t)((off + (len ? len - 1 : 0) - g->heap_off) >>
                               g->chunk_shift);
    return atomic_load(&ivshm__chunk(r, first)->owner) == tag &&
           atomic_load(&ivshm__chunk(r, last)->owner) == tag;
}

/* Validates the control block an entry (word w) points to at off: owned by
 * the entry's lease, geometry consistent with its sizes. Fills *gout with
 * the private copy every later access uses. */
static ivshm_status_t check_ctl(ivshm_region_t *r, uint32_t max_eps,
                                uint32_t idx, uint64_t w, uint64_t off,
                                struct ctl_geom *gout)
{
    if (!owned_by(r, off, sizeof(struct ep_ctl), DIR_SLOT(w), DIR_GEN(w)))
        return ivshm__fail(IVSHM_ERR_CORRUPT,
                           "endpoint %u: control block offset %llu is not "
                           "its owner's memory",
                           idx, (unsigned long long)off);
    struct ep_ctl *c = (struct ep_ctl *)((char *)ivshm_region_base(r) + off);
    struct ctl_geom g;
    memcpy(&g, &c->g, sizeof(g)); /* read once */
    ivshm_ep_config_t pc;
    ivshm_ep_config_init(&pc);
    pc.fifo_cells = g.fifo_cells;
    pc.cell_size = g.cell_size;
    pc.frag_count = g.frag_count;
    pc.frag_size = g.frag_size;
    /* every derived offset must be what the sizes imply */
    struct ctl_geom want;
    memset(&want, 0, sizeof(want));
    bool ok = g.magic == CTL_MAGIC && g.index == idx && g.max_eps == max_eps &&
              ivshm_ep_config_check(&pc) == IVSHM_OK;
    if (ok) {
        ctl_size_for(&pc, g.max_eps, &want);
        want.index = g.index;
        ok = memcmp(&want, &g, sizeof(g)) == 0 &&
             owned_by(r, off, g.total, DIR_SLOT(w), DIR_GEN(w));
    }
    if (!ok)
        return ivshm__fail(IVSHM_ERR_CORRUPT,
                           "endpoint %u: control block geometry is invalid",
                           idx);
    *gout = g;
    return IVSHM_OK;
}

/* Reads directory entry idx once, validates it and the control block it
 * points to, and fills p. */
static ivshm_status_t load_peer(ivshm_ep_t *ep, uint32_t idx, uint64_t want_word,
                                struct peer *p)
{
    ivshm_domain_t *d = ep->d;
    ivshm_region_t *r = ep->r;
    if (idx >= d->max_eps)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "endpoint %u out of range",
                           idx);
    struct dir_entry *e = &d->dir[idx];
    uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
    if (DIR_STATE(w) != DIR_READY || (want_word && w != want_word))
        return ivshm__fail(IVSHM_ERR_NOT_FOUND,
                           "endpoint %u is gone or was replaced", idx);
    if (!ivshm__proc_live(r, DIR_SLOT(w), DIR_GEN(w)))
        return ivshm__fail(IVSHM_ERR_PEER_DEAD,
                           "endpoint %u's process lease is gone", idx);
    uint64_t off = atomic_load(&e->ctl_off);
    struct ctl_geom g;
    ivshm_status_t st = check_ctl(r, d->max_eps, idx, w, off, &g);
    if (st != IVSHM_OK)
        return st;
    struct ep_ctl *c = (struct ep_ctl *)((char *)ivshm_region_base(r) + off);
    memset(p, 0, sizeof(*p));
    p->valid = true;
    p->entry_word = w;
    p->owner_slot = DIR_SLOT(w);
    p->owner_gen = DIR_GEN(w);
    p->ctl = c;
    p->g = g;
    p->cells = (char *)c + g.cells_off;
    p->grants = (_Atomic uint64_t *)((char *)c + g.grants_off);
    p->rdone = (_Atomic uint64_t *)((char *)c + g.rdone_off);
    p->fdone = (_Atomic uint64_t *)((char *)c + g.fdone_off);
    p->pool = (char *)c + g.pool_off;
    p->cached_tail = atomic_load_explicit(&c->tail, memory_order_acquire);
    p->rx_fbox_slot = -1;
    return IVSHM_OK;
}

static void release_fbox(ivshm_ep_t *ep, struct peer *p, uint32_t idx);

static struct peer *get_peer(ivshm_ep_t *ep, uint32_t idx)
{
    if (idx >= ep->d->max_eps)
        return NULL;
    struct peer *p = ep->peers[idx];
    if (p && p->valid && !p->dead)
        return p;
    if (p && p->dead) {
        /* the index may have a new owner by now */
        uint64_t w = atomic_load(&ep->d->dir[idx].word);
        if (w == p->entry_word)
            return NULL;
    }
    struct peer tmp;
    if (load_peer(ep, idx, 0, &tmp) != IVSHM_OK)
        return NULL;
    if (!p) {
        p = malloc(sizeof(*p));
        if (!p)
            return NULL;
        ep->peers[idx] = p;
    } else {
        release_fbox(ep, p, idx); /* a dead owner's box not yet drained */
    }
    *p = tmp;
    return p;
}

/* ------------------------------------------------------------------ */
/* endpoints                                                           */

static void ep_free_local(ivshm_ep_t *ep)
{
    ivshm__db_close(ep->db);
    if (ep->peers)
        for (uint32_t i = 0; i < ep->d->max_eps; i++)
            free(ep->peers[i]);
    free(ep->peers);
    free(ep->active);
    free(ep->frag_issued);
    free(ep->banks);
    free(ep);
}

ivshm_status_t ivshm__poll_wait(void *ctx, const volatile uint64_t *word,
                                uint64_t seen, uint64_t timeout_ns)
{
    (void)ctx;
    uint64_t deadline = timeout_ns == UINT64_MAX
                            ? UINT64_MAX
                            : ivshm__mono_ns() + timeout_ns;
    unsigned spins = 0;
    while (atomic_load((const _Atomic uint64_t *)word) == seen) {
        if (ivshm__mono_ns() >= deadline)
            return IVSHM_ERR_AGAIN;
        ivshm__backoff(&spins);
    }
    return IVSHM_OK;
}

static void poll_ring(void *ctx, uint32_t peer)
{
    (void)ctx;
    (void)peer; /* a polling waiter sees the notify word change */
}

ivshm_status_t ivshm_ep_create(ivshm_domain_t *d, int index,
                               const ivshm_ep_config_t *cfg,
                               ivshm_msg_handler_t handler, void *arg,
                               ivshm_ep_t **out)
{
    *out = NULL;
    ivshm_region_t *r = d->r;
    ivshm_status_t st = ivshm__require_attached(r);
    if (st != IVSHM_OK)
        return st;
    ivshm_ep_t *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return ivshm__fail(IVSHM_ERR_SYS, "out of memory");
    ep->d = d;
    ep->r = r;
    if (cfg)
        ep->cfg = *cfg;
    else
        ivshm_ep_config_init(&ep->cfg);
    if ((st = ivshm_ep_config_check(&ep->cfg)) != IVSHM_OK)
        goto err_free;
    ep->handler = handler;
    ep->harg = arg;
    ep->notifier = (ivshm_notifier_t){poll_ring, ivshm__poll_wait, NULL};
    ep->peers = calloc(d->max_eps, sizeof(*ep->peers));
    ep->active = calloc(ep->cfg.fbox_budget + 1, sizeof(*ep->active));
    ep->frag_issued = calloc(ep->cfg.frag_count, sizeof(*ep->frag_issued));
    if (!ep->peers || !ep->active || !ep->frag_issued) {
        st = ivshm__fail(IVSHM_ERR_SYS, "out of memory");
        goto err_free;
    }
    ep->fbox_bytes = ep->cfg.fbox_cells
                         ? (uint32_t)sizeof(struct fbox_hdr) +
                               ep->cfg.fbox_cells * ep->cfg.cell_size
                         : 0;
    if (ep->fbox_bytes > FBOX_BANK) {
        st = ivshm__fail(IVSHM_ERR_INVAL,
                         "a fast box of %u bytes exceeds %u; lower "
                         "IVSHM_FBOX_CELLS or IVSHM_CELL_SIZE",
                         ep->fbox_bytes, FBOX_BANK);
        goto err_free;
    }

    /* claim a directory index, tied to our lease */
    uint32_t me_slot = r->slot, me_gen = r->gen;
    uint32_t lo = index < 0 ? 0 : (uint32_t)index;
    uint32_t hi = index < 0 ? d->max_eps : (uint32_t)index + 1;
    if (index >= 0 && (uint32_t)index >= d->max_eps) {
        st = ivshm__fail(IVSHM_ERR_INVAL, "endpoint index %d >= %u", index,
                         d->max_eps);
        goto err_free;
    }
    int got = -1;
    for (uint32_t i = lo; i < hi && got < 0; i++) {
        struct dir_entry *e = &d->dir[i];
        uint64_t w = atomic_load(&e->word);
        if (DIR_STATE(w) != DIR_FREE &&
            ivshm__proc_live(r, DIR_SLOT(w), DIR_GEN(w)))
            continue; /* held by a live process */
        if (atomic_compare_exchange_strong(
                &e->word, &w, DIR_WORD(me_gen, me_slot, DIR_CLAIMING)))
            got = (int)i;
    }
    if (got < 0) {
        st = ivshm__fail(index < 0 ? IVSHM_ERR_NOSPACE : IVSHM_ERR_BUSY,
                         index < 0 ? "all %u endpoint slots of job '%s' are "
                                     "taken"
                                   : "endpoint %u of job '%s' is held by a "
                                     "live process",
                         index < 0 ? d->max_eps : (uint32_t)index, d->key);
        goto err_free;
    }
    ep->index = (uint32_t)got;
    struct ctl_geom g;
    ctl_size_for(&ep->cfg, d->max_eps, &g);
    g.index = ep->index;
    if ((st = ivshm_alloc(r, g.total, &ep->ctl_off)) != IVSHM_OK)
        goto err_entry;
    ep->ctl = (struct ep_ctl *)((char *)ivshm_region_base(r) + ep->ctl_off);
    memset(ep->ctl, 0, g.cells_off); /* header and tables; cells below */
    memset((char *)ep->ctl + g.cells_off, 0,
           (size_t)ep->cfg.fifo_cells * ep->cfg.cell_size);
    ep->ctl->g = g;
    ep->g = g;
    ep->cells = (char *)ep->ctl + g.cells_off;
    ep->pool = (char *)ep->ctl + g.pool_off;
    ep->grants = (_Atomic uint64_t *)((char *)ep->ctl + g.grants_off);
    ep->rdone = (_Atomic uint64_t *)((char *)ep->ctl + g.rdone_off);
    ep->fdone = (_Atomic uint64_t *)((char *)ep->ctl + g.fdone_off);
    struct dir_entry *e = &d->dir[ep->index];
    atomic_store(&e->ctl_off, ep->ctl_off);
    e->ctl_size = g.total;
    e->pid = (uint32_t)getpid();
    e->epoch++;
    atomic_store(&e->doorbell, 0);
    if (ivshm__db_open(r, d->dir, d->max_eps, &ep->db) == IVSHM_OK) {
        ep->notifier.ring = ivshm__db_ring;
        ep->notifier.ctx = ep->db;
        if (ep->db->wait_fd >= 0)
            ep->notifier.wait = ivshm__db_wait;
        atomic_store(&e->doorbell, ivshm__db_word(ep->db));
    }
    /* D0: publish; connectors acquire the word, then read the entry. */
    atomic_store_explicit(&e->word, DIR_WORD(me_gen, me_slot, DIR_READY),
                          memory_order_release);
    *out = ep;
    return IVSHM_OK;

err_entry:
    atomic_store(&d->dir[ep->index].word, 0);
err_free:
    ep_free_local(ep);
    return st;
}

/* Waits (bounded) until receivers gave back every fragment we sent, so
 * that what is still in flight is read before the pool is freed. */
#define LINGER_NS 2000000000ull
static void linger(ivshm_ep_t *ep)
{
    uint64_t deadline = ivshm__mono_ns() + LINGER_NS;
    unsigned spins = 0;
    for (uint32_t i = 0; i < ep->cfg.frag_count; i++)
        while (atomic_load_explicit(&ep->fdone[i], memory_order_acquire) !=
               ep->frag_issued[i]) {
            if (ivshm__mono_ns() >= deadline)
                return;
            ivshm__backoff(&spins);
        }
}

void ivshm_ep_destroy(ivshm_ep_t *ep)
{
    if (!ep)
        return;
    linger(ep);
    ivshm_region_t *r = ep->r;
    struct dir_entry *e = &ep->d->dir[ep->index];
    uint64_t w = DIR_WORD(r->gen, r->slot, DIR_READY);
    if (atomic_compare_exchange_strong(&e->word, &w, DIR_FREE)) {
        for (uint32_t i = 0; i < ep->nbanks; i++)
            ivshm_free(r, ep->banks[i].off);
        ivshm_free(r, ep->ctl_off);
    }
    ep_free_local(ep);
}

uint32_t ivshm_ep_index(const ivshm_ep_t *ep) { return ep->index; }

void ivshm_ep_set_event_handler(ivshm_ep_t *ep, ivshm_event_handler_t h,
                                void *arg)
{
    ep->ev = h;
    ep->earg = arg;
}

void ivshm_ep_set_notifier(ivshm_ep_t *ep, const ivshm_notifier_t *n)
{
    ep->notifier = *n;
}

/* Address blob: uuid[16] job_idx job_gen index pad entry_word ctl_off */
static void make_address(ivshm_domain_t *d, uint32_t index, uint64_t word,
                         uint64_t ctl_off, uint8_t addr[IVSHM_EP_ADDR_SIZE])
{
    memset(addr, 0, IVSHM_EP_ADDR_SIZE);
    ivshm_region_uuid(d->r, addr);
    uint32_t v[4] = {d->job_idx, d->job_gen, index, 0};
    memcpy(addr + 16, v, sizeof(v));
    memcpy(addr + 32, &word, 8);
    memcpy(addr + 40, &ctl_off, 8);
}

ivshm_status_t ivshm_ep_address(const ivshm_ep_t *ep,
                                uint8_t addr[IVSHM_EP_ADDR_SIZE])
{
    make_address(ep->d, ep->index, atomic_load(&ep->d->dir[ep->index].word),
                 ep->ctl_off, addr);
    return IVSHM_OK;
}

ivshm_status_t ivshm_domain_address(ivshm_domain_t *d, uint32_t index,
                                    uint8_t addr[IVSHM_EP_ADDR_SIZE])
{
    if (index >= d->max_eps)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "endpoint %u out of range",
                           index);
    uint64_t w = atomic_load_explicit(&d->dir[index].word,
                                      memory_order_acquire);
    if (DIR_STATE(w) != DIR_READY ||
        !ivshm__proc_live(d->r, DIR_SLOT(w), DIR_GEN(w)))
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "no live endpoint at %u",
                           index);
    make_address(d, index, w, atomic_load(&d->dir[index].ctl_off), addr);
    return IVSHM_OK;
}

ivshm_status_t ivshm_ep_connect(ivshm_ep_t *ep, const uint8_t *addr,
                                size_t len, uint32_t *peer)
{
    uint8_t uuid[16];
    ivshm_region_uuid(ep->r, uuid);
    if (len < IVSHM_EP_ADDR_SIZE || memcmp(addr, uuid, 16) != 0)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND,
                           "address names another region");
    uint32_t v[4];
    uint64_t w, off;
    memcpy(v, addr + 16, sizeof(v));
    memcpy(&w, addr + 32, 8);
    memcpy(&off, addr + 40, 8);
    if (v[0] != ep->d->job_idx || v[1] != ep->d->job_gen)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "address names another job");
    if (v[2] >= ep->d->max_eps)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "endpoint index out of range");
    struct peer tmp;
    ivshm_status_t st = load_peer(ep, v[2], w, &tmp);
    if (st != IVSHM_OK)
        return st;
    if ((uint64_t)((char *)tmp.ctl - (char *)ivshm_region_base(ep->r)) != off)
        return ivshm__fail(IVSHM_ERR_NOT_FOUND, "endpoint was re-created");
    struct peer *p = ep->peers[v[2]];
    if (!p || p->entry_word != w || p->dead) {
        if (!p && !(p = malloc(sizeof(*p))))
            return ivshm__fail(IVSHM_ERR_SYS, "out of memory");
        *p = tmp;
        ep->peers[v[2]] = p;
    }
    *peer = v[2];
    return IVSHM_OK;
}

/* ------------------------------------------------------------------ */
/* sending                                                             */

/* Counts locally and mirrors the value to the shared stats line (single
 * writer, for `ivshm stat`): what another VM scribbles there never feeds
 * back into our own figures. */
#define BUMP(ep, field, by)                                                  \
    atomic_store_explicit(&(ep)->ctl->field, (ep)->st.field += (by),         \
                          memory_order_relaxed)

/* N0 needs the publish ordered before the notify load (store-load): a full
 * fence, paid only towards receivers that ever block (may_block). Polling
 * receivers (MPI) never arm, so their senders skip it. A receiver sets
 * may_block before its first wait and bounds that first wait (GRACE_NS),
 * since a sender may not have seen the flag yet; after that no wake-up can
 * be lost. GCC's TSan cannot model fences: its builds use a seq_cst store. */
#define GRACE_NS 1000000ull
#if defined(__SANITIZE_THREAD__)
static inline void publish_seq(_Atomic uint64_t *seq, uint64_t v)
{
    atomic_store_explicit(seq, v, memory_order_seq_cst);
}
#define STORE_LOAD_FENCE() ((void)0)
#else
static inline void publish_seq(_Atomic uint64_t *seq, uint64_t v)
{
    atomic_store_explicit(seq, v, memory_order_release);
}
#define STORE_LOAD_FENCE() atomic_thread_fence(memory_order_seq_cst)
#endif

static void wake(ivshm_ep_t *ep, struct peer *p, uint32_t idx)
{
    if (!p->peer_may_block) {
        if (!atomic_load_explicit(&p->ctl->may_block, memory_order_relaxed))
            return;
        p->peer_may_block = true; /* it stays a blocking receiver */
    }
    STORE_LOAD_FENCE(); /* N0: publish before the notify load */
    uint64_t w = atomic_load_explicit(&p->ctl->notify, memory_order_seq_cst);
    if ((w & 1) && atomic_compare_exchange_strong(&p->ctl->notify, &w,
                                                  (w + 2) & ~1ull)) {
        ep->notifier.ring(ep->notifier.ctx, idx);
        BUMP(ep, wakeups, 1);
    }
}

/* Picks up a fast box the peer granted us (validated once). */
static void check_grant(ivshm_ep_t *ep, struct peer *p)
{
    uint64_t off = atomic_load_explicit(&p->grants[ep->index],
                                        memory_order_acquire);
    if (!off)
        return;
    uint64_t bytes = sizeof(struct fbox_hdr) +
                     (uint64_t)ep->cfg.fbox_cells * p->g.cell_size;
    if (!owned_by(ep->r, off, bytes, p->owner_slot, p->owner_gen) ||
        (off & 63)) {
        BUMP(ep, invalid, 1);
        p->fbox_asked = true; /* do not look again */
        return;
    }
    p->tx_fbox_hdr = (struct fbox_hdr *)((char *)ivshm_region_base(ep->r) + off);
    p->tx_fbox = (char *)p->tx_fbox_hdr + sizeof(struct fbox_hdr);
    p->tx_fbox_pos = 0;
    p->tx_fbox_tail = 0;
    BUMP(ep, fbox_used, 1);
}

/* Finds a cell for one piece: the fast box if we have one with room, else
 * a FIFO position claimed by CAS. Returns NULL if both are full. */
static struct cell *claim_cell(ivshm_ep_t *ep, struct peer *p, uint64_t *pos,
                               bool *fifo)
{
    if (p->tx_fbox) {
        uint32_t n = ep->cfg.fbox_cells;
        if (ring_full(p->tx_fbox_pos, p->tx_fbox_tail, n))
            p->tx_fbox_tail = atomic_load_explicit(&p->tx_fbox_hdr->tail,
                                                   memory_order_acquire);
        if (!ring_full(p->tx_fbox_pos, p->tx_fbox_tail, n)) {
            *pos = p->tx_fbox_pos++;
            *fifo = false;
            return (struct cell *)(p->tx_fbox +
                                   (*pos & (n - 1)) * p->g.cell_size);
        }
    }
    uint32_t n = p->g.fifo_cells;
    uint64_t h = atomic_load_explicit(&p->ctl->head, memory_order_relaxed);
    for (;;) {
        if (ring_full(h, p->cached_tail, n)) {
            p->cached_tail =
                atomic_load_explicit(&p->ctl->tail, memory_order_acquire);
            if (ring_full(h, p->cached_tail, n))
                return NULL;
        }
        /* C0: claim; a stopped claimer blocks nobody (file comment) */
        if (atomic_compare_exchange_weak_explicit(&p->ctl->head, &h, h + 1,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed))
            break;
    }
    struct cell *c = (struct cell *)(p->cells + (h & (n - 1)) * p->g.cell_size);
    atomic_store_explicit(&c->claim, ep->index + 1, memory_order_relaxed);
    *pos = h;
    *fifo = true;
    return c;
}

/* Test hook: called between claim and publish (SIGSTOP tests). */
void (*ivshm__test_after_claim)(void);

/* Never reads the cell: its line is the receiver's until we write it, and a
 * read first would cost a second transfer. */
static void publish(ivshm_ep_t *ep, struct peer *p, uint32_t idx,
                    struct cell *c, uint64_t pos, uint16_t type, uint32_t tag,
                    uint32_t len, uint64_t offset, uint64_t total,
                    uint32_t frag, uint64_t aux)
{
    /* The header is built privately and stored in one burst: a receiver
     * polling this line steals it at most once, not once per field. */
    struct cell h;
    h.len = len;
    h.tag = tag;
    h.pseq = p->pseq_out++;
    h.type = type;
    h.sender = (uint16_t)ep->index;
    h.frag = frag;
    h.offset = offset;
    h.total = total;
    h.aux = aux;
    memcpy((char *)c + offsetof(struct cell, len), (char *)&h + offsetof(struct cell, len),
           CELL_HDR - offsetof(struct cell, len));
    if (ivshm__test_after_claim)
        ivshm__test_after_claim();
    /* C1/F0: the cell's contents happen-before the consumer's read */
    publish_seq(&c->seq, pos + 1);
    BUMP(ep, msgs_out, 1);
    BUMP(ep, bytes_out, len);
    wake(ep, p, idx);
}

/* Asks for a fast box once the pair is hot. */
static void maybe_ask_fbox(ivshm_ep_t *ep, struct peer *p, uint32_t idx)
{
    if (p->fbox_asked || !ep->cfg.fbox_cells ||
        ++p->sends < ep->cfg.fbox_threshold)
        return;
    uint64_t pos;
    bool fifo;
    struct cell *c = claim_cell(ep, p, &pos, &fifo);
    if (!c)
        return;
    p->fbox_asked = true;
    publish(ep, p, idx, c, pos, CELL_FBOX_REQ, 0, 0, 0, 0, 0, 0);
}

static ivshm_status_t tx_peer(ivshm_ep_t *ep, uint32_t idx, struct peer **out)
{
    struct peer *p = idx < ep->d->max_eps ? ep->peers[idx] : NULL;
    if (!p || !p->valid)
        return ivshm__fail(IVSHM_ERR_INVAL, "peer %u is not connected", idx);
    /* the receiver's memory is only ours to write while its lease lives */
    if (p->dead || !ivshm__proc_live(ep->r, p->owner_slot, p->owner_gen)) {
        p->dead = true;
        return ivshm__fail(IVSHM_ERR_PEER_DEAD, "peer %u is gone", idx);
    }
    if (!p->tx_fbox && p->fbox_asked && ep->cfg.fbox_cells)
        check_grant(ep, p);
    *out = p;
    return IVSHM_OK;
}

/* Every new message starts here: a live peer, and a fast box asked for
 * once the pair is hot. */
static ivshm_status_t tx_begin(ivshm_ep_t *ep, uint32_t idx, struct peer **out)
{
    ivshm_status_t st = tx_peer(ep, idx, out);
    if (st == IVSHM_OK)
        maybe_ask_fbox(ep, *out, idx);
    return st;
}

static int take_frag(ivshm_ep_t *ep)
{
    for (uint32_t k = 0; k < ep->cfg.frag_count; k++) {
        uint32_t i = (ep->frag_next + k) % ep->cfg.frag_count;
        if (atomic_load_explicit(&ep->fdone[i], memory_order_acquire) ==
            ep->frag_issued[i]) {
            ep->frag_next = i + 1;
            return (int)i;
        }
    }
    return -1;
}

size_t ivshm_ep_max_single(const ivshm_ep_t *ep) { return ep->cfg.frag_size; }

static ivshm_status_t send_piece(ivshm_ep_t *ep, struct peer *p, uint32_t idx,
                                 uint32_t tag, const char *buf, uint32_t len,
                                 uint64_t offset, uint64_t total)
{
    uint64_t pos;
    bool fifo;
    int f = -1;
    if (len > p->g.cell_size - CELL_HDR) {
        f = take_frag(ep);
        if (f < 0)
            return IVSHM_ERR_AGAIN;
    }
    struct cell *c = claim_cell(ep, p, &pos, &fifo);
    if (!c) {
        BUMP(ep, stalls, 1);
        return IVSHM_ERR_AGAIN;
    }
    if (f < 0) {
        memcpy((char *)c + CELL_HDR, buf, len);
        publish(ep, p, idx, c, pos, CELL_INLINE, tag, len, offset, total, 0, 0);
    } else {
        memcpy(ep->pool + (uint64_t)f * ep->cfg.frag_size, buf, len);
        ep->frag_issued[f]++;
        publish(ep, p, idx, c, pos, CELL_FRAG, tag, len, offset, total,
                (uint32_t)f, 0);
    }
    return IVSHM_OK;
}

ivshm_status_t ivshm_ep_try_send(ivshm_ep_t *ep, uint32_t peer, uint32_t tag,
                                 const void *buf, size_t len)
{
    if (len > ep->cfg.frag_size)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "%zu bytes exceed one fragment; use ivshm_ep_send",
                           len);
    struct peer *p;
    ivshm_status_t st = tx_begin(ep, peer, &p);
    if (st != IVSHM_OK)
        return st;
    return send_piece(ep, p, peer, tag, buf, (uint32_t)len, 0, len);
}

ivshm_status_t ivshm_ep_send(ivshm_ep_t *ep, uint32_t peer, uint32_t tag,
                             const void *buf, size_t len)
{
    struct peer *p;
    ivshm_status_t st = tx_begin(ep, peer, &p);
    if (st != IVSHM_OK)
        return st;
    size_t done = 0;
    unsigned spins = 0;
    do {
        uint32_t piece = len - done > ep->cfg.frag_size
                             ? ep->cfg.frag_size
                             : (uint32_t)(len - done);
        st = send_piece(ep, p, peer, tag, (const char *)buf + done, piece,
                        done, len);
        if (st == IVSHM_OK) {
            done += piece;
            spins = 0;
            continue;
        }
        /* no room: serve our own queues (the peer may be sending to us),
         * then check that the peer still lives */
        if (!ep->in_handler)
            ivshm_ep_progress(ep);
        if ((spins & 1023) == 1023 && (st = tx_peer(ep, peer, &p)) != IVSHM_OK)
            return st;
        ivshm__backoff(&spins);
        if (spins > 300)
            spins = 64; /* stay responsive: yield, do not sleep */
    } while (done < len);
    return IVSHM_OK;
}

ivshm_status_t ivshm_ep_reserve(ivshm_ep_t *ep, uint32_t peer, size_t len,
                                void **buf, ivshm_rsv_t *rsv)
{
    if (len > ep->cfg.frag_size)
        return ivshm__fail(IVSHM_ERR_INVAL, "%zu bytes exceed one fragment",
                           len);
    struct peer *p;
    ivshm_status_t st = tx_begin(ep, peer, &p);
    if (st != IVSHM_OK)
        return st;
    int f = -1;
    if (len > p->g.cell_size - CELL_HDR && (f = take_frag(ep)) < 0)
        return IVSHM_ERR_AGAIN;
    bool fifo;
    struct cell *c = claim_cell(ep, p, &rsv->pos, &fifo);
    if (!c) {
        BUMP(ep, stalls, 1);
        return IVSHM_ERR_AGAIN; /* the fragment stays free: not issued */
    }
    if (f >= 0)
        ep->frag_issued[f]++; /* ours until the receiver is done with it */
    rsv->cell = c;
    rsv->peer = peer;
    rsv->frag = f;
    rsv->len = (uint32_t)len;
    *buf = f >= 0 ? ep->pool + (uint64_t)f * ep->cfg.frag_size
                  : (char *)c + CELL_HDR;
    return IVSHM_OK;
}

ivshm_status_t ivshm_ep_commit(ivshm_ep_t *ep, const ivshm_rsv_t *rsv,
                               uint32_t tag, size_t len)
{
    struct peer *p = ep->peers[rsv->peer];
    struct cell *c = rsv->cell;
    if (len > rsv->len)
        len = rsv->len;
    publish(ep, p, rsv->peer, c, rsv->pos,
            rsv->frag >= 0 ? CELL_FRAG : CELL_INLINE, tag, (uint32_t)len, 0,
            len, rsv->frag >= 0 ? (uint32_t)rsv->frag : 0, 0);
    return IVSHM_OK;
}

void ivshm_ep_cancel(ivshm_ep_t *ep, const ivshm_rsv_t *rsv)
{
    struct peer *p = ep->peers[rsv->peer];
    if (rsv->frag >= 0) /* hand the fragment back ourselves */
        atomic_fetch_add(&ep->fdone[rsv->frag], 1);
    publish(ep, p, rsv->peer, rsv->cell, rsv->pos, CELL_NOP, 0, 0, 0, 0, 0, 0);
}

ivshm_status_t ivshm_ep_send_region(ivshm_ep_t *ep, uint32_t peer,
                                    uint32_t tag, uint64_t off, size_t len,
                                    uint64_t *ticket)
{
    if (len > UINT32_MAX ||
        !owned_by(ep->r, off, len, ep->r->slot, ep->r->gen))
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "buffer [%llu, +%zu) is not this process' region "
                           "memory",
                           (unsigned long long)off, len);
    struct peer *p;
    ivshm_status_t st = tx_begin(ep, peer, &p);
    if (st != IVSHM_OK)
        return st;
    uint64_t pos;
    bool fifo;
    struct cell *c;
    unsigned spins = 0;
    while (!(c = claim_cell(ep, p, &pos, &fifo))) {
        BUMP(ep, stalls, 1);
        if (!ep->in_handler)
            ivshm_ep_progress(ep);
        ivshm__backoff(&spins);
        if (spins > 300)
            spins = 64;
    }
    *ticket = ++p->region_tickets;
    publish(ep, p, peer, c, pos, CELL_REGION, tag, (uint32_t)len, 0, len, 0,
            off);
    return IVSHM_OK;
}

int ivshm_ep_region_done(ivshm_ep_t *ep, uint32_t peer, uint64_t ticket)
{
    if (peer >= ep->d->max_eps)
        return 1;
    /* written by the receiver when it finished copying */
    uint64_t done = atomic_load_explicit(&ep->rdone[peer], memory_order_acquire);
    struct peer *p = ep->peers[peer];
    if (p && (p->dead || !ivshm__proc_live(ep->r, p->owner_slot, p->owner_gen)))
        return -1;
    return done >= ticket;
}

/* ------------------------------------------------------------------ */
/* receiving                                                           */

static void drop(ivshm_ep_t *ep) { BUMP(ep, invalid, 1); }

/* Grants a fast box to sender p (index idx) if the budget allows. */
static void grant_fbox(ivshm_ep_t *ep, struct peer *p, uint32_t idx)
{
    if (p->rx_fbox || !ep->cfg.fbox_cells ||
        ep->fbox_granted >= ep->cfg.fbox_budget)
        return;
    uint32_t per_bank = FBOX_BANK / ep->fbox_bytes;
    if (per_bank > 32)
        per_bank = 32;
    int bank = -1, slot = -1;
    for (uint32_t b = 0; b < ep->nbanks && bank < 0; b++)
        for (uint32_t s = 0; s < per_bank; s++)
            if (!(ep->banks[b].used_mask & (1u << s))) {
                bank = (int)b;
                slot = (int)s;
                break;
            }
    if (bank < 0) {
        uint64_t off;
        if (ivshm_alloc(ep->r, FBOX_BANK, &off) != IVSHM_OK)
            return; /* region full: the pair stays on the FIFO */
        struct fbox_bank *nb =
            realloc(ep->banks, (ep->nbanks + 1) * sizeof(*nb));
        if (!nb) {
            ivshm_free(ep->r, off);
            return;
        }
        ep->banks = nb;
        ep->banks[ep->nbanks] = (struct fbox_bank){off, 0};
        bank = (int)ep->nbanks++;
        slot = 0;
    }
    ep->banks[bank].used_mask |= 1u << slot;
    uint64_t off = ep->banks[bank].off + (uint64_t)slot * ep->fbox_bytes;
    char *fb = (char *)ivshm_region_base(ep->r) + off;
    memset(fb, 0, ep->fbox_bytes);
    p->rx_fbox_hdr = (struct fbox_hdr *)fb;
    p->rx_fbox = fb + sizeof(struct fbox_hdr);
    p->rx_fbox_pos = 0;
    p->rx_fbox_released = 0;
    p->rx_fbox_slot = bank * 32 + slot;
    ep->active[ep->nactive++] = idx;
    ep->fbox_granted++;
    BUMP(ep, fbox_granted, 1);
    /* F2: the zeroed fast box happens-before the sender's first write */
    atomic_store_explicit(&ep->grants[idx], off, memory_order_release);
}

static void release_fbox(ivshm_ep_t *ep, struct peer *p, uint32_t idx)
{
    if (!p->rx_fbox)
        return;
    atomic_store(&ep->grants[idx], 0);
    int b = p->rx_fbox_slot / 32, s = p->rx_fbox_slot % 32;
    if (b < (int)ep->nbanks)
        ep->banks[b].used_mask &= ~(1u << s);
    p->rx_fbox = NULL;
    p->rx_fbox_hdr = NULL;
    for (uint32_t i = 0; i < ep->nactive; i++)
        if (ep->active[i] == idx) {
            ep->active[i] = ep->active[--ep->nactive];
            break;
        }
    ep->fbox_granted--;
}

/* Validates one published cell (already copied header) and delivers it.
 * Returns false if it must wait (not its turn in the pair's order). */
/* expect: the only sender this queue may carry (a fast box), or -1. */
static bool deliver(ivshm_ep_t *ep, const struct cell *shared, int expect)
{
    struct cell c;
    memcpy(&c, shared, CELL_HDR); /* read once */
    if (expect >= 0 && c.sender != (uint32_t)expect) {
        drop(ep); /* a fast-box cell from another sender is a forgery */
        return true;
    }
    struct peer *p = get_peer(ep, c.sender);
    if (!p) {
        /* A sender that left after publishing: what it put inline in our
         * own FIFO is still readable and still in order, so it is
         * delivered (a last "done" message must not be lost). Data in its
         * fragments or its region memory may be reused: dropped. */
        p = c.sender < ep->d->max_eps ? ep->peers[c.sender] : NULL;
        if (!p || !p->valid || !p->dead ||
            (c.type != CELL_INLINE && c.type != CELL_NOP)) {
            drop(ep); /* unknown sender, or data that is gone */
            return true;
        }
    }
    int32_t d = seq_diff(c.pseq, p->pseq_in);
    if (d > 0) {
        /* from the future: legal only within what can be in flight, and
         * never from a gone sender (the gap will not fill) */
        if (p->dead ||
            (uint32_t)d > p->g.fifo_cells + ep->cfg.fbox_cells + PENDING_MAX) {
            drop(ep);
            return true;
        }
        return false;
    }
    if (d < 0) {
        drop(ep); /* replay or forgery */
        return true;
    }
    p->pseq_in++;
    ivshm_msg_t m = {.sender = c.sender,
                     .tag = c.tag,
                     .len = c.len,
                     .offset = c.offset,
                     .total = c.total};
    switch (c.type) {
    case CELL_INLINE:
        if (c.len > p->g.cell_size - CELL_HDR || c.offset > c.total ||
            c.len > c.total - c.offset) {
            drop(ep);
            return true;
        }
        m.data = (const char *)shared + CELL_HDR;
        break;
    case CELL_FRAG:
        if (c.frag >= p->g.frag_count || c.len > p->g.frag_size ||
            c.offset > c.total || c.len > c.total - c.offset) {
            drop(ep);
            return true;
        }
        m.data = p->pool + (uint64_t)c.frag * p->g.frag_size;
        break;
    case CELL_REGION:
        if (!owned_by(ep->r, c.aux, c.len, p->owner_slot, p->owner_gen) ||
            c.offset != 0 || c.total != c.len) {
            drop(ep);
            return true;
        }
        m.data = (const char *)ivshm_region_base(ep->r) + c.aux;
        break;
    case CELL_FBOX_REQ:
        grant_fbox(ep, p, c.sender);
        return true;
    case CELL_NOP:
        return true;
    default:
        drop(ep);
        return true;
    }
    ep->in_handler = true;
    if (ep->handler)
        ep->handler(ep->harg, &m);
    ep->in_handler = false;
    if (c.type == CELL_FRAG)
        atomic_fetch_add_explicit(&p->fdone[c.frag], 1, memory_order_release);
    else if (c.type == CELL_REGION)
        atomic_fetch_add_explicit(&p->rdone[ep->index], 1,
                                  memory_order_release);
    BUMP(ep, msgs_in, 1);
    BUMP(ep, bytes_in, c.len);
    return true;
}

static struct cell *fifo_cell(ivshm_ep_t *ep, uint64_t pos)
{
    return (struct cell *)(ep->cells +
                           (pos & (ep->g.fifo_cells - 1)) * ep->g.cell_size);
}

static void peer_died(ivshm_ep_t *ep, uint32_t idx)
{
    struct peer *p = ep->peers[idx];
    if (!p || p->dead)
        return;
    p->dead = true;
    /* its fast box (our memory) is drained by poll_fboxes, then released:
     * what it published before it left is still delivered */
    BUMP(ep, dead_peers, 1);
    if (ep->ev)
        ep->ev(ep->earg, IVSHM_EV_PEER_DEAD, idx);
}

/* A pending cell that stays unpublished: drop it if its claimer is dead,
 * or unknown for longer than a lease. */
static bool pending_abandoned(ivshm_ep_t *ep, struct pending *pd, uint64_t now)
{
    if (now - pd->first_seen < STUCK_CHECK_NS)
        return false;
    uint32_t claim = atomic_load(&fifo_cell(ep, pd->pos)->claim);
    if (claim && claim - 1 < ep->d->max_eps) {
        struct peer *p = ep->peers[claim - 1];
        uint64_t w = atomic_load(&ep->d->dir[claim - 1].word);
        if (DIR_STATE(w) != DIR_READY ||
            !ivshm__proc_live(ep->r, DIR_SLOT(w), DIR_GEN(w))) {
            if (p)
                peer_died(ep, claim - 1);
            return true;
        }
        return false;
    }
    return now - pd->first_seen >
           (uint64_t)ep->r->g.lease_timeout_ms * 1000000ull;
}

static int poll_fifo(ivshm_ep_t *ep, int budget)
{
    int n = 0;
    uint64_t now = 0;
    /* pending cells first, in position order */
    for (uint32_t i = 0; i < ep->npend && n < budget;) {
        struct pending *pd = &ep->pend[i];
        struct cell *c = fifo_cell(ep, pd->pos);
        bool done;
        if (atomic_load_explicit(&c->seq, memory_order_acquire) == pd->pos + 1) {
            done = deliver(ep, c, -1);
            n += done;
        } else {
            if (!now)
                now = ivshm__mono_ns();
            done = pending_abandoned(ep, pd, now);
            if (done)
                drop(ep);
        }
        if (done) {
            memmove(pd, pd + 1, (ep->npend - i - 1) * sizeof(*pd));
            ep->npend--;
        } else {
            i++;
        }
    }
    /* then new cells */
    while (n < budget) {
        uint64_t pos = ep->rx_pos;
        struct cell *c = fifo_cell(ep, pos);
        if (atomic_load_explicit(&c->seq, memory_order_acquire) == pos + 1) {
            if (deliver(ep, c, -1)) {
                n++;
                ep->rx_pos++;
                continue;
            }
        } else {
            uint64_t h = atomic_load_explicit(&ep->ctl->head,
                                              memory_order_relaxed);
            /* nothing claimed here yet (or a head that lies): done */
            if ((int64_t)(h - pos) <= 0 || h - pos > ep->g.fifo_cells)
                break;
        }
        /* claimed but unpublished, or not its turn: keep it pending */
        if (ep->npend == PENDING_MAX)
            break;
        if (!now)
            now = ivshm__mono_ns();
        ep->pend[ep->npend++] = (struct pending){pos, now};
        ep->rx_pos++;
    }
    /* T0: release what we are done with, in batches */
    uint64_t tail = ep->npend ? ep->pend[0].pos : ep->rx_pos;
    if (tail != ep->tail_published &&
        (n < budget || tail - ep->tail_published >= ep->g.fifo_cells / 4)) {
        atomic_store_explicit(&ep->ctl->tail, tail, memory_order_release);
        ep->tail_published = tail;
    }
    return n;
}

static int poll_fboxes(ivshm_ep_t *ep, int budget)
{
    int n = 0;
    uint32_t cells = ep->cfg.fbox_cells;
    for (uint32_t i = 0; i < ep->nactive && n < budget; i++) {
        uint32_t idx = ep->active[i];
        struct peer *p = ep->peers[idx];
        if (!p || !p->rx_fbox)
            continue;
        int k = 0;
        bool drained = false;
        while (n < budget) {
            uint64_t pos = p->rx_fbox_pos;
            struct cell *c =
                (struct cell *)(p->rx_fbox + (pos & (cells - 1)) * ep->g.cell_size);
            if (atomic_load_explicit(&c->seq, memory_order_acquire) != pos + 1) {
                drained = true;
                break;
            }
            if (!deliver(ep, c, (int)idx))
                break; /* its FIFO predecessors first */
            p->rx_fbox_pos++;
            n++;
            k++;
            if (!p->rx_fbox)
                break; /* sender died in the handler's wake */
        }
        if (p->rx_fbox && p->dead && drained) {
            release_fbox(ep, p, idx); /* moves the last active into slot i */
            i--;
            continue;
        }
        if (p->rx_fbox && k &&
            (p->rx_fbox_pos - p->rx_fbox_released >= cells / 4 || n < budget)) {
            /* F1: release consumed fast-box cells */
            atomic_store_explicit(&p->rx_fbox_hdr->tail, p->rx_fbox_pos,
                                  memory_order_release);
            p->rx_fbox_released = p->rx_fbox_pos;
        }
    }
    return n;
}

/* Reclaims dead leases (a dead process of this VM is found at once, one of
 * another VM after the lease timeout), then drops the peers that died. */
static void check_liveness(ivshm_ep_t *ep)
{
    ivshm_gc(ep->r, NULL);
    for (uint32_t i = 0; i < ep->d->max_eps; i++) {
        struct peer *p = ep->peers[i];
        if (!p || p->dead || !p->valid)
            continue;
        uint64_t w = atomic_load(&ep->d->dir[i].word);
        if (w != p->entry_word ||
            !ivshm__proc_live(ep->r, p->owner_slot, p->owner_gen))
            peer_died(ep, i);
    }
}

int ivshm_ep_progress(ivshm_ep_t *ep)
{
    int budget = (int)ep->cfg.max_per_poll;
    int n = poll_fboxes(ep, budget);
    n += poll_fifo(ep, budget - n);
    if (++ep->polls % LIVENESS_PERIOD == 0 || (ep->npend && n == 0)) {
        uint64_t now = ivshm__mono_ns();
        if (now - ep->last_liveness > LIVENESS_NS) {
            ep->last_liveness = now;
            check_liveness(ep);
        }
    }
    return n;
}

ivshm_status_t ivshm_ep_wait(ivshm_ep_t *ep, int timeout_ms)
{
    _Atomic uint64_t *nw = &ep->ctl->notify;
    uint64_t grace = UINT64_MAX;
    if (!atomic_load_explicit(&ep->ctl->may_block, memory_order_relaxed)) {
        atomic_store(&ep->ctl->may_block, 1);
        grace = GRACE_NS; /* senders may not see the flag yet: see wake() */
    }
    uint64_t now = ivshm__mono_ns();
    uint64_t deadline =
        timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        uint64_t w = atomic_load(nw);
        /* N0 (receiver side): arm, then re-check the queues */
        while (!(w & 1) && !atomic_compare_exchange_weak(nw, &w, w | 1))
            ;
        w |= 1;
        if (ivshm_ep_progress(ep) > 0) {
            atomic_compare_exchange_strong(nw, &w, w & ~1ull);
            return IVSHM_OK;
        }
        uint64_t t = deadline == UINT64_MAX ? UINT64_MAX : deadline - now;
        if (grace < t)
            t = grace;
        ivshm_status_t st = ep->notifier.wait(
            ep->notifier.ctx, (const volatile uint64_t *)nw, w, t);
        uint64_t cur = w;
        atomic_compare_exchange_strong(nw, &cur, w & ~1ull); /* disarm */
        if (st == IVSHM_OK)
            return IVSHM_OK;
        now = ivshm__mono_ns();
        if (now >= deadline)
            return IVSHM_ERR_AGAIN;
        grace = UINT64_MAX; /* after the first round, every sender fences */
    }
}

void ivshm_ep_stats(const ivshm_ep_t *ep, ivshm_ep_stats_t *s)
{
    s->msgs_in = ep->st.msgs_in;
    s->bytes_in = ep->st.bytes_in;
    s->msgs_out = ep->st.msgs_out;
    s->bytes_out = ep->st.bytes_out;
    s->stalls_full = ep->st.stalls;
    s->invalid_dropped = ep->st.invalid;
    s->dead_peers = ep->st.dead_peers;
    s->fbox_granted = ep->st.fbox_granted;
    s->fbox_used = ep->st.fbox_used;
    s->wakeups = ep->st.wakeups;
    s->doorbell_irqs = ep->db ? ep->db->irqs : 0;
    s->doorbell_vector =
        ep->db && ep->db->wait_fd >= 0 ? (int32_t)ep->db->vector : -1;
}

/* ------------------------------------------------------------------ */
/* inspection                                                          */

ivshm_status_t ivshm_region_endpoints(ivshm_region_t *r, ivshm_ep_visit_fn fn,
                                      void *arg)
{
    for (uint32_t j = 0; j < r->g.job_slots; j++) {
        ivshm_job_info_t ji;
        if (ivshm_region_job(r, j, &ji) != IVSHM_OK ||
            ji.state != SLOT_ALIVE || !ji.area_off)
            continue;
        uint32_t max = (uint32_t)(ji.area_size / DIR_ENTRY_SIZE);
        struct dir_entry *dir =
            (struct dir_entry *)((char *)ivshm_region_base(r) + ji.area_off);
        for (uint32_t i = 0; i < max && i < MAX_EPS_LIMIT; i++) {
            uint64_t w = atomic_load(&dir[i].word);
            if (DIR_STATE(w) != DIR_READY)
                continue;
            uint64_t off = atomic_load(&dir[i].ctl_off);
            if (!owned_by(r, off, sizeof(struct ep_ctl), DIR_SLOT(w),
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
            fn(arg, ji.key, i, dir[i].pid, &s);
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
                   ivshm__proc_live(d->r, DIR_SLOT(w), DIR_GEN(w))) {
            uint64_t off = atomic_load(&d->dir[i].ctl_off);
            struct ctl_geom g;
            if (check_ctl(d->r, d->max_eps, i, w, off, &g) != IVSHM_OK) {
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
