/*
 * Private state of the channel layer, shared by its parts:
 *   chan_config.c  configuration table
 *   chan_domain.c  domains, inspection (`ivshm stat`, `ivshm check`)
 *   chan_peer.c    validation of a peer's published layout, peer identity
 *   chan_ep.c      endpoints: create, destroy, address, connect, wait
 *   chan_fifo.c    the multi-producer receive FIFO (claim, poll, pending)
 *   chan_fbox.c    fast boxes (grant, claim, poll, release)
 *   chan_frag.c    the fragment pool (lend, acknowledge, take back)
 *   chan_send.c    the send paths, single-copy region sends, wake-ups
 *   chan_deliver.c delivery of one published cell
 *   chan_recv.c    progress, liveness
 * chan_layout.h owns the shared layout; nothing here lives in the region.
 */
#ifndef IVSHM_CHAN_INTERNAL_H
#define IVSHM_CHAN_INTERNAL_H

#include "chan_layout.h"
#include "ivshm/channel.h"

#include <string.h>

#pragma GCC visibility push(hidden) /* as internal.h */

#define PENDING_MAX 64
#define STUCK_CHECK_NS 2000000ull /* look at a pending cell's owner after */
#define GAP_WAIT_NS 20000000ull   /* a pair's missing piece: resync after */
/* Bounds of the configuration table (chan_config.c), which checks our
 * numbers and every peer's: any message a cell holds fits a fragment
 * (ivshm_ep_try_send2 relies on it). */
#define CELL_SIZE_MAX 4096u
#define FRAG_SIZE_MIN 4096u
#define LIVENESS_PERIOD 1024      /* progress calls between clock reads */
#define LIVENESS_NS 100000000ull  /* peer checks at most every 100 ms */
#define GC_MAX_NS 1000000000ull   /* a region-wide collection at most 1/s */
#define FBOX_BANK 65536u          /* bytes allocated per fast-box bank */
/* A box larger than a bank (a window of 64 cells of 1088 bytes) takes an
 * allocation of its own; this bounds what one grant costs the receiver. */
#define FBOX_MAX (4u * FBOX_BANK)

/* A claimed box entry, as ivshm__publish gets it in place of a FIFO
 * position (those stay below 2^63): the entry's seq and the bytes of the
 * cell it holds. */
#define FBOX_POS_FLAG (1ull << 63)
#define FBOX_POS(seq, bytes)                                                 \
    (FBOX_POS_FLAG | ((uint64_t)(uint16_t)(seq) << 16) | (uint16_t)(bytes))

/* Copies n bytes, n small and known only at run time (a message's head
 * and body): a few overlapping moves of fixed size, not a call of memcpy,
 * whose dispatch costs more than such a copy. */
static inline void ivshm__copy(void *dst, const void *src, size_t n)
{
    char *d = dst;
    const char *s = src;
    if (n >= 8 && n <= 16) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n > 16 && n <= 32) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 4 && n < 8) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else if (n && n < 4) {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    } else if (n) {
        memcpy(d, s, n);
    }
}

/* The store that publishes a cell or a box entry (C1/F0). GCC's TSan
 * cannot model the fence of N0 (chan_send.c): its builds store seq_cst. */
static inline void ivshm__publish_word(_Atomic uint64_t *w, uint64_t v)
{
#if defined(__SANITIZE_THREAD__)
    atomic_store_explicit(w, v, memory_order_seq_cst);
#else
    atomic_store_explicit(w, v, memory_order_release);
#endif
}

/* 16-bit entry seqs (FBOX_SEQ) need fewer than 2^16 entries in a lap */
_Static_assert(FBOX_MAX / FBOX_ALIGN <= 32768, "fast-box entries per lap");

/* How far ahead of the pair's next a piece may be (the receiver's FIFO,
 * one box of the smallest entries, what it parks). */
static inline uint64_t pseq_window(const struct ctl_geom *g)
{
    return (uint64_t)g->fifo_cells +
           fbox_ring_bytes(g->fbox_cells, g->cell_size) / FBOX_ALIGN +
           PENDING_MAX;
}
/* FBOX_MSG entries carry 16 bits of the pair's sequence: only where no
 * two pieces in flight can share them. Both sides judge by the receiver's
 * geometry. */
static inline bool fbox_msg_ok(const struct ctl_geom *g)
{
    return pseq_window(g) < 32768;
}
/* A box of the receiver's geometry g takes message entries of up to a
 * 32nd of its ring, less the entry's word (about 32 of the longest fit
 * one lap: 31 in the MPI component's ring, where they end on a line's
 * end)... */
#define FBOX_MSG_LAP_SHARE 32u
/* ...or a cell's inline room where that is more, never more than the
 * smallest fragment (a message a box takes goes in one piece by any
 * other form too): the longest FBOX_MSG entry (message bytes after its
 * word), -1 where FBOX_MSG entries are not allowed. Both sides judge by
 * the receiver's geometry (layout 5; docs/channels.md, "Box messages
 * longer than a cell"). */
static inline int32_t fbox_msg_limit(const struct ctl_geom *g)
{
    if (!g->fbox_cells || !fbox_msg_ok(g))
        return -1;
    uint64_t share =
        fbox_ring_bytes(g->fbox_cells, g->cell_size) / FBOX_MSG_LAP_SHARE;
    share = share > 8 ? share - 8 : 0; /* less the entry's word */
    if (share > FRAG_SIZE_MIN)
        share = FRAG_SIZE_MIN;
    uint32_t in_cell = g->cell_size - CELL_SHORT_HDR;
    return (int32_t)(share > in_cell ? share : in_cell);
}

struct ivshm_domain {
    ivshm_region_t *r;
    ivshm_job_t *job;
    struct dir_entry *dir;
    uint32_t max_eps;
    uint32_t job_idx, job_gen;
    char key[IVSHM_JOB_KEY_MAX + 1];
};

/* A peer's lives_seen before its first full check: sends compare the
 * region's count masked to 63 bits (LIVES_MASK), which never reads as
 * this, whatever the shared word holds. */
#define LIVES_UNSEEN UINT64_MAX
#define LIVES_MASK (UINT64_MAX >> 1)
/* What we know of one life of a peer endpoint: its validated layout and
 * both directions' state. */
struct peer {
    bool valid, dead;
    /* its queue's head and tail were found more than a lap apart, which
     * no claim makes: damaged, its sends fail with IVSHM_ERR_CORRUPT */
    bool damaged;
    uint64_t entry_word;
    uint32_t epoch;
    uint32_t owner_slot, owner_gen;
    /* kept when this life was loaded (a connect, or a receive that met
     * a new life), so that a send's checks are loads and compares: its
     * directory entry, its owner's registry word and the value that word
     * holds while that life lasts */
    struct dir_entry *entry;
    _Atomic uint64_t *owner_word;
    uint64_t owner_alive;
    /* the region's count of ended lives (ivshm__life_ended) that a full
     * check of this peer and of our lease found all alive under;
     * LIVES_UNSEEN until one did, and again once it is dead or damaged */
    uint64_t lives_seen;
    struct ep_ctl *ctl;
    struct ctl_geom g; /* private, validated copy */
    uint32_t fifo_shift; /* log2(g.fifo_cells): the lap of a position */
    char *cells;
    _Atomic uint64_t *grants, *rdone, *fdone;
    char *pool;
    /* we send to it */
    uint64_t cached_tail;
    uint32_t pseq_out;
    uint32_t sends;
    bool fbox_asked;
    char *tx_fbox; /* fast box it granted us (its ring) */
    struct fbox_hdr *tx_fbox_hdr;
    /* bytes written (skips included) and released, as positions; the
     * write offset in the ring; entries written (FBOX_SEQ) */
    uint64_t tx_fbox_pos, tx_fbox_tail;
    uint32_t tx_fbox_off, tx_fbox_ring;
    uint16_t tx_fbox_seq;
    bool tx_fbox_msg; /* FBOX_MSG entries allowed (fbox_msg_ok) */
    uint32_t tx_fbox_msg_max; /* and the longest (fbox_msg_limit) */
    /* longer messages than this (a cell's inline room) go into the box
     * only in answer and while at most a quarter of it is in use
     * (chan_send.c, long_entry_ok), and not for tx_long_skip more tries
     * after a look at its tail found it busy */
    uint32_t tx_fbox_long_above;
    uint32_t tx_long_skip;
    /* pseq_in when the last message longer than a cell went to this peer:
     * a reply came in since, or not (a stream) */
    uint32_t tx_long_pseq_in;
    /* line starts before this position (as tx_fbox_pos) and after the
     * write position were zeroed ahead, after a publish
     * (ivshm__fbox_zero_ahead) */
    uint64_t tx_fbox_zeroed;
    /* reservations holding an entry of its box: while one is open, the
     * box takes nothing more. A piece gets its place in the pair's order
     * when it is published, and the box is read in its own order, which
     * cannot wait for a later entry (the FIFO parks a piece from the
     * future); and FBOX_MSG entries held behind past a resync could fall
     * more than 2^15 behind, where their 16 bits alias. */
    uint32_t tx_box_held;
    /* messages shorter than this go into its box as they are, with no
     * other admission check but the tag's (chan_send.c, send_usual): a
     * box granted, FBOX_MSG entries allowed, no reservation held, and no
     * longer than both tx_fbox_msg_max and tx_fbox_long_above; 0 where
     * none may (ivshm__tx_usual_update keeps it) */
    uint32_t tx_usual_below;
    uint64_t region_tickets;
    bool peer_may_block; /* it has blocked once: wake it with a fence */
    /* we receive from it */
    uint32_t pseq_in;
    char *rx_fbox; /* fast box we granted it (its ring) */
    struct fbox_hdr *rx_fbox_hdr;
    uint64_t rx_fbox_pos, rx_fbox_released; /* bytes read, released */
    uint32_t rx_fbox_off; /* read offset in the ring */
    uint16_t rx_fbox_seq; /* entries read */
    bool rx_fbox_bad; /* an entry broke the box's rules: not read again */
    uint64_t rx_fbox_wait; /* since when its box waits on a gap, 0: not */
    bool rx_held; /* a piece of it waits for its lease (not a gap) */
    /* a gap in its pieces: the lowest waiting pseq seen in progress call
     * gap_pass, and whether the oldest wait is over (resync then) */
    uint32_t gap_low, gap_pass;
    bool gap_due;
    uint32_t claim_pass; /* progress call that found a cell it claimed
                          * still unpublished (its gap may yet fill) */
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
    _Atomic uint64_t *lives_ended; /* in the region's header */
    uint32_t index;
    uint32_t epoch;
    ivshm_ep_config_t cfg;
    struct ep_ctl *ctl;
    uint64_t ctl_off;
    struct ctl_geom g;
    char *cells;
    char *pool;
    _Atomic uint64_t *grants, *rdone, *fdone;
    uint64_t *frag_issued; /* lend number of each fragment's last loan */
    uint32_t *frag_dest;   /* the peer it was lent to */
    uint8_t *frag_held;    /* reserved by the caller, not yet published:
                              its holder may still write it, so a gone
                              peer does not free it (cancel/commit do) */
    uint32_t frag_next;
    uint64_t frag_check_ns; /* last look for fragments of gone peers */
    bool own_ahead; /* PREFETCHW takes lines ahead (ivshm__prefetch_own) */
    ivshm_msg_handler_t handler;
    ivshm_whole_handler_t whole; /* whole messages, where set */
    void *harg;
    ivshm_event_handler_t ev;
    void *earg;
    ivshm_notifier_t notifier;
    struct ivshm__doorbell *db; /* NULL without the guest driver */
    struct peer **peers; /* lazily allocated, by directory index */
    uint32_t *active;    /* peers that hold a fast box we granted */
    uint32_t nactive;
    uint32_t *gapped;    /* peers with a gap seen in this progress call */
    uint32_t ngapped;
    /* what this progress call saw of our queues: a gap is resolved only
     * when every queue was looked at to its end and no unpublished cell
     * of an unknown claimer is parked (the missing piece is not there) */
    bool pass_fifo_whole, pass_fbox_whole, pass_unknown_claim;
    /* consumer state */
    uint64_t rx_pos;
    uint64_t tail_published;
    struct pending pend[PENDING_MAX];
    uint32_t npend;
    uint32_t polls;
    /* the usual path delivered since the stats were last mirrored: the
     * next call that finds nothing in the one box mirrors them
     * (chan_recv.c, settle), or any other mirror (mirror_stats) */
    bool mirror_due;
    uint64_t last_liveness, last_gc;
    bool liveness_due; /* a sleeper's next pass checks liveness (time-gated) */
    bool lease_reported;
    uint64_t blocking_since; /* first wait or event fd: may_block set */
    bool blocking; /* the truth of ctl->may_block, which any VM may clear */
    struct fbox_bank *banks;
    uint32_t nbanks;
    uint32_t fbox_bytes; /* a box we grant: header, ring and slack */
    uint32_t fbox_ring;  /* its ring: fbox_ring_bytes */
    int32_t fbox_msg_max; /* longest FBOX_MSG entry we take, -1: none */
    uint32_t fbox_granted;
    bool in_handler;
    struct {
        uint64_t msgs_in, bytes_in, invalid, dead_peers, fbox_granted;
        uint64_t msgs_out, bytes_out, stalls, fbox_used, wakeups;
    } st; /* authoritative; mirrored to the shared stats lines */
};

/* Counts locally and mirrors the value to the shared stats line (single
 * writer, for `ivshm stat`): what another VM scribbles there never feeds
 * back into our own figures. */
#define BUMP(ep, field, by)                                                  \
    atomic_store_explicit(&(ep)->ctl->field, (ep)->st.field += (by),         \
                          memory_order_relaxed)

/* Sets p->tx_usual_below from what it sums up; after any of those
 * changes (a grant picked up, a reservation of a box entry opened or
 * closed). */
static inline void ivshm__tx_usual_update(struct peer *p)
{
    uint32_t max = p->tx_fbox_msg_max < p->tx_fbox_long_above
                       ? p->tx_fbox_msg_max
                       : p->tx_fbox_long_above;
    p->tx_usual_below =
        p->tx_fbox && p->tx_fbox_msg && !p->tx_box_held ? max + 1 : 0;
}

/* chan_peer.c */
uint64_t ivshm__ctl_size_for(const ivshm_ep_config_t *c, uint32_t max_eps,
                             struct ctl_geom *g);
ivshm_status_t ivshm__check_ctl(ivshm_region_t *r, uint32_t max_eps,
                                uint32_t idx, uint64_t w, uint64_t off,
                                struct ctl_geom *gout);
/* Is [off, off+len) wholly memory of process lease (slot, gen)? */
bool ivshm__owned_by(const ivshm_region_t *r, uint64_t off, uint64_t len,
                     uint32_t slot, uint32_t gen);
ivshm_status_t ivshm__load_peer(ivshm_ep_t *ep, uint32_t idx,
                                uint64_t want_word, struct peer *p);
/* Replaces our record of index idx with tmp (a new life of that index). */
struct peer *ivshm__set_peer(ivshm_ep_t *ep, uint32_t idx,
                             const struct peer *tmp);
/* The state of the process that owns the life p records (every record is
 * a loaded life): its registry word, through the pointer kept at the load,
 * answers the live case inline (a send asks it per message), anything
 * else gets the full answer. */
static inline enum ivshm_proc_state ivshm__owner_state(ivshm_ep_t *ep,
                                                       const struct peer *p)
{
    if (atomic_load(p->owner_word) == p->owner_alive)
        return PROC_LIVE;
    return ivshm__proc_state_slow(ep->r, p->owner_slot, p->owner_gen);
}
/* Does p's directory entry still name the life p records (D0, reader)? */
static inline bool ivshm__entry_same(const struct peer *p)
{
    return atomic_load_explicit(&p->entry->word, memory_order_acquire) ==
               p->entry_word &&
           atomic_load_explicit(&p->entry->epoch, memory_order_relaxed) ==
               p->epoch;
}
/* Has this life of the peer ended (index re-claimed, lease gone)? A lease
 * in doubt is not gone. */
bool ivshm__peer_gone(ivshm_ep_t *ep, const struct peer *p);
/* The peer that sent a cell of epoch `epoch` (CELL_EPOCH) from index idx:
 * our record of that life (possibly dead), a newly loaded one, or NULL
 * (*wait: the sender's lease is in doubt, ask again later). */
struct peer *ivshm__rx_peer(ivshm_ep_t *ep, uint32_t idx, uint16_t epoch,
                           bool *wait);
void ivshm__peer_died(ivshm_ep_t *ep, uint32_t idx);

/* chan_fifo.c */
struct cell *ivshm__fifo_claim(ivshm_ep_t *ep, struct peer *p, uint64_t *pos);
int ivshm__fifo_poll(ivshm_ep_t *ep, int budget);
/* A published cell waits at the head of our FIFO (reads nothing else). */
bool ivshm__fifo_ready(ivshm_ep_t *ep);
/* Nothing to do in the FIFO: nothing claimed past what we read (a claimed
 * cell, published or not, moves head past rx_pos, so a stopped claimer
 * does not hide the cells after its own), nothing parked, nothing read
 * that the tail does not release yet (a pass that ended on its budget
 * left that to the next). Inline: every progress call asks it first.
 * The head's load is seq_cst and comes first: a waiter arms its wake-up
 * bit (a seq_cst RMW) and then calls progress; N0 needs this load ordered
 * after the arm. */
static inline bool ivshm__fifo_idle(ivshm_ep_t *ep)
{
    return atomic_load(&ep->ctl->head) == ep->rx_pos && !ep->npend &&
           ep->tail_published == ep->rx_pos;
}

/* chan_fbox.c */
void ivshm__fbox_check_grant(ivshm_ep_t *ep, struct peer *p);
/* Room for an entry of len bytes after its word in the box p granted us:
 * its place, with its seq in *seq, or NULL if there is no box or no room.
 * The word after it is zeroed where that is free (the usual case: unless
 * it is a line start zeroed ahead). */
char *ivshm__fbox_entry(struct peer *p, uint32_t len, uint16_t *seq);
/* ivshm__fbox_entry's usual case inline (a send's every call): the entry
 * fits before the ring's end, with room after it by the tail we know. */
static inline char *ivshm__fbox_entry_fast(struct peer *p, uint32_t len,
                                           uint16_t *seq)
{
    uint32_t off = p->tx_fbox_off, ring = p->tx_fbox_ring;
    uint32_t size = fbox_entry_size(off, len);
    if (p->tx_fbox && size < ring - off &&
        p->tx_fbox_pos - p->tx_fbox_tail < ring - size) {
        char *at = p->tx_fbox + off;
        p->tx_fbox_pos += size;
        p->tx_fbox_off = off + size;
        /* F0: the word after it reads "nothing yet" (chan_fbox.c), unless
         * it starts a line zeroed ahead */
        if (((off + size) & 63u) || p->tx_fbox_pos >= p->tx_fbox_zeroed)
            atomic_store_explicit((_Atomic uint64_t *)(at + size), 0,
                                  memory_order_relaxed);
        *seq = ++p->tx_fbox_seq;
        return at;
    }
    return ivshm__fbox_entry(p, len, seq);
}
/* An FBOX_MSG entry of more bytes than this (message and the front end's
 * header) stores the bytes in its word's line last (chan_send.c,
 * copy_word_line_last); shorter ones are copied in order, where that
 * other order lost at 256 B (docs/channels.md, "The word's line last"). */
#define FBOX_WORD_LINE_LAST_ABOVE 320u
/* Tries at a message longer than a cell that skip the box without a
 * look at its tail after one found it busy (chan_send.c, long_entry_ok) */
#define FBOX_LONG_SKIP 16u
_Static_assert(FBOX_WORD_LINE_LAST_ABOVE >= 64, "longer than the word's line");
/* How far ahead of the write position line starts are zeroed at least,
 * and how much further each time the first is not (a few lines at once,
 * not one every other small message). */
#define FBOX_AHEAD 256u
#define FBOX_AHEAD_BATCH 128u
/* After a publish: zeroes the first word of the lines that start within
 * FBOX_AHEAD (+ FBOX_AHEAD_BATCH) bytes after the write position (where
 * free, before the ring's end), so that an entry which ends on one of
 * them finds its terminator done and publishes without taking that line
 * first (a store before the publish held the publish back until it had
 * the line: the channel primitive took 362-387 ns at 64 B with it,
 * 237-277 without).
 * Ordered before a later entry's word (a release store) like any other
 * terminator; a line start is written again only as part of an entry. */
static inline void ivshm__fbox_zero_ahead(struct peer *p)
{
    uint64_t pos = p->tx_fbox_pos;
    if (p->tx_fbox_zeroed >= pos + FBOX_AHEAD)
        return; /* done ahead already: most small messages */
    uint32_t off = p->tx_fbox_off, ring = p->tx_fbox_ring;
    uint64_t x = pos + (64u - (off & 63u)); /* the next line start */
    if (x < p->tx_fbox_zeroed)
        x = p->tx_fbox_zeroed;
    for (; x < pos + FBOX_AHEAD + FBOX_AHEAD_BATCH; x += 64) {
        uint64_t at = off + (x - pos);
        if (at >= ring || x - p->tx_fbox_tail >= ring)
            break; /* the ring's start is every lap's; beyond: not free */
        atomic_store_explicit((_Atomic uint64_t *)(p->tx_fbox + at), 0,
                              memory_order_relaxed);
    }
    if (x > p->tx_fbox_zeroed)
        p->tx_fbox_zeroed = x;
}
/* Asks for the line at `at` in our cache, ready to be written (a hint:
 * no store, no fault). x86-64's PREFETCHW, emitted whatever the target
 * flags say (without -mprfchw GCC turns the builtin's write hint into a
 * read); only where the processor has it (ep->own_ahead). */
static inline void ivshm__prefetch_own(const char *at)
{
#if defined(__x86_64__)
    __asm__ volatile("prefetchw %0" : : "m"(*at));
#else
    __builtin_prefetch(at, 1, 3);
#endif
}
/* Takes the lines of the box that the next `bytes` after the write
 * position span beyond the zeroing ahead into our cache for writing
 * (those that start before the ring's end and before what the tail we
 * cached frees), so that a long message's next one of its size is copied
 * into lines that are ours, not taken one by one from the receiver that
 * read them a lap before. */
static inline void ivshm__fbox_own_ahead(struct peer *p, uint32_t bytes)
{
    uint64_t pos = p->tx_fbox_pos;
    uint64_t lap = pos - p->tx_fbox_off; /* where this lap began */
    uint64_t end = pos + bytes;
    if (end > lap + p->tx_fbox_ring)
        end = lap + p->tx_fbox_ring; /* the ring's start is every lap's */
    if (end > p->tx_fbox_tail + p->tx_fbox_ring)
        end = p->tx_fbox_tail + p->tx_fbox_ring; /* beyond: not free */
    uint64_t x = p->tx_fbox_zeroed > pos ? p->tx_fbox_zeroed : pos;
    if (__builtin_expect(ivshm__test_own != NULL, 0)) {
        if (x < end)
            ivshm__test_own(p->tx_fbox + (x - lap), p->tx_fbox + (end - lap));
        return;
    }
    for (; x < end; x += 64)
        ivshm__prefetch_own(p->tx_fbox + (x - lap));
}
/* The same for a cell of `bytes` bytes (its header included) in an
 * FBOX_CELL entry; *pos is what ivshm__publish needs (FBOX_POS). */
struct cell *ivshm__fbox_claim(struct peer *p, uint32_t bytes, uint64_t *pos);
void ivshm__fbox_grant(ivshm_ep_t *ep, struct peer *p, uint32_t idx);
void ivshm__fbox_release(ivshm_ep_t *ep, struct peer *p, uint32_t idx);
int ivshm__fbox_poll(ivshm_ep_t *ep, int budget);
/* A published cell waits in one of the fast boxes we granted. */
bool ivshm__fbox_ready(ivshm_ep_t *ep);
/* The word of the entry at the head of p's box, if one is published
 * there (F0, reader). A box found broken is not read again. */
static inline bool ivshm__fbox_head_entry(const struct peer *p, uint64_t *w)
{
    if (p->rx_fbox_bad)
        return false;
    uint64_t v = atomic_load_explicit(
        (_Atomic uint64_t *)(p->rx_fbox + p->rx_fbox_off),
        memory_order_acquire);
    *w = v;
    return FBOX_KIND(v) && FBOX_SEQ(v) == (uint16_t)(p->rx_fbox_seq + 1);
}
/* The fields of an entry's word that tell the usual entry
 * (chan_fbox_read.h, usual_entry): its seq, its kind and the pair's
 * sequence. */
#define FBOX_USUAL_MASK FBOX_WORD(0xffff, 0xff, 0, 0, 0xffff)
/* Those fields of the usual entry at the head of p's box: the box's next
 * entry, a message, the pair's next piece. */
static inline uint64_t ivshm__fbox_usual_word(const struct peer *p)
{
    return FBOX_WORD(p->rx_fbox_seq + 1, FBOX_MSG, 0, 0, p->pseq_in);
}
/* Bytes read from p's box that its tail does not release yet (a pass
 * that ended on its budget leaves them to the next call). */
static inline bool ivshm__fbox_unreleased(const struct peer *p)
{
    return p->rx_fbox_pos != p->rx_fbox_released;
}
/* Nothing to do in any fast box: none has a published cell at its head
 * or bytes read that its tail does not release yet, none belongs to a
 * sender that died. Inline, as ivshm__fifo_idle. */
static inline bool ivshm__fbox_idle(ivshm_ep_t *ep)
{
    uint64_t w;
    for (uint32_t i = 0; i < ep->nactive; i++) {
        const struct peer *p = ep->peers[ep->active[i]];
        /* a dead sender's drained box is released by the poll */
        if (p && p->rx_fbox &&
            (p->dead || ivshm__fbox_unreleased(p) ||
             ivshm__fbox_head_entry(p, &w)))
            return false;
    }
    return true;
}

/* chan_frag.c */
int ivshm__frag_take(ivshm_ep_t *ep);
/* Takes the first `bytes` (at most FRAG_OWN_MAX) of the fragment the
 * next take looks at first into our cache for writing, if it is free (a
 * hint: its receiver read its lines at its last loan, a copy would take
 * them one by one). */
void ivshm__frag_own_next(ivshm_ep_t *ep, uint32_t bytes);
/* Lends fragment f to peer idx: returns the lend number the cell carries. */
uint64_t ivshm__frag_lend(ivshm_ep_t *ep, int f, uint32_t idx);
/* Acknowledges lend `lend` of fragment f in a sender's table (receiver,
 * or the owner taking it back): the counter only moves forward. */
void ivshm__frag_ack(_Atomic uint64_t *done, uint64_t lend);
/* Takes back the fragments lent to peer idx (it is gone). */
void ivshm__frag_reclaim(ivshm_ep_t *ep, uint32_t idx);
/* Waits (bounded) until receivers gave back what we lent. */
void ivshm__frag_linger(ivshm_ep_t *ep);

/* chan_deliver.c */
/* Around every handler call: the piece takes its place in the pair's
 * order, and the endpoint knows it is inside a handler. */
static inline void ivshm__hand_over_begin(ivshm_ep_t *ep, struct peer *p)
{
    p->pseq_in++;
    p->rx_held = false;
    ep->in_handler = true;
}
static inline void ivshm__hand_over_end(ivshm_ep_t *ep)
{
    ep->in_handler = false;
}
/* The event handler, called as a handler: it may run in the middle of a
 * pass (a lender found gone while its piece is delivered, an abandoned
 * claim among the parked cells), so its own progress must not start
 * another pass (ivshm_ep_progress). It may also come from a message
 * handler's send: the flag is restored, not cleared. */
static inline void ivshm__event(ivshm_ep_t *ep, int kind, uint32_t peer)
{
    if (!ep->ev)
        return;
    bool was = ep->in_handler;
    ep->in_handler = true;
    ep->ev(ep->earg, kind, peer);
    ep->in_handler = was;
}
/* The piece goes to the handler: a whole message to the whole handler
 * where one is set (inline: a fast box's poll hands over its usual entry
 * itself, ivshm__hand_over_msg). */
static inline void ivshm__hand_over(ivshm_ep_t *ep, struct peer *p,
                                    const ivshm_msg_t *m)
{
    ivshm__hand_over_begin(ep, p);
    if (ep->whole && m->offset == 0 && m->total == m->len)
        ep->whole(ep->harg, m->sender, m->tag, m->data, m->len);
    else if (ep->handler)
        ep->handler(ep->harg, m);
    ivshm__hand_over_end(ep);
}
/* The payload's further lines are fetched while the header is checked
 * and the handler matches it, not when it copies them (only hints: bounded
 * by the piece's room, never faulting). */
static inline void ivshm__prefetch_payload(const char *data, uint64_t bytes)
{
    const char *end = data + bytes;
    for (const char *l = (const char *)(((uintptr_t)data | 63) + 1); l < end;
         l += 64)
        __builtin_prefetch(l, 0, 3);
}
/* An FBOX_MSG entry (word w, payload at data) that is the pair's next
 * piece goes to the handler: the box's poll does this itself for the
 * usual entry, ivshm__deliver_msg after its order checks. whole is
 * ep->whole, passed by the caller: the usual path of a caller that names
 * its handler (ivshm_ep_progress_whole) calls it directly. */
static inline void ivshm__hand_over_msg(ivshm_ep_t *ep, struct peer *p,
                                        uint32_t idx, uint64_t w,
                                        const char *data,
                                        ivshm_whole_handler_t whole)
{
    uint32_t len = FBOX_LEN(w);
    if (len > 56) /* more than the entry's first line may hold */
        ivshm__prefetch_payload(data, len);
    if (whole) { /* the usual receiver: no descriptor to build */
        ivshm__hand_over_begin(ep, p);
        whole(ep->harg, idx, FBOX_TAG(w), data, len);
        ivshm__hand_over_end(ep);
    } else {
        ivshm_msg_t m = {.sender = idx,
                         .tag = FBOX_TAG(w),
                         .len = len,
                         .offset = 0,
                         .total = len,
                         .data = data};
        ivshm__hand_over(ep, p, &m);
    }
    ep->st.msgs_in++;
    ep->st.bytes_in += len;
}
/* Validates one published cell and delivers it; false if it must wait.
 * expect: the only sender this queue may carry (a fast box), or -1.
 * room: bytes of our memory from the cell's start that are its own.
 * since: when this cell was first found waiting (0: now). */
bool ivshm__deliver(ivshm_ep_t *ep, const struct cell *shared, int expect,
                    uint32_t room, uint64_t *since);
/* The same for an FBOX_MSG entry (header word w, payload at data) of the
 * box of peer idx. */
bool ivshm__deliver_msg(ivshm_ep_t *ep, uint32_t idx, uint64_t w,
                        const char *data, uint64_t *since);
void ivshm__drop(ivshm_ep_t *ep);

/* chan_send.c */
void ivshm__publish(ivshm_ep_t *ep, struct peer *p, uint32_t idx,
                    struct cell *c, uint64_t pos, uint16_t type, uint32_t tag,
                    uint32_t len, uint64_t offset, uint64_t total,
                    uint32_t frag, uint64_t aux);

/* chan_ep.c */
extern long ivshm__destroy_grace_ns; /* wait between free entry and free */
/* The polling wait every endpoint without a doorbell uses. */
ivshm_status_t ivshm__poll_wait(void *ctx, const volatile uint64_t *word,
                                uint64_t seen, uint64_t timeout_ns);

#pragma GCC visibility pop

#endif
