/*
 * Test traffic for channel tests: message sizes and contents are a pure
 * function of (sender, sequence), so a receiver regenerates and compares
 * every byte, and checks per-pair order from the tag (= sequence). Also
 * how a test process connects to a peer that another process creates.
 */
#ifndef IVSHM_CHAN_TRAFFIC_H
#define IVSHM_CHAN_TRAFFIC_H

#include <ivshm/channel.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TR_MAX_SENDERS 64
#define TR_MAX_SIZE (160u * 1024)

static inline uint64_t tr_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Connects ep to endpoint `index` of domain d once it exists (peers start
 * in any order; the directory stands in for a modex): 0, or 1 after 10 s. */
static inline int tr_connect(ivshm_domain_t *d, ivshm_ep_t *ep,
                             uint32_t index, uint32_t *peer)
{
    for (int tries = 0; tries < 20000; tries++) {
        uint8_t addr[IVSHM_EP_ADDR_SIZE];
        if (ivshm_domain_address(d, index, addr) == IVSHM_OK &&
            ivshm_ep_connect(ep, addr, sizeof(addr), peer) == IVSHM_OK)
            return 0;
        usleep(500);
    }
    return 1;
}

/* Mostly small messages, some medium, a few large (several fragments). */
static inline size_t tr_size(uint32_t sender, uint32_t seq)
{
    uint64_t h = tr_mix(((uint64_t)sender << 32) | seq);
    unsigned r = (unsigned)(h % 100);
    if (r < 70)
        return 1 + (h >> 8) % 64;
    if (r < 90)
        return 1 + (h >> 8) % 4096;
    return 1 + (h >> 8) % TR_MAX_SIZE;
}

static inline void tr_fill(uint32_t sender, uint32_t seq, unsigned char *b,
                           size_t n)
{
    uint64_t x = tr_mix(((uint64_t)seq << 32) | sender) | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[i] = (unsigned char)x;
    }
}

/* Receiver-side reassembly and verification, one record per sender. */
struct tr_rx {
    uint32_t next_seq[TR_MAX_SENDERS];
    uint64_t got[TR_MAX_SENDERS]; /* bytes of the current message */
    unsigned char *buf[TR_MAX_SENDERS];
    unsigned char *want;
    uint64_t complete;
    uint32_t errors;
    char first_error[160];
};

static inline void tr_rx_init(struct tr_rx *t)
{
    memset(t, 0, sizeof(*t));
    t->want = malloc(TR_MAX_SIZE);
}

static inline void tr_rx_free(struct tr_rx *t)
{
    for (int i = 0; i < TR_MAX_SENDERS; i++)
        free(t->buf[i]);
    free(t->want);
}

static inline void tr_err(struct tr_rx *t, const char *what, uint32_t s,
                          uint32_t seq)
{
    if (t->errors++ == 0)
        snprintf(t->first_error, sizeof(t->first_error),
                 "%s (sender %u, seq %u)", what, s, seq);
}

static inline void tr_rx_piece(struct tr_rx *t, uint32_t sender_id,
                               const ivshm_msg_t *m)
{
    uint32_t s = sender_id;
    if (s >= TR_MAX_SENDERS) {
        tr_err(t, "sender out of range", s, m->tag);
        return;
    }
    if (m->tag != t->next_seq[s]) {
        tr_err(t, "out of order", s, m->tag);
        t->next_seq[s] = m->tag;
        t->got[s] = 0;
    }
    size_t want_len = tr_size(s, m->tag);
    if (m->total != want_len || m->offset != t->got[s] ||
        m->offset + m->len > m->total) {
        tr_err(t, "bad piece geometry", s, m->tag);
        return;
    }
    if (!t->buf[s])
        t->buf[s] = malloc(TR_MAX_SIZE);
    memcpy(t->buf[s] + m->offset, m->data, m->len);
    t->got[s] += m->len;
    if (t->got[s] == m->total) {
        tr_fill(s, m->tag, t->want, want_len);
        if (memcmp(t->want, t->buf[s], want_len) != 0)
            tr_err(t, "payload mismatch", s, m->tag);
        t->got[s] = 0;
        t->next_seq[s]++;
        t->complete++;
    }
}

#endif
