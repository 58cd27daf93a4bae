/*
 * Sending: every message starts at tx_begin (our lease held, the peer's
 * life unchanged, a fast box asked for once the pair is hot), takes a cell
 * of the peer's fast box or FIFO, puts the payload inline or in one of our
 * fragments, and publishes the cell (C1/F0), waking a receiver that
 * blocks (N0). Single-copy region sends hand over an offset of our own
 * region memory instead.
 *
 *  N0 sender: publish, then (full fence) load of the receiver's notify
 *     word; receiver: CAS of the armed bit, then re-check of its queues.
 *     One of them sees the other.
 */
#include "chan_internal.h"

#include <string.h>

/* N0 needs the publish ordered before the notify load (store-load): a full
 * fence, paid only towards receivers that ever block (may_block). Polling
 * receivers (MPI) never arm, so their senders skip it. A receiver sets
 * may_block before its first wait and bounds that first wait (see
 * ivshm_ep_wait), since a sender may not have seen the flag yet; after
 * that no wake-up can be lost. GCC's TSan cannot model fences: its builds
 * use a seq_cst store. */
#if defined(__SANITIZE_THREAD__)
#define STORE_LOAD_FENCE() ((void)0) /* ivshm__publish_word is seq_cst */
#else
#define STORE_LOAD_FENCE() atomic_thread_fence(memory_order_seq_cst)
#endif

/* The steps of every send are inline (always: the compiler's own choice
 * left each a call, 10-20 % of the channel's send); what only a rare case
 * takes is a call. */
#define HOT static inline __attribute__((always_inline))

static void wake_blocking(ivshm_ep_t *ep, struct peer *p, uint32_t idx)
{
    p->peer_may_block = true; /* it stays a blocking receiver */
    STORE_LOAD_FENCE(); /* N0: publish before the notify load */
    uint64_t w = atomic_load_explicit(&p->ctl->notify, memory_order_seq_cst);
    if ((w & 1) && atomic_compare_exchange_strong(&p->ctl->notify, &w,
                                                  (w + 2) & ~1ull)) {
        ep->notifier.ring(ep->notifier.ctx, idx);
        BUMP(ep, wakeups, 1);
    }
}

HOT void wake(ivshm_ep_t *ep, struct peer *p, uint32_t idx)
{
    if (p->peer_may_block ||
        atomic_load_explicit(&p->ctl->may_block, memory_order_relaxed))
        wake_blocking(ep, p, idx);
}

/* Publishes a piece's word (release), between the test seam's "claim"
 * and "publish" steps. Without a seam (production) it is checked once, not
 * once per step. */
HOT void publish_stepped(_Atomic uint64_t *word, uint64_t v)
{
    if (__builtin_expect(ivshm__test_step != NULL, 0)) {
        ivshm__test_step("claim");
        ivshm__publish_word(word, v);
        IVSHM_TEST_STEP("publish");
    } else {
        ivshm__publish_word(word, v);
    }
}

/* A piece sent, counted privately: the progress pass mirrors the totals to
 * the shared stats line (mirror_stats, chan_recv.c), not every send. */
HOT void count_sent(ivshm_ep_t *ep, uint32_t len)
{
    ep->st.msgs_out++;
    ep->st.bytes_out += len;
}

/* Where the payload of a cell of this type starts. */
static uint32_t form_hdr(uint16_t form)
{
    return form == CELL_SHORT ? CELL_SHORT_HDR : CELL_HDR;
}

/* Never reads the cell: its line is the receiver's until we write it, and a
 * read first would cost a second transfer. */
void ivshm__publish(ivshm_ep_t *ep, struct peer *p, uint32_t idx,
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
    h.frag = (uint16_t)frag;
    h.offset = offset;
    h.total = total;
    h.aux = aux;
    h.epoch = CELL_EPOCH(ep->epoch);
    /* a short cell's payload lies where offset, total and aux would. Two
     * copies of constant length, not one of form_hdr(type) bytes: the
     * compiler stores them as a few wide moves instead of a loop
     * (callgrind, docs/channels.md "Per-message cost at the message
     * rate") */
    const size_t from = offsetof(struct cell, len);
    if (type == CELL_SHORT)
        memcpy((char *)c + from, (char *)&h + from, CELL_SHORT_HDR - from);
    else
        memcpy((char *)c + from, (char *)&h + from, CELL_HDR - from);
    /* C1/F0: the cell's contents happen-before the consumer's read */
    if (pos & FBOX_POS_FLAG)
        publish_stepped((_Atomic uint64_t *)((char *)c - 8),
                        FBOX_WORD(pos >> 16, FBOX_CELL, 0, pos, 0));
    else
        publish_stepped(&c->seq, pos + 1);
    count_sent(ep, len);
    wake(ep, p, idx);
    if (pos & FBOX_POS_FLAG)
        ivshm__fbox_zero_ahead(p); /* after the wake-up's fence (N0) */
}

/* head then body to dst, an FBOX_MSG entry's payload (dst is its word's
 * place + 8): the bytes that share a line with the word are stored last.
 * A receiver waiting for the entry polls that line; stored first, they
 * would take the line away from it while the rest is written, and the
 * word's store would have to take it back (a line's transfer more per
 * message of more than one line). Not inline: the send of a few bytes
 * (in order, with fixed-size moves) keeps its registers. */
static __attribute__((noinline)) void copy_word_line_last(char *dst,
                                                          const char *head,
                                                          size_t head_len,
                                                          const char *body,
                                                          size_t body_len)
{
    /* bytes in the word's line: 8 to 56 (a word lies on 16 bytes), fewer
     * than the message's (FBOX_WORD_LINE_LAST_ABOVE) */
    size_t first = 64 - ((uintptr_t)dst & 63u);
    if (first < head_len) {
        memcpy(dst + first, head + first, head_len - first);
        if (body_len)
            memcpy(dst + head_len, body, body_len);
        memcpy(dst, head, first);
    } else {
        size_t in_body = first - head_len; /* body bytes in the word's line */
        memcpy(dst + first, body + in_body, body_len - in_body);
        if (in_body)
            memcpy(dst + head_len, body, in_body);
        if (head_len)
            memcpy(dst, head, head_len);
    }
}

/* May a message longer than a cell (len bytes) go into p's box? Only an
 * answer (something came in from p since our last long message to it)
 * and only while the box, this entry included, holds at most a quarter
 * of its ring unreleased. A latency-bound exchange sends so, in one copy
 * and no fragment; a stream (a window of 2 KiB sends) goes by fragments,
 * whose cells the box or the FIFO carry. Long entries in a stream, mixed
 * with fragments, made a window of 2 KiB messages slower than fragments
 * alone (osu_bw and the 7-pair rate 0.86-0.89x vader against 0.95-1.08x
 * in the same calls; docs/channels.md, "Box messages longer than a
 * cell"). A try is a call that reaches here: a blocking send that waits
 * for room tries again.
 * The quarter spares most sends a look at the receiver's tail (its line);
 * a look that finds the box busy is not repeated for the next
 * FBOX_LONG_SKIP tries. */
static __attribute__((noinline)) bool long_entry_ok(struct peer *p,
                                                    uint32_t len)
{
    if (p->tx_long_pseq_in == p->pseq_in)
        return false; /* a stream */
    uint64_t quarter = p->tx_fbox_ring / 4;
    uint64_t need = (uint64_t)len + 8 + 64; /* the entry, its padding */
    uint64_t used = p->tx_fbox_pos - p->tx_fbox_tail;
    if (used > quarter || used + need > quarter) {
        if (p->tx_long_skip) {
            p->tx_long_skip--;
            return false;
        }
        /* F1 (as ivshm__fbox_entry): the tail the receiver released */
        p->tx_fbox_tail =
            atomic_load_explicit(&p->tx_fbox_hdr->tail, memory_order_acquire);
        used = p->tx_fbox_pos - p->tx_fbox_tail;
        if (used > quarter || used + need > quarter) {
            p->tx_long_skip = FBOX_LONG_SKIP;
            return false;
        }
    }
    p->tx_long_pseq_in = p->pseq_in;
    return true;
}

/* May the box take a message that is not usual for it (tx_usual_below):
 * one longer than a cell, or a tag the usual check refused? The same
 * rules in full. */
static __attribute__((noinline)) bool box_takes_other(struct peer *p,
                                                      uint32_t tag,
                                                      size_t len)
{
    if (!p->tx_fbox_msg || p->tx_box_held || tag > 255 ||
        len > p->tx_fbox_msg_max)
        return false;
    return len <= p->tx_fbox_long_above || long_entry_ok(p, (uint32_t)len);
}

/* A whole message of head and body (len bytes) into an FBOX_MSG entry of
 * the peer's box, admitted: false only if the box has no room for it. */
HOT bool put_msg_box(ivshm_ep_t *ep, struct peer *p, uint32_t idx,
                     uint32_t tag, const void *head, size_t head_len,
                     const void *body, size_t body_len)
{
    size_t len = head_len + body_len;
    uint16_t seq;
    char *at = ivshm__fbox_entry_fast(p, (uint32_t)len, &seq);
    if (!at)
        return false;
    if (__builtin_expect(len > FBOX_WORD_LINE_LAST_ABOVE, 0)) {
        copy_word_line_last(at + 8, head, head_len, body, body_len);
    } else {
        ivshm__copy(at + 8, head, head_len);
        ivshm__copy(at + 8 + head_len, body, body_len);
    }
    publish_stepped((_Atomic uint64_t *)at,
                    FBOX_WORD(seq, FBOX_MSG, tag, len, p->pseq_out++));
    count_sent(ep, (uint32_t)len);
    wake(ep, p, idx);
    ivshm__fbox_zero_ahead(p); /* after the wake-up's fence (N0) */
    if (len + 8 > FBOX_AHEAD && ep->own_ahead) /* its word, its terminator */
        ivshm__fbox_own_ahead(p, 8 + (uint32_t)len + 64);
    return true;
}

/* A whole message of head and body straight into an FBOX_MSG entry of
 * the peer's box: an 8-byte word instead of a cell's 32-byte header, and
 * 16-byte packing (chan_fbox.c). False if it cannot go so (no box, no
 * room, a tag or length the form cannot carry, a message longer than a
 * cell that long_entry_ok keeps out): another form takes it. The usual
 * message is admitted by one compare (tx_usual_below). */
HOT bool send_msg_box(ivshm_ep_t *ep, struct peer *p, uint32_t idx,
                      uint32_t tag, const void *head, size_t head_len,
                      const void *body, size_t body_len)
{
    size_t len = head_len + body_len;
    if (__builtin_expect(tag > 255 || len >= p->tx_usual_below, 0) &&
        !box_takes_other(p, tag, len))
        return false;
    return put_msg_box(ep, p, idx, tag, head, head_len, body, body_len);
}

/* A cell of `bytes` bytes (header included) for one piece: the fast box
 * if we have one with room, else a FIFO position. NULL if both are full. */
static struct cell *claim_cell(ivshm_ep_t *ep, struct peer *p, uint32_t bytes,
                               uint64_t *pos)
{
    struct cell *c = ivshm__fbox_claim(p, bytes, pos);
    return c ? c : ivshm__fifo_claim(ep, p, pos);
}

/* Asks for a fast box once the pair is hot. */
static void ask_fbox(ivshm_ep_t *ep, struct peer *p, uint32_t idx)
{
    if (!p->g.fbox_cells || ++p->sends < ep->cfg.fbox_threshold)
        return;
    uint64_t pos;
    struct cell *c = claim_cell(ep, p, CELL_HDR, &pos);
    if (!c)
        return;
    p->fbox_asked = true;
    ivshm__publish(ep, p, idx, c, pos, CELL_FBOX_REQ, 0, 0, 0, 0, 0, 0);
}

/* Why tx_peer refuses a record we cannot send by. */
static ivshm_status_t tx_unusable(const struct peer *p, uint32_t idx)
{
    if (!p || !p->valid)
        return ivshm__fail(IVSHM_ERR_INVAL, "peer %u is not connected", idx);
    return ivshm__fail(IVSHM_ERR_CORRUPT,
                       "peer %u's receive queue is damaged (head and tail "
                       "more than a lap apart)", idx);
}

static ivshm_status_t tx_gone(ivshm_ep_t *ep, uint32_t idx)
{
    ivshm__peer_died(ep, idx);
    return ivshm__fail(IVSHM_ERR_PEER_DEAD, "peer %u is gone", idx);
}

/* The full check of tx_peer: our lease held, the same life of the peer
 * we connected to, its lease not in doubt. Passed, it records the count
 * of ended lives loaded before it (seen) in the peer. */
static ivshm_status_t tx_check(ivshm_ep_t *ep, uint32_t idx, struct peer *p,
                               uint64_t seen)
{
    ivshm_status_t st = ivshm__lease_held(ep->r);
    if (st != IVSHM_OK)
        return st;
    if (!p || !p->valid || p->damaged)
        return tx_unusable(p, idx);
    /* the receiver's memory is only ours to write while this life of it
     * lasts (its block may be freed and reused once it ends) */
    enum ivshm_proc_state s = p->dead ? PROC_GONE : ivshm__owner_state(ep, p);
    if (s == PROC_GONE || !ivshm__entry_same(p))
        return tx_gone(ep, idx);
    if (s == PROC_DOUBT)
        return IVSHM_ERR_AGAIN; /* a reclaimer is deciding: not now */
    p->lives_seen = seen;
    return IVSHM_OK;
}

/* The region's count of ended lives, as peers record it (lives_seen). */
HOT uint64_t lives_now(const ivshm_ep_t *ep)
{
    return atomic_load_explicit(ep->lives_ended, memory_order_acquire) &
           LIVES_MASK;
}

/* Our record of the peer at directory index idx, NULL if none. */
HOT struct peer *peer_at(const ivshm_ep_t *ep, uint32_t idx)
{
    return idx < ep->d->max_eps ? ep->peers[idx] : NULL;
}

/* The peer we may write to now. Every life that ends bumps the region's
 * count after its word changes (ivshm__life_ended); a count loaded
 * (acquire) before the full check, and found again now, means that no
 * life the check found alive (ours, the peer's owner, its directory
 * entry) has ended since: the check's loads would read what they read
 * then, so they are skipped. Loaded first, as the full check's loads
 * would be (K0; docs/channels.md, "One count for the life checks"). */
HOT ivshm_status_t tx_peer(ivshm_ep_t *ep, uint32_t idx, struct peer **out)
{
    uint64_t seen = lives_now(ep);
    struct peer *p = peer_at(ep, idx);
    if (__builtin_expect(!p || p->lives_seen != seen, 0)) {
        ivshm_status_t st = tx_check(ep, idx, p, seen);
        if (st != IVSHM_OK)
            return st;
    }
    if (!p->tx_fbox && p->fbox_asked && p->g.fbox_cells)
        ivshm__fbox_check_grant(ep, p);
    *out = p;
    return IVSHM_OK;
}

HOT ivshm_status_t tx_begin(ivshm_ep_t *ep, uint32_t idx, struct peer **out)
{
    struct peer *p = NULL;
    ivshm_status_t st = tx_peer(ep, idx, &p);
    if (st != IVSHM_OK)
        return st;
    if (!p->fbox_asked)
        ask_fbox(ep, p, idx);
    *out = p;
    return IVSHM_OK;
}

size_t ivshm_ep_max_single(const ivshm_ep_t *ep) { return ep->cfg.frag_size; }

size_t ivshm_ep_box_msg_max(const ivshm_ep_t *ep)
{
    return ep->fbox_msg_max > 0 ? (size_t)ep->fbox_msg_max : 0;
}

static uint32_t lines(uint32_t bytes) { return (bytes + 63) / 64; }

/* How a piece travels to a receiver with cells of cell_size bytes: a whole
 * message goes short where that saves a 64-byte line (or only a short
 * one fits), a piece inline after the full header, anything larger in a
 * fragment. With the same number of lines the full header wins: it was
 * measured faster (docs/channels.md, "Decisions"). */
static uint16_t piece_form(uint32_t cell_size, uint32_t len, uint64_t offset,
                           uint64_t total)
{
    bool whole = offset == 0 && total == len;
    if (len <= cell_size - CELL_HDR &&
        (!whole || lines(CELL_HDR + len) == lines(CELL_SHORT_HDR + len)))
        return CELL_INLINE;
    if (whole && len <= cell_size - CELL_SHORT_HDR)
        return CELL_SHORT;
    return CELL_FRAG;
}

/* A piece of head then body (at most a fragment) in one of our
 * fragments, named by a cell of the peer's. */
static ivshm_status_t send_frag(ivshm_ep_t *ep, struct peer *p, uint32_t idx,
                                uint32_t tag, const void *head,
                                uint32_t head_len, const void *body,
                                uint32_t body_len, uint64_t offset,
                                uint64_t total)
{
    int f = ivshm__frag_take(ep);
    if (f < 0)
        return IVSHM_ERR_AGAIN;
    uint64_t pos;
    struct cell *c = claim_cell(ep, p, CELL_HDR, &pos);
    if (!c) {
        BUMP(ep, stalls, 1);
        return IVSHM_ERR_AGAIN;
    }
    char *data = ep->pool + (uint64_t)f * ep->cfg.frag_size;
    memcpy(data, head, head_len);
    if (body_len)
        memcpy(data + head_len, body, body_len);
    uint64_t lend = ivshm__frag_lend(ep, f, idx);
    IVSHM_TEST_STEP("lend");
    ivshm__publish(ep, p, idx, c, pos, CELL_FRAG, tag, head_len + body_len,
                   offset, total, (uint32_t)f, lend);
    if (ep->own_ahead)
        ivshm__frag_own_next(ep, head_len + body_len);
    return IVSHM_OK;
}

static ivshm_status_t send_piece(ivshm_ep_t *ep, struct peer *p, uint32_t idx,
                                 uint32_t tag, const char *buf, uint32_t len,
                                 uint64_t offset, uint64_t total)
{
    uint64_t pos;
    /* a whole message goes into the box where it fits, longer than a
     * cell or not */
    if (offset == 0 && total == len &&
        send_msg_box(ep, p, idx, tag, buf, len, NULL, 0))
        return IVSHM_OK;
    uint16_t form = piece_form(p->g.cell_size, len, offset, total);
    if (form == CELL_FRAG)
        return send_frag(ep, p, idx, tag, buf, len, NULL, 0, offset, total);
    struct cell *c = claim_cell(ep, p, form_hdr(form) + len, &pos);
    if (!c) {
        BUMP(ep, stalls, 1);
        return IVSHM_ERR_AGAIN;
    }
    memcpy((char *)c + form_hdr(form), buf, len);
    ivshm__publish(ep, p, idx, c, pos, form, tag, len, offset, total, 0, 0);
    return IVSHM_OK;
}

/* A try_send's message longer than ivshm_ep_max_single. */
static ivshm_status_t over_single(size_t len)
{
    return ivshm__fail(IVSHM_ERR_INVAL,
                       "%zu bytes exceed one fragment; use ivshm_ep_send",
                       len);
}

/* A try_send2 whose two lengths do not even have a sum. */
static __attribute__((noinline, cold)) ivshm_status_t
over_any(size_t head_len, size_t body_len)
{
    return ivshm__fail(IVSHM_ERR_INVAL,
                       "a message of %zu and %zu bytes exceeds one fragment",
                       head_len, body_len);
}

ivshm_status_t ivshm_ep_try_send(ivshm_ep_t *ep, uint32_t peer, uint32_t tag,
                                 const void *buf, size_t len)
{
    if (len > ep->cfg.frag_size)
        return over_single(len);
    struct peer *p = NULL;
    ivshm_status_t st = tx_begin(ep, peer, &p);
    if (st != IVSHM_OK)
        return st;
    return send_piece(ep, p, peer, tag, buf, (uint32_t)len, 0, len);
}

ivshm_status_t ivshm_ep_try_send2(ivshm_ep_t *ep, uint32_t peer, uint32_t tag,
                                  const void *head, size_t head_len,
                                  const void *body, size_t body_len)
{
    size_t len = head_len + body_len;
    struct peer *p = NULL;
    ivshm_status_t st = tx_peer(ep, peer, &p); /* the peer's error first */
    if (st != IVSHM_OK)
        return st;
    if (__builtin_expect(len < head_len, 0))
        return over_any(head_len, body_len); /* the sum wrapped */
    /* a message the box takes is shorter than any fragment, so the bound
     * is checked only where the box did not take it; before tx_begin's
     * ask for a box (a box is used only once asked for and granted), so
     * that a refused send has no effect on the peer */
    _Static_assert(CELL_SIZE_MAX - CELL_SHORT_HDR <= FRAG_SIZE_MIN,
                   "a message in a cell fits a fragment");
    if (send_msg_box(ep, p, peer, tag, head, head_len, body, body_len))
        return IVSHM_OK;
    if (len > ep->cfg.frag_size)
        return over_single(len);
    if (!p->fbox_asked)
        ask_fbox(ep, p, peer);
    if (len > p->g.cell_size - CELL_SHORT_HDR) /* not inline in its cells */
        return send_frag(ep, p, peer, tag, head, (uint32_t)head_len, body,
                         (uint32_t)body_len, 0, len);
    uint16_t form = piece_form(p->g.cell_size, (uint32_t)len, 0, len);
    uint64_t pos;
    struct cell *c =
        claim_cell(ep, p, form_hdr(form) + (uint32_t)len, &pos);
    if (!c) {
        BUMP(ep, stalls, 1);
        return IVSHM_ERR_AGAIN;
    }
    char *data = (char *)c + form_hdr(form);
    memcpy(data, head, head_len);
    if (body_len)
        memcpy(data + head_len, body, body_len);
    ivshm__publish(ep, p, peer, c, pos, form, tag, (uint32_t)len, 0, len, 0,
                   0);
    return IVSHM_OK;
}

/* Waits for room: serves our own queues (the peer may be sending to us)
 * and every 1024 rounds checks that the peer and our lease still hold. */
static ivshm_status_t wait_room(ivshm_ep_t *ep, uint32_t peer,
                                struct peer **p, unsigned *spins)
{
    if (!ep->in_handler)
        ivshm_ep_progress(ep);
    if ((*spins & 1023) == 1023) {
        ivshm_status_t st = tx_peer(ep, peer, p);
        if (st != IVSHM_OK && st != IVSHM_ERR_AGAIN)
            return st;
    }
    ivshm__backoff(spins);
    if (*spins > 300)
        *spins = 64; /* stay responsive: yield, do not sleep */
    return IVSHM_OK;
}

/* tx_begin for the blocking sends: a peer in doubt is waited for. */
static ivshm_status_t tx_begin_wait(ivshm_ep_t *ep, uint32_t peer,
                                    struct peer **p, unsigned *spins)
{
    ivshm_status_t st;
    while ((st = tx_begin(ep, peer, p)) == IVSHM_ERR_AGAIN)
        if ((st = wait_room(ep, peer, p, spins)) != IVSHM_OK)
            return st;
    return st;
}

/* ivshm_ep_send of what the usual send did not take. */
static __attribute__((noinline)) ivshm_status_t
send_other(ivshm_ep_t *ep, uint32_t peer, uint32_t tag, const void *buf,
           size_t len)
{
    struct peer *p = NULL;
    unsigned spins = 0;
    /* (the loop's first piece tries the box first, as send_piece does
     * every whole message) */
    ivshm_status_t st = tx_begin(ep, peer, &p);
    if (st == IVSHM_ERR_AGAIN)
        st = tx_begin_wait(ep, peer, &p, &spins);
    if (st != IVSHM_OK)
        return st;
    size_t done = 0;
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
        if ((st = wait_room(ep, peer, &p, &spins)) != IVSHM_OK)
            return st;
    } while (done < len);
    return IVSHM_OK;
}

/* The usual message: to a peer whose lives were all found alive at the
 * count the region still holds (tx_peer's first test), whole into its box
 * (tx_usual_below admits it; its box was asked for and granted, so
 * tx_begin has nothing more to do). False where any of that fails:
 * send_other takes the message from the start, nothing was written. */
HOT bool send_usual(ivshm_ep_t *ep, uint32_t idx, uint32_t tag,
                    const void *buf, size_t len)
{
    uint64_t seen = lives_now(ep); /* first, as tx_peer's (K0) */
    struct peer *p = peer_at(ep, idx);
    if (!p || p->lives_seen != seen || tag > 255 || len >= p->tx_usual_below)
        return false;
    return put_msg_box(ep, p, idx, tag, buf, len, NULL, 0);
}

ivshm_status_t ivshm_ep_send(ivshm_ep_t *ep, uint32_t peer, uint32_t tag,
                             const void *buf, size_t len)
{
    /* The usual message takes the few steps of send_usual, without the
     * general loop's frame, its calls and its choice of a form
     * (docs/channels.md, "The usual path") */
    if (__builtin_expect(send_usual(ep, peer, tag, buf, len), 1))
        return IVSHM_OK;
    return send_other(ep, peer, tag, buf, len);
}

ivshm_status_t ivshm_ep_reserve(ivshm_ep_t *ep, uint32_t peer, size_t len,
                                void **buf, ivshm_rsv_t *rsv)
{
    if (len > ep->cfg.frag_size)
        return ivshm__fail(IVSHM_ERR_INVAL, "%zu bytes exceed one fragment",
                           len);
    struct peer *p = NULL;
    ivshm_status_t st = tx_begin(ep, peer, &p);
    if (st != IVSHM_OK)
        return st;
    int f = -1;
    uint16_t form = piece_form(p->g.cell_size, (uint32_t)len, 0, len);
    if (form == CELL_FRAG && (f = ivshm__frag_take(ep)) < 0)
        return IVSHM_ERR_AGAIN;
    struct cell *c = claim_cell(
        ep, p, f >= 0 ? CELL_HDR : form_hdr(form) + (uint32_t)len, &rsv->pos);
    if (!c) {
        BUMP(ep, stalls, 1);
        return IVSHM_ERR_AGAIN; /* the fragment stays free: not lent */
    }
    rsv->lend = f >= 0 ? ivshm__frag_lend(ep, f, peer) : 0;
    if (rsv->pos & FBOX_POS_FLAG) {
        p->tx_box_held++; /* until commit or cancel */
        ivshm__tx_usual_update(p);
    }
    rsv->cell = c;
    rsv->peer = peer;
    /* the form travels with the reservation: commit publishes what the
     * caller wrote, whatever it would choose then */
    rsv->frag = f >= 0 ? f : form == CELL_SHORT ? -2 : -1;
    rsv->len = (uint32_t)len;
    *buf = f >= 0 ? ep->pool + (uint64_t)f * ep->cfg.frag_size
                  : (char *)c + form_hdr(form);
    return IVSHM_OK;
}

ivshm_status_t ivshm_ep_reserve_frag(ivshm_ep_t *ep, uint32_t peer, size_t len,
                                     void **buf, ivshm_rsv_t *rsv)
{
    if (len > ep->cfg.frag_size)
        return ivshm__fail(IVSHM_ERR_INVAL, "%zu bytes exceed one fragment",
                           len);
    struct peer *p = NULL;
    ivshm_status_t st = tx_peer(ep, peer, &p);
    if (st != IVSHM_OK)
        return st;
    if (piece_form(p->g.cell_size, (uint32_t)len, 0, len) != CELL_FRAG)
        return IVSHM_ERR_NOTSUP;
    int f = ivshm__frag_take(ep);
    if (f < 0)
        return IVSHM_ERR_AGAIN;
    /* lent now, so that no other message takes it while it is filled, and
     * held: a peer found gone meanwhile does not free it under its writer */
    rsv->lend = ivshm__frag_lend(ep, f, peer);
    ep->frag_held[f] = 1;
    rsv->cell = NULL;
    rsv->peer = peer;
    rsv->frag = f;
    rsv->len = (uint32_t)len;
    *buf = ep->pool + (uint64_t)f * ep->cfg.frag_size;
    return IVSHM_OK;
}

/* A reservation that held an entry of the peer's box ends (commit or
 * cancel; a record of a later life of the peer starts at none). */
static void box_released(struct peer *p, const ivshm_rsv_t *rsv)
{
    if ((rsv->pos & FBOX_POS_FLAG) && p->tx_box_held) {
        p->tx_box_held--;
        ivshm__tx_usual_update(p);
    }
}

ivshm_status_t ivshm_ep_commit(ivshm_ep_t *ep, const ivshm_rsv_t *rsv,
                               uint32_t tag, size_t len)
{
    struct peer *p = ep->peers[rsv->peer];
    struct cell *c = rsv->cell;
    uint64_t pos = rsv->pos;
    if (!c) {
        /* a fragment filled at leisure: the peer's life is checked and a
         * cell claimed now */
        ivshm_status_t st = tx_begin(ep, rsv->peer, &p);
        if (st != IVSHM_OK)
            return st; /* still held: the caller cancels or tries again */
        if (!(c = claim_cell(ep, p, CELL_HDR, &pos))) {
            BUMP(ep, stalls, 1);
            return IVSHM_ERR_AGAIN;
        }
        ep->frag_held[rsv->frag] = 0; /* published below: lent, not held */
    }
    else
        box_released(p, rsv);
    if (len > rsv->len)
        len = rsv->len;
    uint16_t form = rsv->frag >= 0    ? CELL_FRAG
                    : rsv->frag == -2 ? CELL_SHORT
                                      : CELL_INLINE;
    ivshm__publish(ep, p, rsv->peer, c, pos, form, tag,
                   (uint32_t)len, 0, len,
                   rsv->frag >= 0 ? (uint32_t)rsv->frag : 0, rsv->lend);
    return IVSHM_OK;
}

void ivshm_ep_cancel(ivshm_ep_t *ep, const ivshm_rsv_t *rsv)
{
    struct peer *p = ep->peers[rsv->peer];
    if (rsv->frag >= 0) { /* hand the fragment back ourselves */
        ep->frag_held[rsv->frag] = 0;
        ivshm__frag_ack(&ep->fdone[rsv->frag], rsv->lend);
    }
    if (!rsv->cell)
        return; /* no cell was claimed */
    box_released(p, rsv);
    ivshm__publish(ep, p, rsv->peer, rsv->cell, rsv->pos, CELL_NOP, 0, 0, 0,
                   0, 0, 0);
}

ivshm_status_t ivshm_ep_send_region(ivshm_ep_t *ep, uint32_t peer,
                                    uint32_t tag, uint64_t off, size_t len,
                                    uint64_t *ticket)
{
    if (len > UINT32_MAX ||
        !ivshm__owned_by(ep->r, off, len, ep->r->slot, ep->r->gen))
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "buffer [%llu, +%zu) is not this process' region "
                           "memory",
                           (unsigned long long)off, len);
    struct peer *p = NULL;
    unsigned spins = 0;
    ivshm_status_t st = tx_begin_wait(ep, peer, &p, &spins);
    if (st != IVSHM_OK)
        return st;
    uint64_t pos;
    struct cell *c;
    while (!(c = claim_cell(ep, p, CELL_HDR, &pos))) {
        BUMP(ep, stalls, 1);
        if ((st = wait_room(ep, peer, &p, &spins)) != IVSHM_OK)
            return st;
    }
    *ticket = ++p->region_tickets;
    ivshm__publish(ep, p, peer, c, pos, CELL_REGION, tag, (uint32_t)len, 0,
                   len, 0, off);
    return IVSHM_OK;
}

int ivshm_ep_region_done(ivshm_ep_t *ep, uint32_t peer, uint64_t ticket)
{
    if (peer >= ep->d->max_eps)
        return 1;
    /* written by the receiver when it finished copying */
    uint64_t done = atomic_load_explicit(&ep->rdone[peer], memory_order_acquire);
    struct peer *p = ep->peers[peer];
    if (p && ivshm__peer_gone(ep, p))
        return -1;
    return (int64_t)(done - ticket) >= 0;
}
