/*
 * Channel unit tests in one process: ring arithmetic around 2^31, 2^32
 * and 2^63, the domain layout checker, the armed-bit wake-up protocol under
 * send/arm races, and threaded many-to-one traffic (the TSan variant: one
 * mapping shared by threads, so the sanitizer sees every access).
 * IVSHM_WAKE_ROUNDS sets the wake-up races (long mode: 10000000).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "chan_fbox_read.h"
#include "chan_layout.h"
#include "../testutil.h"
#include "../chan_traffic.h"

#include <pthread.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* Progress on ep until cond holds, bounded: a message the channel lost
 * fails the test instead of hanging it. */
#define WAIT_UNTIL(ep, cond)                                                 \
    do {                                                                     \
        for (long spins_ = 0; spins_ < 10000000 && !(cond); spins_++)       \
            ivshm_ep_progress(ep);                                           \
        assert_true(cond);                                                   \
    } while (0)

/* n bytes of a pattern that differs from test to test. */
static void fill_pattern(char *buf, size_t n, unsigned mul, unsigned add)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)(i * mul + add);
}

static char path[256];
static ivshm_region_t *reg;
static ivshm_domain_t *dom;

static int setup(void **state)
{
    (void)state;
    tu_region_path(path, sizeof(path), "chanunit");
    if (tu_format(path, 64 << 20, 0, 0) != IVSHM_OK ||
        ivshm_region_open(tu_uri(path), 0, &reg) != IVSHM_OK ||
        ivshm_attach(reg) != IVSHM_OK ||
        ivshm_domain_join(reg, "unit", 16, &dom) != IVSHM_OK)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ivshm_domain_leave(dom);
    ivshm_region_close(reg);
    unlink(path);
    return 0;
}

static void test_ring_arithmetic(void **state)
{
    (void)state;
    static const struct {
        uint64_t head, tail;
        uint32_t cells;
        bool full;
        uint64_t used;
    } t[] = {
        {0, 0, 8, false, 0},
        {8, 0, 8, true, 8},
        {7, 0, 8, false, 7},
        {(1ull << 31) + 3, (1ull << 31) - 4, 8, false, 7},
        {(1ull << 31) + 4, (1ull << 31) - 4, 8, true, 8},
        {(1ull << 32) + 2, (1ull << 32) - 6, 8, true, 8},
        {(1ull << 32) + 1, (1ull << 32) - 6, 8, false, 7},
        {(1ull << 63) + 1, (1ull << 63) - 1, 256, false, 2},
        {2, UINT64_MAX - 1, 4, true, 4},  /* head wrapped past 2^64 */
        {1, UINT64_MAX - 1, 4, false, 3},
        {5, 9, 8, true, UINT64_MAX - 3},  /* tail ahead: treated as full */
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        if (ring_full(t[i].head, t[i].tail, t[i].cells) != t[i].full)
            fail_msg("row %zu: ring_full", i);
        assert_int_equal(ring_used(t[i].head, t[i].tail), t[i].used);
    }
    /* 32-bit sequences by signed difference */
    assert_true(seq_diff(0x80000000u, 0x7fffffffu) == 1);
    assert_true(seq_diff(0, 0xffffffffu) == 1);
    assert_true(seq_diff(0xffffffffu, 0) == -1);
    assert_true(seq_diff(5, 5) == 0);
    assert_true(seq_diff(0x7fffffffu, 0x80000000u) == -1);
}

static void nop_handler(void *arg, const ivshm_msg_t *m)
{
    (void)m;
    (*(int *)arg)++;
}

static void visit_eps(void *arg, const char *job, uint32_t index, uint32_t pid,
                      const ivshm_ep_stats_t *s)
{
    assert_string_equal(job, "unit");
    assert_int_equal(pid, getpid());
    if (index == 0)
        assert_int_equal(s->bytes_in, 5);
    else
        assert_int_equal(s->bytes_out, 5);
    (*(int *)arg)++;
}

static void test_domain_valid(void **state)
{
    (void)state;
    int got = 0;
    ivshm_ep_t *a, *b;
    assert_int_equal(ivshm_ep_create(dom, 0, NULL, nop_handler, &got, &a),
                     IVSHM_OK);
    assert_int_equal(ivshm_ep_create(dom, -1, NULL, nop_handler, &got, &b),
                     IVSHM_OK);
    assert_int_equal(ivshm_ep_index(b), 1);
    /* an index held by a live process is refused */
    ivshm_ep_t *c;
    assert_int_equal(ivshm_ep_create(dom, 0, NULL, nop_handler, &got, &c),
                     IVSHM_ERR_BUSY);
    assert_int_equal(ivshm_domain_valid(dom, NULL, NULL), IVSHM_OK);
    uint8_t addr[IVSHM_EP_ADDR_SIZE];
    uint32_t peer;
    ivshm_ep_address(a, addr);
    assert_int_equal(ivshm_ep_connect(b, addr, sizeof(addr), &peer), IVSHM_OK);
    assert_int_equal(peer, 0);
    /* a forged address: another region, a wrong index */
    uint8_t bad[IVSHM_EP_ADDR_SIZE];
    memcpy(bad, addr, sizeof(bad));
    bad[0] ^= 1;
    assert_int_equal(ivshm_ep_connect(b, bad, sizeof(bad), &peer),
                     IVSHM_ERR_NOT_FOUND);
    memcpy(bad, addr, sizeof(bad));
    bad[24] = 9;
    assert_int_equal(ivshm_ep_connect(b, bad, sizeof(bad), &peer),
                     IVSHM_ERR_NOT_FOUND);
    /* the checker finds a head/tail more than a lap apart */
    uint64_t ctl_off;
    memcpy(&ctl_off, addr + 40, 8); /* the address carries it */
    struct ep_ctl *ctl =
        (struct ep_ctl *)((char *)ivshm_region_base(reg) + ctl_off);
    atomic_store(&ctl->head, 100000);
    assert_int_equal(ivshm_domain_valid(dom, NULL, NULL), IVSHM_ERR_CORRUPT);
    atomic_store(&ctl->head, 0);
    /* a geometry that lies makes connect refuse the endpoint */
    ctl->g.fifo_cells = 3;
    assert_int_equal(ivshm_domain_valid(dom, NULL, NULL), IVSHM_ERR_CORRUPT);
    assert_int_equal(ivshm_ep_connect(b, addr, sizeof(addr), &peer),
                     IVSHM_ERR_CORRUPT);
    ctl->g.fifo_cells = 256;
    assert_int_equal(ivshm_domain_valid(dom, NULL, NULL), IVSHM_OK);
    /* messages, counters */
    assert_int_equal(ivshm_ep_connect(b, addr, sizeof(addr), &peer), IVSHM_OK);
    assert_int_equal(ivshm_ep_try_send(b, peer, 1, "hello", 5), IVSHM_OK);
    assert_int_equal(ivshm_ep_progress(a), 1);
    assert_int_equal(got, 1);
    ivshm_ep_stats_t s;
    ivshm_ep_stats(a, &s);
    assert_int_equal(s.msgs_in, 1);
    assert_int_equal(s.bytes_in, 5);
    /* the same counters, as `ivshm stat` reads them from the region: a
     * sender's are mirrored there by its progress, which delivered nothing
     * here, at the periodic liveness look */
    for (int i = 0; i < LIVENESS_PERIOD; i++)
        assert_int_equal(ivshm_ep_progress(b), 0);
    int seen = 0;
    assert_int_equal(ivshm_region_endpoints(reg, visit_eps, &seen), IVSHM_OK);
    assert_int_equal(seen, 2);
    ivshm_ep_destroy(a);
    ivshm_ep_destroy(b);
}

/* A receiver at index 0 (configuration rcfg, handler h) and a sender at
 * index 1 (tcfg) connected to it; returns the sender's peer index. */
static uint32_t make_pair(const ivshm_ep_config_t *rcfg, ivshm_msg_handler_t h,
                          void *arg, const ivshm_ep_config_t *tcfg,
                          ivshm_ep_t **rx, ivshm_ep_t **tx)
{
    assert_int_equal(ivshm_ep_create(dom, 0, rcfg, h, arg, rx), IVSHM_OK);
    assert_int_equal(ivshm_ep_create(dom, 1, tcfg, NULL, NULL, tx), IVSHM_OK);
    uint8_t addr[IVSHM_EP_ADDR_SIZE];
    uint32_t peer;
    ivshm_ep_address(*rx, addr);
    assert_int_equal(ivshm_ep_connect(*tx, addr, sizeof(addr), &peer),
                     IVSHM_OK);
    return peer;
}

/* A queue full to the brim waits (AGAIN); one whose head a scribble put
 * more than a lap past its tail can never drain: the sender says so once
 * and its sends to that peer fail (CORRUPT), instead of waiting for ever. */
static void test_damaged_queue(void **state)
{
    (void)state;
    int got = 0;
    ivshm_ep_config_t cfg;
    ivshm_ep_config_init(&cfg);
    cfg.fbox_cells = 0; /* the FIFO only */
    ivshm_ep_t *rx, *tx;
    uint32_t peer = make_pair(&cfg, nop_handler, &got, &cfg, &rx, &tx);
    uint32_t n = cfg.fifo_cells, sent = 0;
    while (ivshm_ep_try_send(tx, peer, 1, "x", 1) == IVSHM_OK)
        sent++;
    assert_int_equal(sent, n);
    assert_int_equal(ivshm_ep_try_send(tx, peer, 1, "x", 1), IVSHM_ERR_AGAIN);
    while (ivshm_ep_progress(rx) > 0)
        ;
    assert_int_equal(got, (int)n);
    assert_int_equal(ivshm_ep_try_send(tx, peer, 1, "x", 1), IVSHM_OK);
    uint8_t addr[IVSHM_EP_ADDR_SIZE];
    uint64_t ctl_off;
    ivshm_ep_address(rx, addr);
    memcpy(&ctl_off, addr + 40, 8);
    struct ep_ctl *ctl =
        (struct ep_ctl *)((char *)ivshm_region_base(reg) + ctl_off);
    atomic_store(&ctl->head, atomic_load(&ctl->tail) + n + 7);
    assert_int_equal(ivshm_ep_try_send(tx, peer, 1, "x", 1), IVSHM_ERR_AGAIN);
    assert_non_null(strstr(ivshm_last_error(), "damaged"));
    assert_int_equal(ivshm_ep_try_send(tx, peer, 1, "x", 1), IVSHM_ERR_CORRUPT);
    ivshm_ep_destroy(tx);
    ivshm_ep_destroy(rx);
}

/* Zero-copy reserve/commit and single-copy region sends. */
struct collect {
    char buf[70000];
    uint64_t bytes;
    int done;
};
static void collect_handler(void *arg, const ivshm_msg_t *m)
{
    struct collect *c = arg;
    memcpy(c->buf + m->offset, m->data, m->len);
    c->bytes += m->len;
    if (m->offset + m->len == m->total)
        c->done++;
}

/* A piece is complete in its cell before the cell is published: the
 * receiver polls at the very moment of the publish (the fault seam's
 * "publish" step, in the sender's own call) and must find every byte of
 * every form (short, inline, fragment) already there. */
struct at_publish {
    ivshm_ep_t *rx;
    uint32_t polls;
    uint32_t got, bad;
};
static struct at_publish at_pub;

static void check_handler(void *arg, const ivshm_msg_t *m)
{
    struct at_publish *ap = arg;
    unsigned char want[8192];
    size_t n = m->len < sizeof(want) ? m->len : sizeof(want);
    for (size_t i = 0; i < n; i++)
        want[i] = (unsigned char)(m->tag * 29 + i * 3 + 1);
    ap->bad += m->offset != 0 || m->len != m->total ||
               memcmp(want, m->data, n) != 0;
    ap->got++;
}

static void poll_at_publish(const char *step)
{
    ivshm_ep_t *rx = at_pub.rx;
    if (!rx || strcmp(step, "publish") != 0)
        return;
    at_pub.rx = NULL; /* the receiver's own steps do not poll again */
    ivshm_ep_progress(rx);
    at_pub.polls++;
    at_pub.rx = rx;
}

static void test_payload_before_publish(void **state)
{
    (void)state;
    ivshm_ep_t *a, *b;
    memset(&at_pub, 0, sizeof(at_pub));
    uint32_t peer = make_pair(NULL, check_handler, &at_pub, NULL, &a, &b);
    static const size_t sizes[] = {1, 8, 24, 60, 96, 500, 4000};
    unsigned char buf[8192];
    at_pub.rx = a;
    ivshm__test_step = poll_at_publish;
    uint32_t sent = 0;
    for (uint32_t round = 0; round < 40; round++)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            uint32_t tag = round * 8 + (uint32_t)k + 1;
            for (size_t i = 0; i < sizes[k]; i++)
                buf[i] = (unsigned char)(tag * 29 + i * 3 + 1);
            if (ivshm_ep_send(b, peer, tag, buf, sizes[k]) == IVSHM_OK)
                sent++;
        }
    ivshm__test_step = NULL;
    at_pub.rx = NULL;
    for (long spins = 0; at_pub.got < sent && spins < 100000000; spins++)
        ivshm_ep_progress(a);
    assert_true(sent > 200);
    assert_int_equal(at_pub.got, sent);
    assert_true(at_pub.polls >= sent); /* the receiver looked each time */
    assert_int_equal(at_pub.bad, 0);
    ivshm_ep_destroy(b);
    ivshm_ep_destroy(a);
}

static void test_reserve_and_region(void **state)
{
    (void)state;
    struct collect col = {0};
    ivshm_ep_t *a, *b;
    uint32_t peer = make_pair(NULL, collect_handler, &col, NULL, &a, &b);
    void *buf;
    ivshm_rsv_t rsv;
    /* a cancelled reservation is skipped; order is kept around it */
    assert_int_equal(ivshm_ep_reserve(b, peer, 50, &buf, &rsv), IVSHM_OK);
    ivshm_ep_cancel(b, &rsv);
    assert_int_equal(ivshm_ep_reserve(b, peer, 5000, &buf, &rsv), IVSHM_OK);
    ivshm_ep_cancel(b, &rsv);
    assert_int_equal(ivshm_ep_reserve(b, peer, 1000, &buf, &rsv), IVSHM_OK);
    memset(buf, 'z', 1000);
    assert_int_equal(ivshm_ep_commit(b, &rsv, 7, 900), IVSHM_OK);
    assert_int_equal(ivshm_ep_reserve(b, peer, 30, &buf, &rsv), IVSHM_OK);
    memset(buf, 'y', 30);
    assert_int_equal(ivshm_ep_commit(b, &rsv, 7, 30), IVSHM_OK);
    /* a commit longer than its reservation is cut to the reservation */
    assert_int_equal(ivshm_ep_reserve(b, peer, 20, &buf, &rsv), IVSHM_OK);
    memset(buf, 'x', 20);
    assert_int_equal(ivshm_ep_commit(b, &rsv, 7, 90), IVSHM_OK);
    for (long spins = 0; col.done < 3 && spins < 100000000; spins++)
        ivshm_ep_progress(a);
    assert_int_equal(col.done, 3);
    assert_int_equal(col.bytes, 950);
    assert_int_equal(col.buf[899], 'z'); /* the inline ones overwrote 0..29 */
    assert_int_equal(col.buf[0], 'x');
    assert_int_equal(col.buf[20], 'y');
    ivshm_ep_stats_t es;
    ivshm_ep_stats(a, &es);
    assert_int_equal(es.invalid_dropped, 0);
    col.done = 1;
    /* a region buffer: the receiver reads it in place */
    uint64_t off;
    assert_int_equal(ivshm_alloc(reg, 65536, &off), IVSHM_OK);
    memset((char *)ivshm_region_base(reg) + off, 'r', 65536);
    uint64_t ticket;
    assert_int_equal(ivshm_ep_send_region(b, peer, 8, off, 65536, &ticket),
                     IVSHM_OK);
    assert_int_equal(ivshm_ep_region_done(b, peer, ticket), 0);
    WAIT_UNTIL(a, col.done >= 2);
    assert_int_equal(ivshm_ep_region_done(b, peer, ticket), 1);
    assert_int_equal(col.buf[65535], 'r');
    /* a buffer that is not ours in the region is refused */
    assert_int_equal(ivshm_ep_send_region(b, peer, 8, 4096, 100, &ticket),
                     IVSHM_ERR_INVAL);
    /* messages larger than a fragment travel in pieces, in order */
    char big[70000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)(i * 7);
    col.done = 0;
    assert_int_equal(ivshm_ep_try_send(b, peer, 9, big, sizeof(big)),
                     IVSHM_ERR_INVAL);
    /* send blocks for room; the receiver runs in this thread: use pieces */
    assert_int_equal(ivshm_ep_send(b, peer, 9, big, 32768), IVSHM_OK);
    WAIT_UNTIL(a, col.done >= 1);
    assert_memory_equal(col.buf, big, 32768);
    ivshm_free(reg, off);
    ivshm_ep_destroy(a);
    ivshm_ep_destroy(b);
}

/* A fragment filled before any cell is claimed (what the BTL's alloc
 * does for messages larger than a cell): small ones are refused (they go
 * inline), the fragment is held while it is filled, commit claims a cell
 * and answers AGAIN while the peer's queues are full, keeping the
 * reservation; a cancelled one comes back to the pool. */
static void test_reserve_frag(void **state)
{
    (void)state;
    struct collect col = {0};
    ivshm_ep_t *a, *b;
    ivshm_ep_config_t cfg;
    ivshm_ep_config_init(&cfg);
    cfg.fifo_cells = 8;
    cfg.fbox_cells = 0;
    cfg.frag_count = 4;
    uint32_t peer = make_pair(&cfg, collect_handler, &col, &cfg, &a, &b);
    void *buf, *buf2;
    ivshm_rsv_t rsv, rsv2;
    assert_int_equal(ivshm_ep_reserve_frag(b, peer, 10, &buf, &rsv), IVSHM_ERR_NOTSUP);
    assert_int_equal(ivshm_ep_reserve_frag(b, peer, 5000, &buf, &rsv), IVSHM_OK);
    /* held: the next reservation gets another fragment */
    assert_int_equal(ivshm_ep_reserve_frag(b, peer, 5000, &buf2, &rsv2), IVSHM_OK);
    assert_ptr_not_equal(buf, buf2);
    ivshm_ep_cancel(b, &rsv2);
    memset(buf, 'f', 5000);
    /* fill the peer's FIFO with inline messages: commit must wait */
    int inl = 0;
    while (ivshm_ep_try_send(b, peer, 1, "i", 1) == IVSHM_OK)
        inl++;
    assert_int_equal(inl, 8);
    assert_int_equal(ivshm_ep_commit(b, &rsv, 2, 4000), IVSHM_ERR_AGAIN);
    WAIT_UNTIL(a, col.done >= inl);
    col.bytes = 0;
    assert_int_equal(ivshm_ep_commit(b, &rsv, 2, 4000), IVSHM_OK);
    WAIT_UNTIL(a, col.done >= inl + 1);
    assert_int_equal(col.bytes, 4000);
    assert_int_equal(col.buf[0], 'f');
    assert_int_equal(col.buf[3999], 'f');
    /* every fragment is free again (acknowledged or cancelled); a held one
     * stays with its holder when its peer is taken for gone (what the
     * clean-up of a dead peer does), so no other message gets it while
     * the holder may still write it */
    ivshm_rsv_t held[4];
    void *hbuf[4];
    assert_int_equal(ivshm_ep_reserve_frag(b, peer, 5000, &hbuf[0], &held[0]), IVSHM_OK);
    ivshm__frag_reclaim(b, peer);
    for (int i = 1; i < 4; i++) {
        assert_int_equal(ivshm_ep_reserve_frag(b, peer, 5000, &hbuf[i], &held[i]), IVSHM_OK);
        assert_ptr_not_equal(hbuf[i], hbuf[0]);
    }
    assert_int_equal(ivshm_ep_reserve_frag(b, peer, 5000, &buf, &rsv), IVSHM_ERR_AGAIN);
    ivshm_ep_cancel(b, &held[0]);
    assert_int_equal(ivshm_ep_reserve_frag(b, peer, 5000, &buf, &rsv), IVSHM_OK);
    assert_ptr_equal(buf, hbuf[0]);
    ivshm_ep_stats_t es;
    ivshm_ep_stats(a, &es);
    assert_int_equal(es.invalid_dropped, 0);
    ivshm_ep_destroy(a);
    ivshm_ep_destroy(b);
}

/* The three forms a piece takes, by the receiver's cell size C: a whole
 * message goes short (payload after the 32-byte header) where that saves
 * a 64-byte line or only a short one fits, otherwise inline after the
 * full 56-byte header (as every piece of a longer message does), anything
 * larger than C - 32 in a fragment. Every length around the bounds
 * (sent whole, reserved, or in two parts by ivshm_ep_try_send2) arrives
 * whole, with the form the receiver's (not the sender's) cell
 * size implies; a forged short length is dropped; a peer of an older
 * channel layout is refused by name. */
struct forms {
    char buf[70000];
    uint32_t len, n, tag;
    uint64_t offset, total;
};
static void forms_handler(void *arg, const ivshm_msg_t *m)
{
    struct forms *f = arg;
    f->tag = m->tag;
    memcpy(f->buf + m->offset, m->data, m->len);
    f->len = m->len;
    f->offset = m->offset;
    f->total = m->total;
    f->n++;
}

/* Progress on a until got counts at least `want` messages (bounded). */
static void wait_n(ivshm_ep_t *a, const struct forms *got, uint32_t want)
{
    WAIT_UNTIL(a, got->n >= want);
}

/* The same until a message beyond the n0th arrived. */
static void wait_got(ivshm_ep_t *a, const struct forms *got, uint32_t n0)
{
    wait_n(a, got, n0 + 1);
}

static uint16_t sent_form(ivshm_ep_t *rx, uint64_t pos)
{
    const struct cell *c =
        (const struct cell *)(rx->cells + (pos & (rx->g.fifo_cells - 1)) *
                                              rx->g.cell_size);
    return c->type;
}

/* Lines are taken ahead with PREFETCHW only where the processor has it:
 * the library's answer is CPUID 0x80000001's ECX bit 8, read here by the
 * test itself, and every endpoint follows it. (/proc/cpuinfo's
 * 3dnowprefetch is no check: the kernel sets it on AMD processors with
 * long mode whatever CPUID says, as in a VM, and valgrind hides the bit.) */
static void test_prefetchw_gate(void **state)
{
    (void)state;
#if defined(__x86_64__)
    unsigned ra, rb, rc, rd;
    bool has = __get_cpuid(0x80000001u, &ra, &rb, &rc, &rd) &&
               ((rc >> 8) & 1u);
    assert_int_equal(ivshm__cpu_prefetchw(), has);
#elif defined(__i386__)
    assert_false(ivshm__cpu_prefetchw());
#else
    assert_true(ivshm__cpu_prefetchw());
#endif
    ivshm_ep_t *a, *b;
    int got = 0;
    make_pair(NULL, nop_handler, &got, NULL, &a, &b);
    assert_int_equal(a->own_ahead, ivshm__cpu_prefetchw());
    assert_int_equal(b->own_ahead, ivshm__cpu_prefetchw());
    ivshm_ep_destroy(b);
    ivshm_ep_destroy(a);
}

/* A two-part send refused for its length (more than a fragment, or two
 * lengths whose sum wraps) leaves the peer as it was: not even the ask
 * for a fast box that a first send past the threshold makes is
 * published. */
static void test_refused_send2_no_effect(void **state)
{
    (void)state;
    ivshm_ep_config_t rc, tc;
    ivshm_ep_config_defaults(&rc);
    ivshm_ep_config_defaults(&tc);
    tc.fbox_threshold = 1; /* the first send asks for a box */
    int got = 0;
    ivshm_ep_t *a, *b;
    uint32_t peer = make_pair(&rc, nop_handler, &got, &tc, &a, &b);
    static char big[32768 + 64];
    assert_true(tc.frag_size + 1 <= sizeof(big));
    assert_int_equal(ivshm_ep_try_send2(b, peer, 3, big, 10, big + 10,
                                        tc.frag_size - 9),
                     IVSHM_ERR_INVAL);
    /* two lengths whose sum wraps to 4 bytes: refused, nothing copied */
    assert_int_equal(ivshm_ep_try_send2(b, peer, 3, big, SIZE_MAX - 5,
                                        big + 10, 10),
                     IVSHM_ERR_INVAL);
    assert_int_equal(atomic_load(&a->ctl->head), 0);
    /* the next send asks for the box, then goes itself */
    assert_int_equal(ivshm_ep_try_send2(b, peer, 3, big, 10, big, 10),
                     IVSHM_OK);
    assert_int_equal(atomic_load(&a->ctl->head), 2);
    assert_int_equal(sent_form(a, 0), CELL_FBOX_REQ);
    WAIT_UNTIL(a, got != 0);
    ivshm_ep_destroy(b);
    ivshm_ep_destroy(a);
}

static void test_cell_forms(void **state)
{
    (void)state;
    const uint32_t sizes[] = {128, 256, 1024};
    char src[70000];
    fill_pattern(src, sizeof(src), 13, 5);
    for (unsigned si = 0; si < 3; si++) {
        uint32_t C = sizes[si];
        ivshm_ep_config_t rc, tc;
        ivshm_ep_config_init(&rc);
        rc.cell_size = C;
        rc.fbox_cells = 0; /* the FIFO only: its cells can be looked at */
        tc = rc;
        tc.cell_size = 512; /* the sender's own cell size must not matter */
        static struct forms got;
        memset(&got, 0, sizeof(got));
        ivshm_ep_t *a, *b;
        uint32_t peer = make_pair(&rc, forms_handler, &got, &tc, &a, &b);
        const struct {
            uint32_t len;
            uint16_t form;
        } want[] = {
            {0, CELL_INLINE},      {8, CELL_INLINE},      /* one line */
            {9, CELL_SHORT},       {32, CELL_SHORT},      /* 1 line, not 2 */
            {33, CELL_INLINE},     {40, CELL_INLINE},     /* 2 lines both */
            {72, CELL_INLINE},     {73, CELL_SHORT},      /* 2 both; 2 vs 3 */
            {C - 57, CELL_INLINE}, {C - 56, CELL_INLINE}, /* full fits */
            {C - 55, CELL_SHORT},  {C - 32, CELL_SHORT},  /* short only */
            {C - 31, CELL_FRAG},   {C + 1, CELL_FRAG},    {4000, CELL_FRAG},
        };
        uint64_t pos = 0;
        for (unsigned li = 0; li < sizeof(want) / sizeof(want[0]); li++)
            for (int way = 0; way < 3; way++) {
                uint32_t L = want[li].len;
                uint32_t n0 = got.n;
                if (way == 2) {
                    /* two parts gathered into one cell, or one fragment
                     * where the receiver's cells are too small: the same
                     * form and bytes */
                    assert_int_equal(ivshm_ep_try_send2(b, peer, 3, src,
                                                        L / 3, src + L / 3,
                                                        L - L / 3),
                                     IVSHM_OK);
                } else if (way == 0) {
                    assert_int_equal(ivshm_ep_try_send(b, peer, 3, src, L),
                                     IVSHM_OK);
                } else {
                    void *buf;
                    ivshm_rsv_t rsv;
                    assert_int_equal(ivshm_ep_reserve(b, peer, L, &buf, &rsv),
                                     IVSHM_OK);
                    memcpy(buf, src, L);
                    assert_int_equal(ivshm_ep_commit(b, &rsv, 3, L), IVSHM_OK);
                }
                assert_int_equal(sent_form(a, pos++), want[li].form);
                memset(got.buf, 0, L + 64);
                wait_got(a, &got, n0);
                assert_int_equal(got.len, L);
                assert_int_equal(got.offset, 0);
                assert_int_equal(got.total, L);
                assert_memory_equal(got.buf, src, L);
                assert_int_equal(got.buf[L], 0); /* nothing past the end */
            }
        /* the two parts of more than one fragment are refused whole */
        assert_int_equal(ivshm_ep_try_send2(b, peer, 3, src, 10, src + 10,
                                            tc.frag_size - 9),
                         IVSHM_ERR_INVAL);
        /* a message of more than one fragment: its last, small piece goes
         * inline after the full header, with its offset */
        uint32_t T = tc.frag_size + 10;
        uint32_t n0 = got.n;
        assert_int_equal(ivshm_ep_send(b, peer, 4, src, T), IVSHM_OK);
        assert_int_equal(sent_form(a, pos++), CELL_FRAG);
        assert_int_equal(sent_form(a, pos++), CELL_INLINE);
        memset(got.buf, 0, T);
        wait_n(a, &got, n0 + 2);
        assert_int_equal(got.offset, tc.frag_size);
        assert_int_equal(got.len, 10);
        assert_int_equal(got.total, T);
        assert_memory_equal(got.buf, src, T);
        /* a short cell claiming more than the receiver's cell holds */
        void *buf;
        ivshm_rsv_t rsv;
        assert_int_equal(ivshm_ep_reserve(b, peer, 20, &buf, &rsv), IVSHM_OK);
        assert_int_equal(ivshm_ep_commit(b, &rsv, 5, 20), IVSHM_OK);
        assert_int_equal(sent_form(a, pos++), CELL_SHORT);
        ((struct cell *)rsv.cell)->len = C - CELL_SHORT_HDR + 1;
        n0 = got.n;
        int passes = 0;
        while (passes < 1000 && ivshm_ep_progress(a) == 0)
            passes++;
        assert_true(passes < 1000); /* the cell was looked at */
        assert_int_equal(got.n, n0);
        ivshm_ep_stats_t es;
        ivshm_ep_stats(a, &es);
        assert_int_equal(es.invalid_dropped, 1);
        ivshm_ep_destroy(b);
        ivshm_ep_destroy(a);
    }
    /* a peer that publishes an earlier channel layout ("IVMHCTL2", "IVMHCTL4"
     * and the one before this, "IVMHCTL5") */
    for (char layout = '2'; layout <= '5'; layout += layout == '2' ? 2 : 1) {
        ivshm_ep_t *a, *b;
        assert_int_equal(ivshm_ep_create(dom, 0, NULL, nop_handler, NULL, &a),
                         IVSHM_OK);
        assert_int_equal(ivshm_ep_create(dom, 1, NULL, NULL, NULL, &b),
                         IVSHM_OK);
        a->ctl->g.magic = 0x004c5443484d5649ull | (uint64_t)layout << 56;
        uint8_t addr[IVSHM_EP_ADDR_SIZE];
        uint32_t peer;
        ivshm_ep_address(a, addr);
        assert_int_equal(ivshm_ep_connect(b, addr, sizeof(addr), &peer),
                         IVSHM_ERR_VERSION);
        char want[] = "channel layout ?";
        want[sizeof(want) - 2] = layout;
        assert_non_null(strstr(ivshm_last_error(), want));
        a->ctl->g.magic = CTL_MAGIC;
        ivshm_ep_destroy(b);
        ivshm_ep_destroy(a);
    }
}

/* ---- fast-box entries (chan_fbox.c) ---- */

/* Small boxes, granted early: a ring of 9 cells of 256 bytes (2304),
 * many laps in a test. */
static ivshm_ep_config_t box_config(void)
{
    ivshm_ep_config_t cfg;
    ivshm_ep_config_init(&cfg);
    cfg.cell_size = 256;
    cfg.fbox_cells = 8;
    cfg.fbox_threshold = 2;
    return cfg;
}

/* The MPI front ends' cells and box (65 cells of 1,088 bytes), granted
 * after two sends. */
static ivshm_ep_config_t mpi_box_config(void)
{
    ivshm_ep_config_t cfg = box_config();
    cfg.cell_size = 1088;
    cfg.fbox_cells = 64;
    return cfg;
}

/* Sends 1-byte messages until the receiver granted the sender a box;
 * returns the sender's record of the receiver. */
static struct peer *box_granted(ivshm_ep_t *a, ivshm_ep_t *b, uint32_t peer,
                                struct forms *got)
{
    for (int i = 0; i < 100 && !b->peers[peer]->tx_fbox; i++) {
        uint32_t n0 = got->n;
        assert_int_equal(ivshm_ep_try_send(b, peer, 1, "g", 1), IVSHM_OK);
        wait_got(a, got, n0);
    }
    assert_non_null(b->peers[peer]->tx_fbox);
    return b->peers[peer];
}

/* One message of L bytes from src by one of four calls (0 try_send, 1
 * try_send2 in two parts, 2 reserve and commit, 3 the blocking send),
 * delivered and checked. */
static void box_roundtrip(ivshm_ep_t *a, ivshm_ep_t *b, uint32_t peer,
                          struct forms *got, const char *src, uint32_t L,
                          int way)
{
    uint32_t n0 = got->n;
    memset(got->buf, 0, L + 64); /* first: a test may deliver at publish */
    if (way == 0) {
        assert_int_equal(ivshm_ep_try_send(b, peer, 7, src, L), IVSHM_OK);
    } else if (way == 1) {
        assert_int_equal(
            ivshm_ep_try_send2(b, peer, 7, src, L / 2, src + L / 2, L - L / 2),
            IVSHM_OK);
    } else if (way == 3) {
        assert_int_equal(ivshm_ep_send(b, peer, 7, src, L), IVSHM_OK);
    } else {
        void *buf;
        ivshm_rsv_t rsv;
        assert_int_equal(ivshm_ep_reserve(b, peer, L, &buf, &rsv), IVSHM_OK);
        memcpy(buf, src, L);
        assert_int_equal(ivshm_ep_commit(b, &rsv, 7, L), IVSHM_OK);
    }
    wait_got(a, got, n0);
    assert_int_equal(got->n, n0 + 1);
    assert_int_equal(got->tag, 7);
    assert_int_equal(got->len, L);
    assert_int_equal(got->total, L);
    assert_memory_equal(got->buf, src, L);
    assert_int_equal(got->buf[L], 0);
}

/* A receiver with a whole handler (ivshm_ep_set_whole_handler) gets every
 * whole message there, with its sender, tag, bytes and length: before it
 * grants a box (the FIFO's short, inline and fragment forms), in its box
 * (the usual entry, and a committed cell), and each piece of a longer
 * message goes to the message handler instead. Every wait is bounded: a
 * message lost to the wrong handler fails, never hangs. */
enum { WHOLE_WAIT = 100000 }; /* progress calls */
struct wholes {
    struct forms pieces;
    uint32_t n, sender, tag, len;
    uint32_t tags[8]; /* the last eight tags, message n at n % 8 */
    char buf[1024];
    /* the receiver's progress in whole_roundtrip (NULL: ivshm_ep_progress) */
    int (*progress)(ivshm_ep_t *ep);
};
static void whole_handler(void *arg, uint32_t sender, uint32_t tag,
                          const void *data, uint32_t len)
{
    struct wholes *w = arg;
    assert_true(len <= sizeof(w->buf));
    memcpy(w->buf, data, len);
    w->sender = sender;
    w->tag = tag;
    w->tags[w->n % 8] = tag;
    w->len = len;
    w->n++;
}
static void pieces_handler(void *arg, const ivshm_msg_t *m)
{
    forms_handler(&((struct wholes *)arg)->pieces, m);
}

/* A whole handler no endpoint has: ivshm_ep_progress_whole must never
 * call it (test_progress_whole). */
static void never_whole(void *arg, uint32_t sender, uint32_t tag,
                        const void *data, uint32_t len)
{
    (void)arg, (void)sender, (void)tag, (void)data, (void)len;
    fail_msg("ivshm_ep_progress_whole called a handler the endpoint does "
             "not have");
}
/* The receiver's progress (struct wholes' progress): ivshm_ep_progress_whole
 * naming the handler the endpoint has, another one, or none. */
static int progress_named(ivshm_ep_t *ep)
{
    return ivshm_ep_progress_whole(ep, whole_handler);
}
static int progress_other(ivshm_ep_t *ep)
{
    return ivshm_ep_progress_whole(ep, never_whole);
}
static int progress_unnamed(ivshm_ep_t *ep)
{
    return ivshm_ep_progress_whole(ep, NULL);
}
static void whole_roundtrip(ivshm_ep_t *a, ivshm_ep_t *b, uint32_t peer,
                            struct wholes *got, uint32_t from,
                            const char *src, uint32_t L, uint32_t tag)
{
    uint32_t n0 = got->n, p0 = got->pieces.n;
    assert_int_equal(ivshm_ep_try_send(b, peer, tag, src, L), IVSHM_OK);
    for (int i = 0; i < WHOLE_WAIT && got->n == n0 && got->pieces.n == p0;
         i++) /* to either handler */
        got->progress ? got->progress(a) : ivshm_ep_progress(a);
    assert_int_equal(got->pieces.n, p0);
    assert_int_equal(got->n, n0 + 1);
    assert_int_equal(got->sender, from);
    assert_int_equal(got->tag, tag);
    assert_int_equal(got->len, L);
    assert_memory_equal(got->buf, src, L);
}

static void test_whole_handler(void **state)
{
    (void)state;
    ivshm_ep_config_t cfg = box_config();
    cfg.fbox_threshold = 8; /* after the six sends through the FIFO */
    static struct wholes got;
    memset(&got, 0, sizeof(got));
    ivshm_ep_t *a, *b;
    uint32_t peer = make_pair(&cfg, pieces_handler, &got, &cfg, &a, &b);
    ivshm_ep_set_whole_handler(a, whole_handler);
    uint32_t from = ivshm_ep_index(b);
    char src[1024];
    fill_pattern(src, sizeof(src), 7, 3);
    /* the FIFO, before the box: each form of cell (1000 bytes: a
     * fragment, the cells being 256) */
    const uint32_t lens[] = {0, 1, 8, 40, 150, 200};
    for (unsigned i = 0; i < 6; i++)
        whole_roundtrip(a, b, peer, &got, from, src + i, lens[i], 9 + i);
    whole_roundtrip(a, b, peer, &got, from, src, 1000, 20);
    assert_null(b->peers[peer]->tx_fbox);
    /* the box: usual entries of each size, with tags up to 255 */
    for (int i = 0; i < 100 && !b->peers[peer]->tx_fbox; i++)
        whole_roundtrip(a, b, peer, &got, from, src, 1, 1);
    assert_non_null(b->peers[peer]->tx_fbox);
    for (unsigned i = 0; i < 6; i++)
        whole_roundtrip(a, b, peer, &got, from, src + 2 * i, lens[i],
                        250 + i);
    /* a reservation held in the box: a message sent meanwhile goes
     * through the FIFO, the committed cell (not the usual entry) after it;
     * both whole */
    uint32_t n0 = got.n, p0 = got.pieces.n;
    void *buf;
    ivshm_rsv_t rsv;
    assert_int_equal(ivshm_ep_reserve(b, peer, 20, &buf, &rsv), IVSHM_OK);
    assert_true(rsv.pos & FBOX_POS_FLAG);
    memcpy(buf, src + 3, 20);
    whole_roundtrip(a, b, peer, &got, from, src + 5, 24, 41);
    assert_int_equal(ivshm_ep_commit(b, &rsv, 42, 20), IVSHM_OK);
    for (int i = 0; i < WHOLE_WAIT && got.n < n0 + 2 && got.pieces.n == p0;
         i++)
        ivshm_ep_progress(a);
    assert_int_equal(got.pieces.n, p0);
    assert_int_equal(got.n, n0 + 2);
    assert_int_equal(got.sender, from);
    assert_int_equal(got.tag, 42);
    assert_int_equal(got.len, 20);
    assert_memory_equal(got.buf, src + 3, 20);
    /* a longer message: its pieces to the message handler */
    uint32_t T = cfg.frag_size + 10;
    p0 = got.pieces.n;
    static char big[70000];
    assert_true(T <= sizeof(big));
    for (uint32_t i = 0; i < T; i++)
        big[i] = (char)(i * 11 + 1);
    n0 = got.n;
    assert_int_equal(ivshm_ep_send(b, peer, 4, big, T), IVSHM_OK);
    for (int i = 0; i < WHOLE_WAIT && got.pieces.n < p0 + 2 && got.n == n0;
         i++)
        ivshm_ep_progress(a);
    assert_int_equal(got.n, n0);
    assert_int_equal(got.pieces.total, T);
    assert_memory_equal(got.pieces.buf, big, T);
    /* and the next whole message is whole again */
    whole_roundtrip(a, b, peer, &got, from, src, 3, 30);
    ivshm_ep_destroy(b);
    ivshm_ep_destroy(a);
}

/* ivshm_ep_progress_whole, naming the receiver's whole handler, delivers
 * as ivshm_ep_progress does: the FIFO's forms, then a granted box's usual
 * entries (the path on which the named handler is called) in a window of
 * sends taken by one call; naming another handler, or none, it is
 * ivshm_ep_progress, and the handler named is never called. */
static void test_progress_whole(void **state)
{
    (void)state;
    static int (*const modes[])(ivshm_ep_t *) = {
        progress_named, progress_other, progress_unnamed};
    for (unsigned m = 0; m < 3; m++) {
        ivshm_ep_config_t cfg = box_config();
        cfg.fbox_threshold = 2;
        static struct wholes got;
        memset(&got, 0, sizeof(got));
        got.progress = modes[m];
        ivshm_ep_t *a, *b;
        uint32_t peer = make_pair(&cfg, pieces_handler, &got, &cfg, &a, &b);
        ivshm_ep_set_whole_handler(a, whole_handler);
        uint32_t from = ivshm_ep_index(b);
        char src[256];
        fill_pattern(src, sizeof(src), 5, m);
        whole_roundtrip(a, b, peer, &got, from, src, 40, 3); /* FIFO */
        for (int i = 0; i < 100 && !b->peers[peer]->tx_fbox; i++)
            whole_roundtrip(a, b, peer, &got, from, src, 1, 1);
        assert_non_null(b->peers[peer]->tx_fbox);
        for (uint32_t L = 0; L <= 56; L += 8)
            whole_roundtrip(a, b, peer, &got, from, src + L, L, 100 + L);
        /* a window: eight sends, then one call that takes them all, in
         * order (their tags), the last with its bytes */
        uint32_t n0 = got.n;
        for (uint32_t i = 0; i < 8; i++)
            assert_int_equal(ivshm_ep_try_send(b, peer, 200 + i, src + i,
                                               8 + i),
                             IVSHM_OK);
        assert_int_equal(got.progress(a), 8);
        assert_int_equal(got.n, n0 + 8);
        for (uint32_t i = 0; i < 8; i++)
            assert_int_equal(got.tags[(n0 + i) % 8], 200 + i);
        assert_int_equal(got.len, 15);
        assert_memory_equal(got.buf, src + 7, 15);
        assert_int_equal(got.pieces.n, 0);
        ivshm_ep_destroy(b);
        ivshm_ep_destroy(a);
    }
}

/* A handler that calls progress itself: the nested call delivers nothing
 * (channel.h), and every piece comes once, whole and in order after the
 * handler returns. Each round sends five messages; the first one's handler
 * progresses a thousand times, through the FIFO (before the box is
 * granted) and through the box's usual entries. The code before this
 * rule delivered the next pieces from inside the handler and then moved
 * the FIFO's read position once more: the next round's first message was
 * lost. */
struct nested {
    ivshm_ep_t *ep;
    uint32_t n, depth, tags[64], inside, nested_n, events;
};
static void nested_handler(void *arg, uint32_t sender, uint32_t tag,
                           const void *data, uint32_t len)
{
    (void)sender;
    struct nested *g = arg;
    if (g->n < 64)
        g->tags[g->n] = tag;
    g->n++;
    if (g->depth)
        g->inside++; /* delivered from inside a handler */
    /* the payload is the sender's: its tag in every byte */
    assert_true(len == 8 + tag % 3 * 16);
    for (uint32_t i = 0; i < len; i++)
        assert_int_equal(((const unsigned char *)data)[i], tag & 0xff);
    if (g->depth == 0 && tag % 5 == 1) {
        g->depth++;
        for (int i = 0; i < 1000; i++)
            g->nested_n += (uint32_t)ivshm_ep_progress(g->ep);
        /* nor does a wait block there (5 s asked, answered at once) */
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        assert_int_equal(ivshm_ep_wait(g->ep, 5000), IVSHM_ERR_AGAIN);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        assert_true(t1.tv_sec - t0.tv_sec < 2);
        /* but a lost lease is said there too, not "again" */
        atomic_store(&g->ep->r->lease_lost, true);
        assert_int_equal(ivshm_ep_wait(g->ep, 5000), IVSHM_ERR_LEASE_LOST);
        atomic_store(&g->ep->r->lease_lost, false);
        g->depth--;
    }
}
/* The event handler is a handler too: a peer's death reported while its
 * messages wait delivers none of them from the event's own progress. */
static void nested_event(void *arg, int kind, uint32_t peer)
{
    (void)peer;
    struct nested *g = arg;
    assert_int_equal(kind, IVSHM_EV_PEER_DEAD);
    g->events++;
    g->depth++;
    for (int i = 0; i < 1000; i++)
        g->nested_n += (uint32_t)ivshm_ep_progress(g->ep);
    g->depth--;
}
static void nested_pieces(void *arg, const ivshm_msg_t *m)
{
    (void)arg;
    (void)m;
    fail_msg("a piece of a short message reached the message handler");
}
static void test_nested_progress(void **state)
{
    (void)state;
    ivshm_ep_config_t cfg = box_config();
    cfg.fbox_threshold = 8;
    static struct nested got;
    memset(&got, 0, sizeof(got));
    ivshm_ep_t *a, *b;
    uint32_t peer = make_pair(&cfg, nested_pieces, &got, &cfg, &a, &b);
    got.ep = a;
    ivshm_ep_set_whole_handler(a, nested_handler);
    char src[40];
    uint32_t tag = 1;
    for (int round = 0; round < 11; round++) {
        uint32_t n0 = got.n;
        for (int i = 0; i < 5; i++, tag++) {
            memset(src, (int)tag, sizeof(src));
            assert_int_equal(ivshm_ep_try_send(b, peer, tag, src, 8 + tag % 3 * 16),
                             IVSHM_OK);
        }
        WAIT_UNTIL(a, got.n >= n0 + 5);
        for (int i = 0; i < 1000; i++)
            ivshm_ep_progress(a); /* nothing more comes */
        assert_int_equal(got.n, n0 + 5);
    }
    assert_non_null(b->peers[peer]->tx_fbox); /* the later rounds: the box */
    for (uint32_t i = 0; i < got.n; i++)
        assert_int_equal(got.tags[i], i + 1);
    assert_int_equal(got.inside, 0);
    assert_int_equal(got.nested_n, 0);
    /* the event handler: five messages wait in the box when the sender
     * is reported dead; they come after the event, in order */
    ivshm_ep_set_event_handler(a, nested_event, &got);
    uint32_t n0 = got.n;
    for (int i = 0; i < 5; i++, tag++) {
        memset(src, (int)tag, sizeof(src));
        assert_int_equal(ivshm_ep_try_send(b, peer, tag, src, 8 + tag % 3 * 16),
                         IVSHM_OK);
    }
    ivshm__peer_died(a, ivshm_ep_index(b));
    assert_int_equal(got.events, 1);
    assert_int_equal(got.n, n0);
    WAIT_UNTIL(a, got.n >= n0 + 5);
    for (uint32_t i = 0; i < got.n; i++)
        assert_int_equal(got.tags[i], i + 1);
    assert_int_equal(got.inside, 0);
    assert_int_equal(got.nested_n, 0);
    ivshm_ep_stats_t es;
    ivshm_ep_stats(a, &es);
    assert_int_equal(es.invalid_dropped, 0);
    ivshm_ep_destroy(b);
    ivshm_ep_destroy(a);
}

/* The usual path (chan_fbox_read.h, in ivshm_ep_progress) takes only the
 * pair's next message: an entry ahead of the pair's order, and a cell
 * entry whose word happens to carry the pair's next sequence in its low
 * bits, are not usual entries; they are left to the whole pass, which
 * parks the one and delivers the other. */
static void test_fbox_usual_takes_only_next(void **state)
{
    (void)state;
    ivshm_ep_config_t cfg = box_config();
    static struct forms got;
    char src[64];
    fill_pattern(src, sizeof(src), 5, 1);
    for (int part = 0; part < 2; part++) {
        memset(&got, 0, sizeof(got));
        ivshm_ep_t *a, *b;
        uint32_t peer = make_pair(&cfg, forms_handler, &got, &cfg, &a, &b);
        struct peer *tp = box_granted(a, b, peer, &got);
        struct peer *rp = a->peers[ivshm_ep_index(b)];
        assert_int_equal(a->nactive, 1);
        uint32_t n0 = got.n;
        if (part == 0) {
            /* a message one ahead of the pair's order */
            tp->pseq_out++;
            assert_int_equal(ivshm_ep_try_send(b, peer, 6, src, 5),
                             IVSHM_OK);
            assert_false(usual_entry(rp, box_head_word(rp)));
            for (int i = 0; i < 4; i++) /* well inside GAP_WAIT_NS */
                ivshm_ep_progress(a);
            assert_int_equal(got.n, n0);
        } else {
            /* a cell entry (its word's pseq bits read 0) when the pair's
             * next piece is 0x10000 */
            void *buf;
            ivshm_rsv_t rsv;
            /* a reservation held in the box stops the usual send's one
             * compare, and its end (cancel, commit) lets it go again */
            const uint32_t usual = tp->tx_usual_below;
            assert_true(usual > 0);
            assert_int_equal(ivshm_ep_reserve(b, peer, 20, &buf, &rsv),
                             IVSHM_OK);
            assert_true(rsv.pos & FBOX_POS_FLAG);
            assert_int_equal(tp->tx_usual_below, 0);
            ivshm_ep_cancel(b, &rsv);
            assert_int_equal(tp->tx_usual_below, usual);
            for (int i = 0; i < WHOLE_WAIT && rp->pseq_in != tp->pseq_out;
                 i++)
                ivshm_ep_progress(a); /* the cancel's NOP */
            assert_int_equal(rp->pseq_in, tp->pseq_out);
            assert_int_equal(got.n, n0);
            rp->pseq_in = tp->pseq_out = 0x10000;
            assert_int_equal(ivshm_ep_reserve(b, peer, 20, &buf, &rsv),
                             IVSHM_OK);
            assert_true(rsv.pos & FBOX_POS_FLAG);
            assert_int_equal(tp->tx_usual_below, 0);
            memcpy(buf, src, 20);
            assert_int_equal(ivshm_ep_commit(b, &rsv, 42, 20), IVSHM_OK);
            assert_int_equal(tp->tx_usual_below, usual);
            uint64_t w = box_head_word(rp);
            assert_int_equal(FBOX_KIND(w), FBOX_CELL);
            assert_int_equal(FBOX_SEQ(w), (uint16_t)(rp->rx_fbox_seq + 1));
            assert_false(usual_entry(rp, w));
            for (int i = 0; i < WHOLE_WAIT && got.n == n0; i++)
                ivshm_ep_progress(a);
            assert_int_equal(got.n, n0 + 1);
            assert_int_equal(got.tag, 42);
            assert_int_equal(got.len, 20);
            assert_memory_equal(got.buf, src, 20);
        }
        ivshm_ep_destroy(b);
        ivshm_ep_destroy(a);
    }
}

/* A pass that ends on its budget leaves the release of what it read to
 * the next pass (the tail goes out in batches). That next pass finds the
 * queues empty, and must still release: a sender that reads the tail sees
 * the room the receiver already made, in the FIFO and in a fast box. */
static void test_release_after_budget(void **state)
{
    (void)state;
    int got = 0;
    ivshm_ep_config_t cfg;
    ivshm_ep_config_init(&cfg);
    cfg.fbox_cells = 0; /* the FIFO only */
    cfg.max_per_poll = 4;
    ivshm_ep_t *rx, *tx;
    uint32_t peer = make_pair(&cfg, nop_handler, &got, &cfg, &rx, &tx);
    assert_true(cfg.fifo_cells / 4 > cfg.max_per_poll); /* not a batch */
    for (int i = 0; i < 4; i++)
        assert_int_equal(ivshm_ep_try_send(tx, peer, 1, "x", 1), IVSHM_OK);
    assert_int_equal(ivshm_ep_progress(rx), 4);
    assert_int_equal(got, 4);
    assert_true(atomic_load(&rx->ctl->tail) < atomic_load(&rx->ctl->head));
    assert_int_equal(ivshm_ep_progress(rx), 0);
    assert_int_equal(atomic_load(&rx->ctl->tail), atomic_load(&rx->ctl->head));
    ivshm_ep_destroy(tx);
    ivshm_ep_destroy(rx);

    cfg = box_config();
    cfg.max_per_poll = 4;
    static struct forms forms;
    memset(&forms, 0, sizeof(forms));
    peer = make_pair(&cfg, forms_handler, &forms, &cfg, &rx, &tx);
    box_granted(rx, tx, peer, &forms);
    struct peer *rp = rx->peers[ivshm_ep_index(tx)];
    while (ivshm_ep_progress(rx) > 0)
        ;
    uint32_t n0 = forms.n;
    for (int i = 0; i < 4; i++)
        assert_int_equal(ivshm_ep_try_send(tx, peer, 1, "y", 1), IVSHM_OK);
    assert_int_equal(ivshm_ep_progress(rx), 4);
    assert_int_equal(forms.n, n0 + 4);
    assert_true(rp->rx_fbox_pos - rp->rx_fbox_released < rx->fbox_ring / 4);
    assert_true(atomic_load(&rp->rx_fbox_hdr->tail) < rp->rx_fbox_pos);
    assert_int_equal(ivshm_ep_progress(rx), 0);
    assert_int_equal(atomic_load(&rp->rx_fbox_hdr->tail), rp->rx_fbox_pos);
    /* the same where a whole pass read them (cell entries are not the
     * usual path's, which leaves the stats' mirror to that next call too):
     * the call that finds nothing releases them */
    n0 = forms.n;
    for (int i = 0; i < 4; i++) {
        void *buf;
        ivshm_rsv_t rsv;
        assert_int_equal(ivshm_ep_reserve(tx, peer, 20, &buf, &rsv),
                         IVSHM_OK);
        assert_true(rsv.pos & FBOX_POS_FLAG);
        memset(buf, 'z', 20);
        assert_int_equal(ivshm_ep_commit(tx, &rsv, 2, 20), IVSHM_OK);
    }
    assert_int_equal(ivshm_ep_progress(rx), 4);
    assert_int_equal(forms.n, n0 + 4);
    assert_false(rx->mirror_due);
    assert_true(atomic_load(&rp->rx_fbox_hdr->tail) < rp->rx_fbox_pos);
    assert_int_equal(ivshm_ep_progress(rx), 0);
    assert_int_equal(atomic_load(&rp->rx_fbox_hdr->tail), rp->rx_fbox_pos);
    ivshm_ep_destroy(tx);
    ivshm_ep_destroy(rx);
}

/* A pair whose receiver rx has one fast box, granted to tx, and an idle
 * FIFO (the usual poll's case): the receiver's record of tx. */
static struct peer *one_box_pair(struct forms *got, ivshm_ep_t **rx,
                                 ivshm_ep_t **tx, uint32_t *peer)
{
    ivshm_ep_config_t cfg = box_config();
    memset(got, 0, sizeof(*got));
    *peer = make_pair(&cfg, forms_handler, got, &cfg, rx, tx);
    box_granted(*rx, *tx, *peer, got);
    while (ivshm_ep_progress(*rx) > 0)
        ;
    assert_int_equal((*rx)->nactive, 1);
    return (*rx)->peers[ivshm_ep_index(*tx)];
}

/* A box's head that is not the pair's next piece (here: the receiver
 * expects one more piece before it, which never comes) waits for its
 * predecessor, also where the receiver has one box and an idle FIFO and
 * takes the box's usual entries without the whole pass; after the gap's
 * wait (GAP_WAIT_NS) the whole pass, which did not poll the idle FIFO,
 * counts the piece lost and hands the message over. */
static void test_fbox_ahead_of_lost_piece(void **state)
{
    (void)state;
    static struct forms got;
    ivshm_ep_t *rx, *tx;
    uint32_t peer;
    struct peer *rp = one_box_pair(&got, &rx, &tx, &peer);
    rp->pseq_in--; /* a piece before the next one is missing */
    uint32_t n0 = got.n;
    assert_int_equal(ivshm_ep_try_send(tx, peer, 3, "late", 4), IVSHM_OK);
    for (int i = 0; i < 100; i++)
        ivshm_ep_progress(rx);
    assert_int_equal(got.n, n0); /* waits for its predecessor */
    double t0 = tu_now_s();
    while (got.n == n0 && tu_now_s() - t0 < 5.0)
        ivshm_ep_progress(rx);
    assert_int_equal(got.n, n0 + 1);
    assert_int_equal(got.tag, 3);
    assert_memory_equal(got.buf, "late", 4);
    ivshm_ep_stats_t es;
    ivshm_ep_stats(rx, &es);
    assert_int_equal(es.invalid_dropped, 1);
    ivshm_ep_destroy(tx);
    ivshm_ep_destroy(rx);
}

/* A message entry longer than the box's limit (fbox_msg_max) but inside
 * the ring, at the head of the one box of a receiver whose FIFO is idle:
 * dropped, the box no longer read, nothing handed over. */
static void test_fbox_msg_too_long(void **state)
{
    (void)state;
    static struct forms got;
    ivshm_ep_t *rx, *tx;
    uint32_t peer;
    struct peer *rp = one_box_pair(&got, &rx, &tx, &peer);
    uint32_t off = rp->rx_fbox_off, len = (uint32_t)rx->fbox_msg_max + 1;
    assert_true(off + fbox_entry_size(off, len) <= rx->fbox_ring);
    uint64_t fake = FBOX_WORD(rp->rx_fbox_seq + 1, FBOX_MSG, 7, len,
                              rp->pseq_in);
    memcpy(rp->rx_fbox + off, &fake, 8);
    uint32_t n0 = got.n;
    for (int i = 0; i < 10; i++)
        ivshm_ep_progress(rx);
    assert_int_equal(got.n, n0);
    ivshm_ep_stats_t es;
    ivshm_ep_stats(rx, &es);
    assert_int_equal(es.invalid_dropped, 1);
    assert_true(rp->rx_fbox_bad);
    ivshm_ep_destroy(tx);
    ivshm_ep_destroy(rx);
}

/* Every length of a whole message through a granted box by every call,
 * lap after lap (SKIP entries at the ring's end); 16-byte packing within
 * a line and whole-line ends for entries that cross one; a word of an
 * earlier lap's payload is never taken for an entry, since the writer
 * zeroes the word after each entry; an entry that would run past the
 * ring is dropped and the box no longer read. */
static void test_fbox_entries(void **state)
{
    (void)state;
    ivshm_ep_config_t cfg = box_config();
    static struct forms got;
    memset(&got, 0, sizeof(got));
    char src[4096];
    fill_pattern(src, sizeof(src), 7, 3);
    ivshm_ep_t *a, *b;
    uint32_t peer = make_pair(&cfg, forms_handler, &got, &cfg, &a, &b);
    struct peer *tp = box_granted(a, b, peer, &got);
    struct peer *rp = a->peers[ivshm_ep_index(b)];
    assert_non_null(rp->rx_fbox);
    uint32_t ring = tp->tx_fbox_ring;
    assert_int_equal(ring, 9 * 256);
    uint64_t msgs = 0;
    uint16_t seq0 = tp->tx_fbox_seq;
    for (uint32_t L = 0; L <= 256 - CELL_SHORT_HDR; L++)
        for (int way = 0; way < 3; way++, msgs++) {
            uint32_t off = tp->tx_fbox_off;
            box_roundtrip(a, b, peer, &got, src, L, way);
            /* reserve/commit takes a cell entry (the full header where
             * that costs no line), the others a message */
            uint32_t len = L;
            if (way == 2) {
                bool full = L + CELL_HDR <= 256 &&
                            (L + CELL_HDR + 63) / 64 == (L + CELL_SHORT_HDR + 63) / 64;
                len = (full ? CELL_HDR : CELL_SHORT_HDR) + L;
                if (len < CELL_HDR)
                    len = CELL_HDR;
            }
            uint32_t size = fbox_entry_size(off, len);
            if (size > ring - off)
                size = fbox_entry_size(0, len), off = 0; /* after a skip */
            assert_int_equal(tp->tx_fbox_off, (off + size) % ring);
        }
    uint16_t skips = (uint16_t)(tp->tx_fbox_seq - seq0 - msgs);
    assert_true(skips > 0);
    ivshm_ep_stats_t es;
    ivshm_ep_stats(a, &es);
    assert_int_equal(es.invalid_dropped, 0);
    /* packing: at a line's start, two 8-byte messages with a 16-byte head
     * share the line; a 100-byte one ends on a line's end */
    while (tp->tx_fbox_off % 64 || tp->tx_fbox_off + 256 > ring)
        box_roundtrip(a, b, peer, &got, src, 40, 1);
    uint32_t line = tp->tx_fbox_off;
    box_roundtrip(a, b, peer, &got, src, 24, 1);
    assert_int_equal(tp->tx_fbox_off, line + 32);
    box_roundtrip(a, b, peer, &got, src, 24, 1);
    assert_int_equal(tp->tx_fbox_off, line + 64);
    box_roundtrip(a, b, peer, &got, src, 24, 1);
    box_roundtrip(a, b, peer, &got, src, 100, 1);
    /* from 96, 112 bytes cross into the next line: to its end */
    assert_int_equal(tp->tx_fbox_off, line + 256);
    /* layout 6: an entry keeps the rest of its line where the next one of
     * its size would not fit there. 40-byte messages (48-byte entries)
     * take a line each, 8-byte ones (16) pack four to a line, a 24-byte
     * one (32) after an 8-byte one keeps the line's last 48 bytes, and a
     * 40-byte one after an 8-byte one fills its line exactly. */
    while (tp->tx_fbox_off % 64 || tp->tx_fbox_off + 384 > ring)
        box_roundtrip(a, b, peer, &got, src, 40, 1);
    line = tp->tx_fbox_off;
    for (uint32_t i = 1; i <= 2; i++) {
        box_roundtrip(a, b, peer, &got, src, 40, 1);
        assert_int_equal(tp->tx_fbox_off, line + i * 64);
    }
    for (uint32_t i = 1; i <= 4; i++) {
        box_roundtrip(a, b, peer, &got, src, 8, 1);
        assert_int_equal(tp->tx_fbox_off, line + 128 + i * 16);
    }
    box_roundtrip(a, b, peer, &got, src, 8, 1);
    box_roundtrip(a, b, peer, &got, src, 24, 1);
    assert_int_equal(tp->tx_fbox_off, line + 256);
    box_roundtrip(a, b, peer, &got, src, 8, 1);
    box_roundtrip(a, b, peer, &got, src, 40, 1);
    assert_int_equal(tp->tx_fbox_off, line + 320);
    assert_memory_equal(got.buf, src, 40);

    /* a window of fbox_cells messages of a whole cell fits the box from
     * any place in the ring (a lap's skipped end included): none goes to
     * the FIFO, whose cells the receiver would have to interleave */
    for (int round = 0; round < 6; round++) {
        box_roundtrip(a, b, peer, &got, src, (uint32_t)round * 40 + 8, 1);
        uint64_t fifo_head = atomic_load(&a->ctl->head);
        uint32_t big = 256 - CELL_SHORT_HDR, n1 = got.n;
        for (uint32_t i = 0; i < cfg.fbox_cells; i++)
            assert_int_equal(ivshm_ep_try_send(b, peer, 7, src, big),
                             IVSHM_OK);
        assert_int_equal(atomic_load(&a->ctl->head), fifo_head);
        wait_n(a, &got, n1 + cfg.fbox_cells);
        assert_memory_equal(got.buf, src, big);
    }

    /* an earlier lap's bytes right after the next entry, shaped as the
     * entry the receiver will look for next: never delivered */
    tp->tx_fbox_tail = atomic_load(&tp->tx_fbox_hdr->tail); /* all free */
    uint32_t off = rp->rx_fbox_off, size = fbox_entry_size(off, 1);
    assert_true(off + size + 16 <= ring);
    uint64_t fake = FBOX_WORD(rp->rx_fbox_seq + 2, FBOX_MSG, 9, 4,
                              rp->pseq_in + 1);
    memcpy(rp->rx_fbox + off + size, &fake, 8);
    memcpy(rp->rx_fbox + off + size + 8, "JUNK", 4);
    uint32_t n0 = got.n;
    assert_int_equal(ivshm_ep_try_send(b, peer, 7, "x", 1), IVSHM_OK);
    for (int i = 0; i < 100; i++)
        ivshm_ep_progress(a);
    assert_int_equal(got.n, n0 + 1);
    assert_int_equal(got.tag, 7);
    assert_int_equal(got.len, 1);

    /* the same at the first line start beyond what was zeroed ahead so
     * far (at least FBOX_AHEAD, at most a batch more), where the last of
     * k 32-byte entries ends: the publishes before it zeroed it ahead, so
     * it takes no terminator */
    const uint32_t most = FBOX_AHEAD + FBOX_AHEAD_BATCH + 64;
    while (tp->tx_fbox_off % 64 || tp->tx_fbox_off + most + 64 > ring)
        box_roundtrip(a, b, peer, &got, src, 40, 1);
    tp->tx_fbox_tail = atomic_load(&tp->tx_fbox_hdr->tail);
    off = rp->rx_fbox_off;
    assert_int_equal(off % 64, 0);
    const uint32_t ahead = (uint32_t)(tp->tx_fbox_zeroed - tp->tx_fbox_pos);
    assert_true(ahead >= FBOX_AHEAD && ahead <= most && ahead % 64 == 0);
    const uint32_t k = ahead / 32;
    fake = FBOX_WORD(rp->rx_fbox_seq + k + 1, FBOX_MSG, 9, 4,
                     rp->pseq_in + k);
    memcpy(rp->rx_fbox + off + ahead, &fake, 8);
    memcpy(rp->rx_fbox + off + ahead + 8, "JUNK", 4);
    n0 = got.n;
    for (uint32_t i = 0; i < k; i++)
        assert_int_equal(ivshm_ep_try_send2(b, peer, 7, src, 16, src, 8),
                         IVSHM_OK);
    assert_int_equal(tp->tx_fbox_off, off + ahead);
    for (int i = 0; i < 100; i++)
        ivshm_ep_progress(a);
    assert_int_equal(got.n, n0 + k);
    assert_int_equal(got.tag, 7);
    assert_int_equal(got.len, 24);

    /* the batch's lines too: earlier-lap words at every line start not
     * yet zeroed, up to a batch beyond FBOX_AHEAD; 32-byte entries, one
     * at a time, each the only one delivered */
    while (tp->tx_fbox_off % 64 || tp->tx_fbox_off + most + 128 > ring)
        box_roundtrip(a, b, peer, &got, src, 40, 1);
    tp->tx_fbox_tail = atomic_load(&tp->tx_fbox_hdr->tail);
    off = rp->rx_fbox_off;
    const uint32_t z = (uint32_t)(tp->tx_fbox_zeroed - tp->tx_fbox_pos);
    for (uint32_t l = z; l <= most + 64; l += 64) {
        fake = FBOX_WORD(rp->rx_fbox_seq + l / 32 + 1, FBOX_MSG, 9, 4,
                         rp->pseq_in + l / 32);
        memcpy(rp->rx_fbox + off + l, &fake, 8);
    }
    for (uint32_t i = 0; i < (most + 64) / 32; i++) {
        n0 = got.n;
        assert_int_equal(ivshm_ep_try_send2(b, peer, 7, src, 16, src, 8),
                         IVSHM_OK);
        for (int j = 0; j < 20; j++)
            ivshm_ep_progress(a);
        assert_int_equal(got.n, n0 + 1);
        assert_int_equal(got.tag, 7);
    }

    /* zeroing ahead stopped by the tail (the box all but full): the entry
     * that then ends on the first line start not zeroed writes its own
     * terminator there */
    while (tp->tx_fbox_off % 64)
        box_roundtrip(a, b, peer, &got, src, 40, 1);
    while (tp->tx_fbox_off != 1024)
        box_roundtrip(a, b, peer, &got, src, 56, 1); /* 64 bytes each */
    ivshm_ep_progress(a); /* finds nothing: releases what was read */
    tp->tx_fbox_tail = atomic_load(&tp->tx_fbox_hdr->tail);
    assert_int_equal(tp->tx_fbox_tail, tp->tx_fbox_pos); /* all free */
    n0 = got.n;
    for (uint32_t i = 0; i < ring / 64 - 1; i++) /* wraps to 0, up to 960 */
        assert_int_equal(ivshm_ep_try_send(b, peer, 7, src, 56), IVSHM_OK);
    assert_int_equal(tp->tx_fbox_off, 960);
    assert_int_equal(tp->tx_fbox_zeroed, tp->tx_fbox_pos + 64); /* not done */
    wait_n(a, &got, n0 + ring / 64 - 1);
    tp->tx_fbox_tail = atomic_load(&tp->tx_fbox_hdr->tail);
    fake = FBOX_WORD(rp->rx_fbox_seq + 2, FBOX_MSG, 9, 4, rp->pseq_in + 1);
    memcpy(rp->rx_fbox + 1024, &fake, 8);
    n0 = got.n;
    assert_int_equal(ivshm_ep_try_send(b, peer, 7, src, 56), IVSHM_OK);
    assert_int_equal(tp->tx_fbox_off, 1024);
    for (int i = 0; i < 50; i++)
        ivshm_ep_progress(a);
    assert_int_equal(got.n, n0 + 1);
    assert_int_equal(got.len, 56);

    /* an entry that would run past the ring's end */
    while (tp->tx_fbox_off % 64)
        box_roundtrip(a, b, peer, &got, src, 40, 1);
    while (tp->tx_fbox_off != ring - 64)
        box_roundtrip(a, b, peer, &got, src, 56, 1); /* 64 bytes each */
    assert_int_equal(rp->rx_fbox_off, ring - 64);
    fake = FBOX_WORD(rp->rx_fbox_seq + 1, FBOX_MSG, 7, 200, rp->pseq_in);
    memcpy(rp->rx_fbox + ring - 64, &fake, 8);
    n0 = got.n;
    for (int i = 0; i < 10; i++)
        ivshm_ep_progress(a);
    assert_int_equal(got.n, n0);
    ivshm_ep_stats(a, &es);
    assert_int_equal(es.invalid_dropped, 1);
    assert_true(rp->rx_fbox_bad);
    ivshm_ep_destroy(b);
    ivshm_ep_destroy(a);
}

/* Messages longer than FBOX_WORD_LINE_LAST_ABOVE, whose bytes in the
 * word's line are stored last (chan_send.c): every split of head and body
 * around that line's end, from entries at each 16-byte place of a line
 * (or at the ring's start after a SKIP), go into the box as FBOX_MSG
 * entries with their payload in place when the word is published (the
 * receiver polls right then), and the entry's padding after the payload
 * is not written. */
static void test_fbox_long_messages(void **state)
{
    (void)state;
    ivshm_ep_config_t cfg = box_config();
    cfg.cell_size = 1088;
    static struct forms got;
    memset(&got, 0, sizeof(got));
    static char src[2048];
    fill_pattern(src, sizeof(src), 11, 1);
    ivshm_ep_t *a, *b;
    uint32_t peer = make_pair(&cfg, forms_handler, &got, &cfg, &a, &b);
    struct peer *tp = box_granted(a, b, peer, &got);
    const uint32_t ring = tp->tx_fbox_ring;
    const uint32_t lens[] = {FBOX_WORD_LINE_LAST_ABOVE + 1, 512 + 14, 1000,
                             1088 - CELL_SHORT_HDR};
    memset(&at_pub, 0, sizeof(at_pub));
    at_pub.rx = a;
    ivshm__test_step = poll_at_publish;
    for (unsigned li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
        for (uint32_t place = 0; place < 64; place += 16) {
            const uint32_t L = lens[li];
            /* the first byte after the word's line, +-1, for each place */
            const uint32_t in_line = 56 - place;
            const uint32_t heads[] = {0, 1, in_line - 1, in_line, in_line + 1,
                                      200, L - 1, L};
            for (unsigned hi = 0; hi < sizeof(heads) / sizeof(heads[0]);
                 hi++) {
                /* 1-byte messages take 16 bytes: up to the place wanted */
                while (tp->tx_fbox_off % 64 != place)
                    box_roundtrip(a, b, peer, &got, src, 1, 0);
                uint32_t h = heads[hi], n0 = got.n;
                uint16_t seq0 = tp->tx_fbox_seq;
                /* where the entry goes: here, or after a SKIP at 0 */
                uint32_t at = tp->tx_fbox_off;
                uint32_t size = fbox_entry_size(at, L);
                bool skip = ring - at < size;
                if (skip)
                    size = fbox_entry_size(at = 0, L);
                char *pad = tp->tx_fbox + at + 8 + L;
                const uint32_t npad = size - 8 - L;
                memset(pad, 0xa5, npad);
                memset(got.buf, 0, L + 64);
                assert_int_equal(ivshm_ep_try_send2(b, peer, 7, src + 3, h,
                                                    src + 3 + h, L - h),
                                 IVSHM_OK);
                assert_int_equal((uint16_t)(tp->tx_fbox_seq - seq0),
                                 skip ? 2 : 1);
                uint64_t w;
                memcpy(&w, tp->tx_fbox + at, 8);
                assert_int_equal(FBOX_KIND(w), FBOX_MSG);
                assert_int_equal(FBOX_LEN(w), L);
                for (uint32_t i = 0; i < npad; i++)
                    assert_int_equal((unsigned char)pad[i], 0xa5);
                /* delivered at the publish: its bytes were in place */
                assert_int_equal(got.n, n0 + 1);
                assert_int_equal(got.len, L);
                assert_int_equal(got.tag, 7);
                assert_memory_equal(got.buf, src + 3, L);
                assert_int_equal(got.buf[L], 0);
            }
        }
    assert_true(at_pub.polls > 0);
    ivshm__test_step = NULL;
    at_pub.rx = NULL;
    ivshm_ep_destroy(b);
    ivshm_ep_destroy(a);
}

/* The word of the box entry at ring offset off, as the receiver sees it. */
static uint64_t box_word(const struct peer *rp, uint32_t off)
{
    uint64_t w;
    memcpy(&w, rp->rx_fbox + off, 8);
    return w;
}

/* The word of the entry the sender's next message to tp takes: at its
 * write offset, or at the ring's start after a SKIP. */
static uint32_t next_entry_at(const struct peer *tp, uint32_t len)
{
    uint32_t at = tp->tx_fbox_off;
    return tp->tx_fbox_ring - at < fbox_entry_size(at, len) ? 0 : at;
}

/* The receiver a answers the sender b (one byte, through a's own
 * connection to b, the first time made): b's record of a then shows
 * something in since b's last message. */
static void answer(ivshm_ep_t *a, ivshm_ep_t *b, uint32_t *to_b)
{
    if (*to_b == UINT32_MAX) {
        uint8_t addr[IVSHM_EP_ADDR_SIZE];
        ivshm_ep_address(b, addr);
        assert_int_equal(ivshm_ep_connect(a, addr, sizeof(addr), to_b),
                         IVSHM_OK);
    }
    struct peer *from_a = b->peers[ivshm_ep_index(a)];
    uint32_t in0 = from_a ? from_a->pseq_in : 0;
    assert_int_equal(ivshm_ep_try_send(a, *to_b, 3, "r", 1), IVSHM_OK);
    for (int i = 0; i < 1000 && (!from_a || from_a->pseq_in == in0); i++) {
        ivshm_ep_progress(b);
        from_a = b->peers[ivshm_ep_index(a)];
    }
    assert_non_null(from_a);
    /* (with a's ask for a box, once, two pieces) */
    assert_true(from_a->pseq_in != in0);
}

/* Box messages longer than a cell (layout 5): a receiver's box takes
 * message entries of up to a 32nd of its ring, at least a cell's inline
 * room, at most the smallest fragment. Up to the receiver's limit a whole
 * message that answers the receiver goes into the box as one FBOX_MSG
 * entry (by both try calls and the blocking send); one byte more goes by
 * a fragment. The sender judges by the receiver's geometry, not its own:
 * a receiver with a small box (limit: a cell's room) gets a message of
 * our limit by a fragment, and whole; a receiver whose box takes more
 * than ours gets messages up to its own limit in its box. */
static void test_fbox_msg_limit(void **state)
{
    (void)state;
    /* the limits of three geometries, and of none */
    ivshm_ep_config_t dflt, small = box_config(), big;
    ivshm_ep_config_init(&dflt);
    dflt.cell_size = 1088; /* the MPI front ends' cells and box */
    dflt.fbox_cells = 64;
    struct ctl_geom g;
    memset(&g, 0, sizeof(g));
    ivshm__ctl_size_for(&dflt, 4, &g);
    assert_int_equal(fbox_msg_limit(&g), 65 * 1088 / 32 - 8); /* 2202 */
    ivshm__ctl_size_for(&small, 4, &g);
    assert_int_equal(fbox_msg_limit(&g), 256 - CELL_SHORT_HDR);
    ivshm_ep_config_init(&big);
    big.cell_size = 4096;
    big.fbox_cells = 32;
    assert_int_equal(ivshm_ep_config_check(&big), IVSHM_OK);
    ivshm__ctl_size_for(&big, 4, &g);
    assert_int_equal(fbox_msg_limit(&g), FRAG_SIZE_MIN);
    g.fbox_cells = 0;
    assert_int_equal(fbox_msg_limit(&g), -1);

    static struct forms got;
    static char src[4200];
    fill_pattern(src, sizeof(src), 13, 5);
    dflt.fbox_threshold = 2;
    /* 0: both alike; 1: the receiver's box smaller (9 cells of 1088: a
     * cell's room); 2: larger (the sender has cells of 256 and a box of
     * 9, the receiver the MPI geometry): the receiver's limit holds */
    for (int mixed = 0; mixed < 3; mixed++) {
        memset(&got, 0, sizeof(got));
        ivshm_ep_config_t rcfg = dflt, tcfg = mixed == 2 ? small : dflt;
        if (mixed == 1)
            rcfg.fbox_cells = 8;
        ivshm_ep_t *a, *b;
        uint32_t peer = make_pair(&rcfg, forms_handler, &got, &tcfg, &a, &b);
        struct peer *tp = box_granted(a, b, peer, &got);
        struct peer *rp = a->peers[ivshm_ep_index(b)];
        uint32_t to_b = UINT32_MAX;
        const uint32_t limit = (uint32_t)a->fbox_msg_max;
        assert_int_equal(limit, mixed == 1 ? 1088 - CELL_SHORT_HDR
                                           : 65 * 1088 / 32 - 8);
        assert_int_equal(ivshm_ep_box_msg_max(a), limit);
        assert_int_equal(tp->tx_fbox_msg_max, limit);
        /* ours, whatever the receiver's */
        assert_int_equal(ivshm_ep_box_msg_max(b),
                         mixed == 2 ? 256 - CELL_SHORT_HDR
                                    : 65 * 1088 / 32 - 8);
        const uint32_t lens[] = {1088 - CELL_SHORT_HDR + 1, 2048 + 14,
                                 limit, limit + 1};
        static const int ways[] = {0, 1, 3}; /* try_send, try_send2, send */
        for (unsigned li = 0; li < 4; li++)
            for (unsigned wi = 0; wi < 3; wi++) {
                const int way = ways[wi];
                const uint32_t L = lens[li];
                answer(a, b, &to_b); /* an exchange, not a stream */
                uint32_t at = next_entry_at(tp, L);
                ivshm_ep_stats_t es0, es1;
                ivshm_ep_stats(a, &es0);
                box_roundtrip(a, b, peer, &got, src + li, L, way);
                ivshm_ep_stats(a, &es1);
                assert_int_equal(es1.invalid_dropped, es0.invalid_dropped);
                bool whole = L <= limit;
                uint64_t w = box_word(rp, at);
                /* whole: one message entry; else a cell (a fragment's) */
                assert_int_equal(FBOX_KIND(w), whole ? FBOX_MSG : FBOX_CELL);
                if (whole)
                    assert_int_equal(FBOX_LEN(w), L);
            }
        assert_false(rp->rx_fbox_bad);
        ivshm_ep_destroy(b);
        ivshm_ep_destroy(a);
    }
}

/* What the sender takes ahead for writing (ivshm__fbox_own_ahead,
 * ivshm__frag_own_next), seen through the test seam: every box span
 * starts at or after the write position and ends by the ring's end and
 * by what the cached tail frees; every fragment span is the start of a
 * free fragment, at most FRAG_SIZE_MIN long. */
static struct {
    const struct peer *tp;
    const ivshm_ep_t *sender;
    uint32_t box, frag, bad;
} own;

static void record_own(const char *from, const char *to)
{
    const ivshm_ep_t *e = own.sender;
    const char *pool = e->pool;
    uint64_t fsz = e->cfg.frag_size;
    if (from >= to) {
        own.bad++;
    } else if (from >= pool && from < pool + e->cfg.frag_count * fsz) {
        own.frag++;
        uint64_t f = (uint64_t)(from - pool) / fsz;
        bool is_free = (int64_t)(atomic_load(&e->fdone[f]) -
                                 e->frag_issued[f]) >= 0;
        if (from != pool + f * fsz || to > from + FRAG_SIZE_MIN || !is_free)
            own.bad++;
    } else {
        const struct peer *p = own.tp;
        own.box++;
        uint64_t lap = p->tx_fbox_pos - p->tx_fbox_off;
        if (from < p->tx_fbox + p->tx_fbox_off ||
            to > p->tx_fbox + p->tx_fbox_ring ||
            to > p->tx_fbox + (p->tx_fbox_tail + p->tx_fbox_ring - lap))
            own.bad++;
    }
}

/* Lines taken ahead: none where the endpoint's gate is off; box spans
 * through two laps read as they come (the ring's end bounds them), then
 * a box filled without reading (the free space bounds them); fragment
 * spans in a stream of 2 KiB messages with nothing acknowledged, where
 * the fragment due next is lent after the last; every message delivered
 * whole. */
static void test_own_ahead_bounds(void **state)
{
    (void)state;
    ivshm_ep_config_t cfg = mpi_box_config();
    cfg.frag_count = 4;
    static struct forms got;
    memset(&got, 0, sizeof(got));
    static char src[2100];
    fill_pattern(src, sizeof(src), 7, 3);
    ivshm_ep_t *a, *b;
    uint32_t peer = make_pair(&cfg, forms_handler, &got, &cfg, &a, &b);
    struct peer *tp = box_granted(a, b, peer, &got);
    memset(&own, 0, sizeof(own));
    own.tp = tp;
    own.sender = b;
    ivshm__test_own = record_own;

    /* the gate */
    b->own_ahead = false;
    box_roundtrip(a, b, peer, &got, src, 300, 0);
    box_roundtrip(a, b, peer, &got, src, 2048 + 14, 1); /* in the box */
    box_roundtrip(a, b, peer, &got, src, 2048 + 14, 1); /* a fragment */
    assert_int_equal(own.box + own.frag, 0);
    b->own_ahead = true;

    /* two laps of 1,000-byte messages (past any zeroing ahead), each read
     * as it comes */
    uint32_t ring = tp->tx_fbox_ring, laps = 2 * ring / 1024;
    for (uint32_t i = 0; i < laps; i++)
        box_roundtrip(a, b, peer, &got, src + i % 16, 1000, 0);
    assert_true(own.box >= laps / 2);
    assert_int_equal(own.bad, 0);

    /* a box filled without reading: the sender stops at its free space */
    uint32_t n0 = got.n, sent = 0;
    for (;;) {
        uint64_t pos0 = tp->tx_fbox_pos;
        assert_int_equal(ivshm_ep_try_send(b, peer, 7, src, 1000), IVSHM_OK);
        sent++;
        if (tp->tx_fbox_pos == pos0)
            break; /* full: that one went by the FIFO */
        assert_true(sent < ring / 1008 + 8);
    }
    assert_int_equal(own.bad, 0);
    wait_n(a, &got, n0 + sent);
    assert_memory_equal(got.buf, src, 1000);

    /* fragments: a stream of 2 KiB messages, none acknowledged meanwhile
     * (the first of a stream may go into the box) */
    uint32_t frag0 = own.frag, frags = 0;
    n0 = got.n;
    sent = 0;
    for (int i = 0; i < 8; i++) {
        uint64_t pos0 = tp->tx_fbox_pos;
        ivshm_status_t st =
            ivshm_ep_try_send2(b, peer, 7, src, 14, src + 14, 2048);
        if (st == IVSHM_ERR_AGAIN)
            break; /* every fragment lent */
        assert_int_equal(st, IVSHM_OK);
        sent++;
        frags += tp->tx_fbox_pos - pos0 <= 64 ? 1 : 0; /* a cell names it */
    }
    assert_int_equal(frags, cfg.frag_count);
    /* reported after each but the last: then the next one was lent */
    assert_int_equal(own.frag - frag0, cfg.frag_count - 1);
    assert_int_equal(own.bad, 0);
    wait_n(a, &got, n0 + sent);
    assert_int_equal(got.len, 2048 + 14);
    assert_memory_equal(got.buf, src, 2048 + 14);

    ivshm__test_own = NULL;
    ivshm_ep_destroy(b);
    ivshm_ep_destroy(a);
}

/* Which long messages the box takes (chan_send.c, long_entry_ok): in a
 * stream (nothing in from the receiver since our last long message) the
 * first goes into the box and the rest by fragments; after an answer the
 * next goes into the box again; a box that holds more than a quarter of
 * its ring unreleased sends it by a fragment, and the next
 * FBOX_LONG_SKIP tries do not look at the tail again; every message is
 * delivered whole, in order. */
static void test_fbox_long_answers_only(void **state)
{
    (void)state;
    ivshm_ep_config_t cfg = mpi_box_config();
    static struct forms got;
    memset(&got, 0, sizeof(got));
    static char src[2100];
    fill_pattern(src, sizeof(src), 5, 1);
    ivshm_ep_t *a, *b;
    uint32_t peer = make_pair(&cfg, forms_handler, &got, &cfg, &a, &b);
    struct peer *tp = box_granted(a, b, peer, &got);
    struct peer *rp = a->peers[ivshm_ep_index(b)];
    uint32_t to_b = UINT32_MAX;
    const uint32_t L = 2048 + 14;
    /* a stream of 5, then an answer and one more */
    answer(a, b, &to_b);
    for (int i = 0; i < 6; i++) {
        if (i == 5)
            answer(a, b, &to_b);
        uint32_t at = next_entry_at(tp, L);
        box_roundtrip(a, b, peer, &got, src + i, L, 1);
        bool box = i == 0 || i == 5;
        assert_int_equal(FBOX_KIND(box_word(rp, at)),
                         box ? FBOX_MSG : FBOX_CELL);
    }
    /* a box more than a quarter full (1-byte messages not yet read) */
    uint32_t quarter = tp->tx_fbox_ring / 4, n0 = got.n, sent = 0;
    while (tp->tx_fbox_pos - atomic_load(&tp->tx_fbox_hdr->tail) <= quarter) {
        assert_int_equal(ivshm_ep_try_send(b, peer, 7, "q", 1), IVSHM_OK);
        sent++;
    }
    answer(a, b, &to_b); /* a answers without reading its queues */
    uint32_t at = next_entry_at(tp, L);
    assert_int_equal(ivshm_ep_try_send2(b, peer, 7, src, 10, src + 10, L - 10),
                     IVSHM_OK);
    assert_int_equal(FBOX_KIND(box_word(rp, at)), FBOX_CELL);
    assert_int_equal(tp->tx_long_skip, FBOX_LONG_SKIP);
    for (int i = 0; i < 1000 && got.n < n0 + sent + 1; i++)
        ivshm_ep_progress(a);
    assert_int_equal(got.n, n0 + sent + 1);
    assert_int_equal(got.len, L);
    assert_memory_equal(got.buf, src, L);
    /* drained now, but the skipped tries do not look: by fragments */
    for (uint32_t i = 0; i < FBOX_LONG_SKIP; i++) {
        answer(a, b, &to_b);
        at = next_entry_at(tp, L);
        box_roundtrip(a, b, peer, &got, src + i, L, 1);
        assert_int_equal(FBOX_KIND(box_word(rp, at)), FBOX_CELL);
    }
    /* the next looks and finds it drained */
    answer(a, b, &to_b);
    at = next_entry_at(tp, L);
    box_roundtrip(a, b, peer, &got, src, L, 1);
    assert_int_equal(FBOX_KIND(box_word(rp, at)), FBOX_MSG);
    assert_false(rp->rx_fbox_bad);
    ivshm_ep_destroy(b);
    ivshm_ep_destroy(a);
}

struct order {
    uint32_t n, bad, next;
};
static void order_handler(void *arg, const ivshm_msg_t *m)
{
    struct order *o = arg;
    o->bad += m->tag != o->next;
    o->next = m->tag + 1;
    o->n++;
}

/* The pair's order across the box and the FIFO (a later box message waits
 * for an earlier FIFO piece); a reservation held in the box sends whole
 * messages as cells meanwhile (16 bits of the pair's sequence would alias
 * behind it); the first entry of a lap (after a SKIP) leaves the word
 * after it zeroed; a cell entry whose cell claims more than the entry is
 * dropped, nothing past the ring handed over. */
static void test_fbox_order_and_bounds(void **state)
{
    (void)state;
    ivshm_ep_config_t cfg = box_config();
    cfg.max_per_poll = 1024;
    static struct order ord;
    memset(&ord, 0, sizeof(ord));
    char src[256];
    memset(src, 'o', sizeof(src));
    ivshm_ep_t *a, *b;
    uint32_t peer = make_pair(&cfg, order_handler, &ord, &cfg, &a, &b);
    uint32_t tag = 0;
    for (int i = 0; i < 100 && !b->peers[peer]->tx_fbox; i++) {
        assert_int_equal(ivshm_ep_try_send(b, peer, tag++, "g", 1), IVSHM_OK);
        WAIT_UNTIL(a, ord.n >= tag);
    }
    assert_non_null(b->peers[peer]->tx_fbox);
    struct peer *tp = b->peers[peer];
    struct peer *rp = a->peers[ivshm_ep_index(b)];
    uint32_t ring = tp->tx_fbox_ring;

    /* A: the box full; B: the FIFO; a pass that reads the FIFO first
     * parks B and hands over A; C: the box again, read first next pass:
     * it waits for B */
    uint64_t head0 = atomic_load(&a->ctl->head);
    while (atomic_load(&a->ctl->head) == head0)
        assert_int_equal(ivshm_ep_try_send(b, peer, tag++, src, 200), IVSHM_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ivshm_ep_try_send(b, peer, tag++, src, 200), IVSHM_OK);
    uint32_t b_end = tag;
    a->polls = 1; /* the next pass reads the FIFO first */
    ivshm_ep_progress(a);
    assert_true(ord.n < b_end);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ivshm_ep_try_send(b, peer, tag++, src, 24), IVSHM_OK);
    assert_int_equal(atomic_load(&a->ctl->head), head0 + 4); /* C: the box */
    a->polls = 0; /* the next pass reads the box first */
    for (int i = 0; i < 10 && ord.n < tag; i++)
        ivshm_ep_progress(a);
    assert_int_equal(ord.n, tag);
    assert_int_equal(ord.bad, 0);

    /* a reservation held in the box: a message sent meanwhile goes to the
     * FIFO (it is published first, so it comes first in the pair's order,
     * and the box could not wait for it behind the held entry); after the
     * commit, the box takes message entries again */
    void *buf;
    ivshm_rsv_t rsv;
    assert_int_equal(ivshm_ep_reserve(b, peer, 20, &buf, &rsv), IVSHM_OK);
    assert_true(rsv.pos & FBOX_POS_FLAG);
    memcpy(buf, src, 20);
    head0 = atomic_load(&a->ctl->head);
    assert_int_equal(ivshm_ep_try_send2(b, peer, tag, src, 16, src, 8),
                     IVSHM_OK);
    assert_int_equal(atomic_load(&a->ctl->head), head0 + 1);
    assert_int_equal(ivshm_ep_commit(b, &rsv, tag + 1, 20), IVSHM_OK);
    tag += 2;
    uint32_t at = tp->tx_fbox_off;
    assert_int_equal(ivshm_ep_try_send2(b, peer, tag++, src, 16, src, 8),
                     IVSHM_OK);
    assert_int_equal(FBOX_KIND(box_word(rp, at)), FBOX_MSG);
    WAIT_UNTIL(a, ord.n >= tag);
    assert_int_equal(ord.bad, 0);

    /* the first entry after a SKIP: the word after it, an earlier lap's
     * bytes shaped as the entry due next, is zeroed */
    while (tp->tx_fbox_off < ring - 128) {
        assert_int_equal(ivshm_ep_try_send(b, peer, tag++, src, 56), IVSHM_OK);
        WAIT_UNTIL(a, ord.n >= tag);
    }
    tp->tx_fbox_tail = atomic_load(&tp->tx_fbox_hdr->tail);
    uint32_t size = fbox_entry_size(0, 200);
    uint64_t fake = FBOX_WORD(rp->rx_fbox_seq + 3, FBOX_MSG, 9, 4,
                              rp->pseq_in + 1);
    memcpy(rp->rx_fbox + size, &fake, 8);
    uint16_t seq0 = tp->tx_fbox_seq;
    assert_int_equal(ivshm_ep_try_send(b, peer, tag++, src, 200), IVSHM_OK);
    assert_int_equal((uint16_t)(tp->tx_fbox_seq - seq0), 2); /* skip, entry */
    assert_int_equal(tp->tx_fbox_off, size);
    for (int i = 0; i < 50; i++)
        ivshm_ep_progress(a);
    assert_int_equal(ord.n, tag);
    assert_int_equal(ord.bad, 0);

    /* a cell entry of 32 bytes at the ring's end whose short cell claims a
     * whole cell: dropped, the box no longer read */
    ivshm_ep_stats_t es;
    ivshm_ep_stats(a, &es);
    uint64_t bad0 = es.invalid_dropped;
    while (rp->rx_fbox_off != ring - 64) {
        uint32_t L = rp->rx_fbox_off % 64 ? 24 : 56;
        assert_int_equal(ivshm_ep_try_send(b, peer, tag++, src, L), IVSHM_OK);
        WAIT_UNTIL(a, ord.n >= tag);
    }
    char *e = rp->rx_fbox + ring - 64;
    struct cell forged;
    memset(&forged, 0, sizeof(forged));
    forged.len = 256 - CELL_SHORT_HDR;
    forged.tag = tag;
    forged.pseq = rp->pseq_in;
    forged.type = CELL_SHORT;
    forged.sender = (uint16_t)ivshm_ep_index(b);
    forged.epoch = CELL_EPOCH(rp->epoch);
    memcpy(e + 8, &forged, CELL_SHORT_HDR);
    fake = FBOX_WORD(rp->rx_fbox_seq + 1, FBOX_CELL, 0, CELL_SHORT_HDR, 0);
    memcpy(e, &fake, 8);
    uint32_t n0 = ord.n;
    for (int i = 0; i < 10; i++)
        ivshm_ep_progress(a);
    assert_int_equal(ord.n, n0);
    ivshm_ep_stats(a, &es);
    assert_int_equal(es.invalid_dropped, bad0 + 1);
    ivshm_ep_destroy(b);
    ivshm_ep_destroy(a);
}

/* ---- threads ---- */

struct waker {
    ivshm_ep_t *tx;
    uint32_t peer;
    long rounds;
    _Atomic long round;
    _Atomic int stop;
};

static void *waker_main(void *arg)
{
    struct waker *w = arg;
    long sent = 0;
    while (!atomic_load(&w->stop) && sent < w->rounds) {
        /* wait until the receiver has taken the previous message */
        if (atomic_load(&w->round) < sent)
            continue;
        for (int spin = (int)(sent % 64); spin > 0; spin--)
            ivshm__cpu_relax(); /* vary the race window */
        while (ivshm_ep_try_send(w->tx, w->peer, 0, "w", 1) == IVSHM_ERR_AGAIN)
            ;
        sent++;
    }
    return NULL;
}

static void count_handler(void *arg, const ivshm_msg_t *m)
{
    (void)m;
    (*(long *)arg)++;
}

/* Every message must wake a waiter that armed around it: a lost wake-up
 * shows as a wait that times out (1 s) while a message is there. */
static void test_wakeup_races(void **state)
{
    (void)state;
    const char *e = getenv("IVSHM_WAKE_ROUNDS");
    long rounds = e ? atol(e) : 100000;
    long got = 0;
    ivshm_ep_config_t cfg;
    ivshm_ep_config_init(&cfg);
    cfg.fbox_cells = 0; /* FIFO only: both paths are tested elsewhere */
    ivshm_ep_t *rx, *tx;
    uint32_t peer = make_pair(&cfg, count_handler, &got, &cfg, &rx, &tx);
    struct waker w = {.tx = tx, .rounds = rounds, .peer = peer};
    pthread_t th;
    pthread_create(&th, NULL, waker_main, &w);
    long timeouts = 0;
    while (got < rounds) {
        if (ivshm_ep_progress(rx) == 0 &&
            ivshm_ep_wait(rx, 1000) == IVSHM_ERR_AGAIN) {
            if (ivshm_ep_progress(rx) > 0)
                timeouts++; /* a message was there: a lost wake-up */
        }
        atomic_store(&w.round, got);
        if (timeouts)
            break;
    }
    atomic_store(&w.stop, 1);
    pthread_join(th, NULL);
    assert_int_equal(timeouts, 0);
    assert_int_equal(got, rounds);
    ivshm_ep_stats_t s;
    ivshm_ep_stats(tx, &s);
    assert_true(s.wakeups > 0); /* the waiter was armed and woken */
    ivshm_ep_destroy(rx);
    ivshm_ep_destroy(tx);
}

struct tsender {
    ivshm_ep_t *ep;
    uint32_t peer, me, count;
    int rc;
};

static void *tsender_main(void *arg)
{
    struct tsender *t = arg;
    unsigned char *buf = malloc(TR_MAX_SIZE);
    for (uint32_t seq = 0; seq < t->count && !t->rc; seq++) {
        size_t n = tr_size(t->me, seq);
        tr_fill(t->me, seq, buf, n);
        t->rc = ivshm_ep_send(t->ep, t->peer, seq, buf, n);
    }
    free(buf);
    return NULL;
}

static void trx_handler(void *arg, const ivshm_msg_t *m)
{
    tr_rx_piece(arg, m->sender, m);
}

static void test_threads_many_to_one(void **state)
{
    (void)state;
    enum { NS = 3 };
    const char *e = getenv("IVSHM_STRESS_MSGS");
    uint32_t count = e ? (uint32_t)atol(e) : 2000;
    struct tr_rx rx;
    tr_rx_init(&rx);
    ivshm_ep_t *r;
    assert_int_equal(ivshm_ep_create(dom, 0, NULL, trx_handler, &rx, &r),
                     IVSHM_OK);
    uint8_t addr[IVSHM_EP_ADDR_SIZE];
    ivshm_ep_address(r, addr);
    struct tsender ts[NS];
    pthread_t th[NS];
    for (int i = 0; i < NS; i++) {
        ts[i] = (struct tsender){.me = (uint32_t)i + 1, .count = count};
        assert_int_equal(ivshm_ep_create(dom, i + 1, NULL, NULL, NULL, &ts[i].ep),
                         IVSHM_OK);
        assert_int_equal(ivshm_ep_connect(ts[i].ep, addr, sizeof(addr),
                                          &ts[i].peer),
                         IVSHM_OK);
        pthread_create(&th[i], NULL, tsender_main, &ts[i]);
    }
    double t0 = tu_now_s();
    while (rx.complete < (uint64_t)NS * count && !rx.errors &&
           tu_now_s() - t0 < 120)
        if (ivshm_ep_progress(r) == 0)
            ivshm_ep_wait(r, 10);
    /* a failure ends the test before the joins: its senders may wait for
     * room that nobody makes any more */
    if (rx.errors)
        fail_msg("%s", rx.first_error);
    assert_int_equal(rx.complete, (uint64_t)NS * count);
    for (int i = 0; i < NS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(ts[i].rc, IVSHM_OK);
        ivshm_ep_destroy(ts[i].ep);
    }
    tr_rx_free(&rx);
    ivshm_ep_destroy(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_arithmetic),
        cmocka_unit_test_setup_teardown(test_domain_valid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_queue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_after_budget, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fbox_ahead_of_lost_piece, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_payload_before_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_and_region, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserve_frag, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cell_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_whole_handler, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nested_progress, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fbox_usual_takes_only_next, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_prefetchw_gate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_send2_no_effect, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fbox_msg_too_long, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fbox_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fbox_long_messages, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fbox_msg_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fbox_long_answers_only, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_own_ahead_bounds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fbox_order_and_bounds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_wakeup_races, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads_many_to_one, setup, teardown),
    };
    return cmocka_run_group_tests_name("channel", tests, NULL, NULL);
}
