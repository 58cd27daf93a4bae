/*
 * Channel faults, one test per confirmed defect, through real
 * processes sharing one /dev/shm region (a "VM" is a process with its own
 * IVSHM_VM_ID where it matters). Each test failed on the channel before
 * the fix; what it asserts is named in its comment.
 * Raw access to the shared layout (chan_layout.h) forges what a crashed,
 * paused or hostile peer leaves behind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "chan_layout.h"
#include "internal.h"
#include "../chan_traffic.h"
#include "../testutil.h"
#include "../../mpi-plugin/btl/btl_ivshmem_handle.h"

#include <ivshm/channel.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

static char path[256];

static int setup_lease(uint32_t lease_ms)
{
    tu_region_path(path, sizeof(path), "faults");
    return tu_format(path, 64 << 20, 64, lease_ms) == IVSHM_OK ? 0 : -1;
}
static int setup_short(void **state)
{
    (void)state;
    return setup_lease(300);
}
static int setup_long(void **state)
{
    (void)state;
    return setup_lease(5000);
}
static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

/* ---- a process' view: its own mapping, lease, domain ---- */

struct view {
    ivshm_region_t *r;
    ivshm_domain_t *d;
};

static void view_open(struct view *v, const char *job)
{
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &v->r), IVSHM_OK);
    assert_int_equal(ivshm_attach(v->r), IVSHM_OK);
    assert_int_equal(ivshm_domain_join(v->r, job, 16, &v->d), IVSHM_OK);
}

static void view_close(struct view *v)
{
    ivshm_domain_leave(v->d);
    ivshm_region_close(v->r);
}

/* A receiver that checks every message: payload = f(sender tag, tag). */
struct sink {
    uint32_t got, bad, dead, lease_lost;
    uint32_t min_tag;
};

static size_t msg_len(uint32_t tag, size_t big) { return big ? big : 1 + tag % 96; }

static void fill(unsigned char *b, size_t n, uint32_t tag)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(tag * 31 + i * 7);
}

static void on_msg(void *arg, const ivshm_msg_t *m)
{
    struct sink *s = arg;
    unsigned char want[8192];
    size_t n = m->len < sizeof(want) ? m->len : sizeof(want);
    fill(want, n, m->tag);
    if (m->tag < s->min_tag || memcmp(want, m->data, n) != 0)
        s->bad++;
    s->got++;
}

static void on_event(void *arg, int kind, uint32_t peer)
{
    struct sink *s = arg;
    (void)peer;
    if (kind == IVSHM_EV_PEER_DEAD)
        s->dead++;
    if (kind == IVSHM_EV_LEASE_LOST)
        s->lease_lost++;
}

static ivshm_ep_t *make_ep(struct view *v, int idx, const ivshm_ep_config_t *c,
                           struct sink *s)
{
    ivshm_ep_t *ep;
    memset(s, 0, sizeof(*s));
    assert_int_equal(ivshm_ep_create(v->d, idx, c, on_msg, s, &ep), IVSHM_OK);
    ivshm_ep_set_event_handler(ep, on_event, s);
    return ep;
}

static uint32_t connect_ep(ivshm_ep_t *from, ivshm_ep_t *to)
{
    uint8_t a[IVSHM_EP_ADDR_SIZE];
    uint32_t peer;
    ivshm_ep_address(to, a);
    assert_int_equal(ivshm_ep_connect(from, a, sizeof(a), &peer), IVSHM_OK);
    return peer;
}

/* Forks a peer that joins `job` as endpoint 1 and then only holds it
 * (never reads, never leaves) until it is killed. With buf_chunks it
 * first allocates that many chunks, filled with 0xaa, and their offset
 * comes back in *off; with work, it runs work(view, endpoint) first (0:
 * done). Returns once the peer is ready. */
typedef int (*peer_work_t)(struct view *v, ivshm_ep_t *ep);
static pid_t fork_idle_peer(const char *job, uint32_t buf_chunks,
                            uint64_t *off, peer_work_t work)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        struct view v;
        view_open(&v, job);
        struct sink s;
        ivshm_ep_t *ep = make_ep(&v, 1, NULL, &s);
        if (work && work(&v, ep) != 0)
            _exit(9);
        uint64_t o = 0;
        if (buf_chunks) {
            ivshm_region_info_t ri;
            ivshm_region_info(v.r, &ri);
            uint64_t len = (uint64_t)buf_chunks * ri.chunk_size;
            if (ivshm_alloc(v.r, len, &o) != IVSHM_OK)
                _exit(9);
            memset((char *)ivshm_region_base(v.r) + o, 0xaa, len);
        }
        if (write(ready[1], &o, sizeof(o)) != sizeof(o))
            _exit(9);
        for (;;)
            pause();
    }
    close(ready[1]); /* a peer that fails before it is ready: EOF */
    uint64_t o;
    assert_int_equal(read(ready[0], &o, sizeof(o)), sizeof(o));
    close(ready[0]);
    if (off)
        *off = o;
    return pid;
}

/* One message from `from` (try_send), progressing `rx` while there is no
 * room; false after `seconds`. */
static bool pump_one(ivshm_ep_t *from, uint32_t peer, ivshm_ep_t *rx,
                     uint32_t tag, size_t big, double seconds)
{
    unsigned char buf[8192];
    size_t n = msg_len(tag, big);
    fill(buf, n, tag);
    double end = tu_now_s() + seconds;
    for (;;) {
        ivshm_status_t st = ivshm_ep_try_send(from, peer, tag, buf, n);
        if (st == IVSHM_OK)
            return true;
        if (st != IVSHM_ERR_AGAIN || tu_now_s() > end)
            return false;
        if (rx)
            ivshm_ep_progress(rx);
        ivshm_ep_progress(from);
    }
}

static void drain(ivshm_ep_t *rx, struct sink *s, uint32_t want, double sec)
{
    double end = tu_now_s() + sec;
    while (s->got < want && tu_now_s() < end)
        if (ivshm_ep_progress(rx) == 0)
            ivshm_ep_wait(rx, 1);
}

/* Region offset of an endpoint's control block (its address says it). */
static uint64_t ctl_off_of(ivshm_ep_t *ep)
{
    uint8_t a[IVSHM_EP_ADDR_SIZE];
    uint64_t off;
    ivshm_ep_address(ep, a);
    memcpy(&off, a + 40, 8);
    return off;
}

static struct ep_ctl *raw_ctl(unsigned char *base, ivshm_ep_t *ep)
{
    return (struct ep_ctl *)(base + ctl_off_of(ep));
}

static struct cell *raw_cell(unsigned char *base, ivshm_ep_t *ep, uint64_t pos)
{
    struct ep_ctl *c = raw_ctl(base, ep);
    return (struct cell *)((char *)c + c->g.cells_off +
                           (pos & (c->g.fifo_cells - 1)) * c->g.cell_size);
}

static ivshm_ep_config_t fifo_cfg(uint32_t cells)
{
    ivshm_ep_config_t c;
    ivshm_ep_config_init(&c);
    c.fifo_cells = cells;
    c.fbox_threshold = 1u << 30; /* stays on the FIFO */
    return c;
}

/* ---- 1: a process that lost its lease stops touching the region ---- */

/* A (VM a) is paused past the lease timeout; B (VM b) declares it dead
 * (the admin's forced gc) and fills every free chunk (A's old ones among
 * them, once they cooled). Resumed, A's allocation,
 * send and progress fail with LEASE_LOST (and one event), and B's memory
 * is unchanged. Before: alloc and send succeeded into B's memory. */
static void test_pause_past_lease(void **state)
{
    (void)state;
    int go[2], ready[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(ready), 0);
    pid_t a = fork();
    if (a == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setenv("IVSHM_VM_ID", "vm-a", 1);
        struct view v;
        view_open(&v, "pause");
        ivshm_lease_start_thread(v.r);
        struct sink s, s2;
        ivshm_ep_config_t c = fifo_cfg(64);
        ivshm_ep_t *ep = make_ep(&v, 1, &c, &s);
        ivshm_ep_t *ep2 = make_ep(&v, 2, &c, &s2); /* a peer in this VM */
        uint32_t peer = connect_ep(ep, ep2);
        if (!pump_one(ep, peer, ep2, 0, 0, 5))
            _exit(10);
        char x = 'r';
        if (write(ready[1], &x, 1) != 1)
            _exit(9);
        if (read(go[0], &x, 1) != 1) /* stopped here, then resumed */
            _exit(9);
        uint64_t off;
        if (ivshm_alloc(v.r, 4096, &off) != IVSHM_ERR_LEASE_LOST)
            _exit(11);
        if (!strstr(ivshm_last_error(), "lease"))
            _exit(12);
        unsigned char buf[64] = {0};
        if (ivshm_ep_try_send(ep, peer, 1, buf, sizeof(buf)) !=
            IVSHM_ERR_LEASE_LOST)
            _exit(13);
        ivshm_ep_progress(ep);
        ivshm_ep_progress(ep);
        if (s.lease_lost != 1)
            _exit(14);
        ivshm_ep_destroy(ep2);
        ivshm_ep_destroy(ep);
        _exit(0);
    }
    char x;
    assert_int_equal(read(ready[0], &x, 1), 1);
    kill(a, SIGSTOP);
    setenv("IVSHM_VM_ID", "vm-b", 1);
    ivshm_region_t *r;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r), IVSHM_OK);
    assert_int_equal(ivshm_attach(r), IVSHM_OK);
    usleep(700 * 1000); /* > 2 x the 300 ms lease */
    ivshm_gc_stats_t gs;
    /* in doubt, not dead (docs/lifetimes.md): the admin declares it dead */
    assert_int_equal(ivshm_gc_force(r, NULL, NULL, &gs), IVSHM_OK);
    assert_true(gs.procs_reclaimed >= 1);
    usleep(400 * 1000); /* its chunks cool for one lease timeout */
    /* the new owner takes every free chunk and writes them */
    ivshm_region_info_t ri;
    ivshm_region_info(r, &ri);
    unsigned char *base = ivshm_region_base(r);
    uint64_t offs[4096];
    unsigned n = 0;
    while (n < 4096 && ivshm_alloc(r, ri.chunk_size, &offs[n]) == IVSHM_OK)
        memset(base + offs[n++], 0x55, ri.chunk_size);
    assert_true(n > 0);
    kill(a, SIGCONT);
    assert_int_equal(write(go[1], "g", 1), 1);
    int ws;
    assert_int_equal(waitpid(a, &ws, 0), a);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail_msg("paused process ended with 0x%x", ws);
    for (unsigned i = 0; i < n; i++)
        for (uint32_t k = 0; k < ri.chunk_size; k++)
            if (base[offs[i] + k] != 0x55)
                fail_msg("the new owner's chunk %u was written at +%u", i, k);
    ivshm_region_close(r);
    unsetenv("IVSHM_VM_ID");
}

/* ---- 2: each side's geometry is the receiver's, for every mix ---- */

struct rx_thread {
    ivshm_ep_t *ep;
    struct sink *s;
    uint32_t want;
    double end;
};

static void *rx_main(void *arg)
{
    struct rx_thread *t = arg;
    drain(t->ep, t->s, t->want, t->end - tu_now_s());
    return NULL;
}

static ivshm_ep_config_t geom(uint32_t cell, uint32_t fbox, uint32_t fifo,
                              uint32_t fcount, uint32_t fsize)
{
    ivshm_ep_config_t c;
    ivshm_ep_config_init(&c);
    c.cell_size = cell;
    c.fbox_cells = fbox;
    c.fbox_threshold = 4;
    c.fifo_cells = fifo;
    c.frag_count = fcount;
    c.frag_size = fsize;
    return c;
}

/* Receiver, sender and a third default sender with different cell size,
 * fast-box size, FIFO length and fragment geometry: every message of both
 * senders arrives intact, nothing is dropped. Before: a larger sender
 * fast box wrote into the neighbour's box, inline lengths were checked
 * against the sender's cells, the future window was the sender's. */
static void test_mixed_geometry(void **state)
{
    (void)state;
    const ivshm_ep_config_t cfgs[] = {
        geom(128, 8, 8, 2, 4096),     geom(256, 64, 256, 16, 65536),
        geom(1024, 32, 64, 4, 16384), geom(128, 0, 512, 8, 8192),
        geom(512, 16, 16, 64, 4096),
    };
    const unsigned nc = sizeof(cfgs) / sizeof(cfgs[0]);
    struct view v;
    view_open(&v, "mixed");
    enum { N = 300 };
    for (unsigned i = 0; i < nc; i++)
        for (unsigned j = 0; j < nc; j++) {
            struct sink rs, ss, ts;
            ivshm_ep_t *rx = make_ep(&v, 0, &cfgs[i], &rs);
            ivshm_ep_t *tx = make_ep(&v, 1, &cfgs[j], &ss);
            ivshm_ep_t *third = make_ep(&v, 2, NULL, &ts);
            uint32_t p1 = connect_ep(tx, rx), p3 = connect_ep(third, rx);
            struct rx_thread t = {rx, &rs, 2 * N, tu_now_s() + 20};
            pthread_t th;
            pthread_create(&th, NULL, rx_main, &t);
            bool sent = true;
            for (uint32_t k = 0; k < N && sent; k++) {
                size_t n = k % 7 == 0 ? 3000 : msg_len(k, 0) + (k % 3) * 150;
                sent = pump_one(tx, p1, NULL, k, n, 10) &&
                       pump_one(third, p3, NULL, k, 0, 10);
            }
            pthread_join(th, NULL);
            ivshm_ep_stats_t st;
            ivshm_ep_stats(rx, &st);
            if (!sent || rs.got != 2 * N || rs.bad || st.invalid_dropped)
                fail_msg("rx cfg %u, tx cfg %u: %u of %u delivered, %u bad, "
                         "%llu dropped",
                         i, j, rs.got, 2 * N, rs.bad,
                         (unsigned long long)st.invalid_dropped);
            assert_int_equal(ivshm_domain_valid(v.d, NULL, NULL), IVSHM_OK);
            ivshm_ep_destroy(third);
            ivshm_ep_destroy(tx);
            ivshm_ep_destroy(rx);
        }
    view_close(&v);
}

/* ---- 3: one lost piece never jams a queue ---- */

/* A sender's published cell is damaged before the receiver reads it (its
 * piece is lost); the sender's later pieces still arrive, within a bounded
 * wait, and the loss is counted. Before: they were parked forever and the
 * FIFO stopped. */
static void test_lost_piece_resyncs(void **state)
{
    (void)state;
    struct view v;
    view_open(&v, "gap");
    size_t len;
    unsigned char *base = tu_map_raw(path, &len);
    assert_non_null(base);
    struct sink rs, ss;
    ivshm_ep_config_t c = fifo_cfg(64);
    ivshm_ep_t *rx = make_ep(&v, 0, &c, &rs);
    ivshm_ep_t *tx = make_ep(&v, 1, &c, &ss);
    uint32_t peer = connect_ep(tx, rx);
    assert_true(pump_one(tx, peer, rx, 0, 0, 5));
    /* the first cell's sender becomes a stranger: dropped unread */
    raw_cell(base, rx, 0)->sender = 0x7777;
    rs.min_tag = 1;
    for (uint32_t k = 1; k <= 300; k++)
        assert_true(pump_one(tx, peer, rx, k, 0, 5));
    drain(rx, &rs, 300, 5);
    ivshm_ep_stats_t st;
    ivshm_ep_stats(rx, &st);
    assert_int_equal(rs.got, 300);
    assert_int_equal(rs.bad, 0);
    /* the damaged cell, and the one piece counted lost: nothing else */
    assert_true(st.invalid_dropped >= 1 && st.invalid_dropped <= 2);
    ivshm_ep_destroy(tx);
    ivshm_ep_destroy(rx);
    munmap(base, len);
    view_close(&v);
}

/* ---- 4: fragments lent to a receiver that dies come back ---- */

/* A lends all its fragments to B (which never reads), B is killed: A's
 * 1000-byte sends (fragments) to a live C go through again, 1000 of them,
 * each fragment reused many times. The bound (60 s) only stops a hang: on
 * a loaded machine the collection of B can take a while. Before: none
 * did, ever. */
static void test_frags_back_from_dead(void **state)
{
    (void)state;
    pid_t b = fork_idle_peer("frags", 0, NULL, NULL);
    struct view v;
    view_open(&v, "frags");
    struct sink as, cs;
    ivshm_ep_config_t cfg;
    ivshm_ep_config_init(&cfg);
    cfg.cell_size = 128; /* 1000 bytes need a fragment */
    cfg.frag_count = 8;
    ivshm_ep_t *a = make_ep(&v, 0, &cfg, &as);
    ivshm_ep_t *cep = make_ep(&v, 2, NULL, &cs);
    uint32_t pb;
    assert_int_equal(tr_connect(v.d, a, 1, &pb), 0);
    uint32_t pc = connect_ep(a, cep);
    /* 512 KiB towards B: every fragment ends up lent to it */
    static unsigned char big[32768];
    unsigned sent = 0;
    while (sent < 16 && ivshm_ep_try_send(a, pb, sent, big, sizeof(big)) ==
                            IVSHM_OK)
        sent++;
    assert_int_equal(sent, cfg.frag_count);
    unsigned char small[1000];
    fill(small, sizeof(small), 0);
    assert_int_equal(ivshm_ep_try_send(a, pc, 0, small, sizeof(small)),
                     IVSHM_ERR_AGAIN);
    kill(b, SIGKILL);
    int ws;
    waitpid(b, &ws, 0);
    double end = tu_now_s() + 60;
    unsigned ok = 0;
    while (tu_now_s() < end && ok < 1000) {
        ivshm_status_t st = ivshm_ep_try_send(a, pc, 0, small, sizeof(small));
        ok += st == IVSHM_OK;
        ivshm_ep_progress(cep);
        ivshm_ep_progress(a);
    }
    if (ok < 1000)
        fail_msg("%u of 1000 sends to a live peer went through in 60 s", ok);
    assert_int_equal(cs.bad, 0);
    ivshm_ep_destroy(cep);
    ivshm_ep_destroy(a);
    view_close(&v);
}

/* The receiver's process is killed and its lease collected; its
 * directory entry still reads as it did (the collect does not tidy a dead
 * process' entry; only a new endpoint at its index would replace it), so
 * only its registry word says that life ended. The next send,
 * with no progress between, fails instead of writing the dead process'
 * memory, which goes to a new owner one lease timeout later. */
/* A receiver in a forked process (fork_idle_peer, index 1) and our
 * sender a, connected, one message sent: a's checks have seen the
 * receiver's life (the tests then end it). */
struct forked_pair {
    pid_t b;
    struct view v;
    struct sink as;
    ivshm_ep_t *a;
    uint32_t pb;
    unsigned char m[16];
};

static void forked_pair_open(struct forked_pair *fp, const char *job)
{
    fp->b = fork_idle_peer(job, 0, NULL, NULL);
    view_open(&fp->v, job);
    fp->a = make_ep(&fp->v, 0, NULL, &fp->as);
    assert_int_equal(tr_connect(fp->v.d, fp->a, 1, &fp->pb), 0);
    fill(fp->m, sizeof(fp->m), 0);
    assert_int_equal(ivshm_ep_try_send(fp->a, fp->pb, 0, fp->m,
                                       sizeof(fp->m)),
                     IVSHM_OK);
}

/* a's message of this tag to the receiver */
static ivshm_status_t forked_pair_send(struct forked_pair *fp, uint32_t tag)
{
    return ivshm_ep_try_send(fp->a, fp->pb, tag, fp->m, sizeof(fp->m));
}

static void forked_pair_kill(struct forked_pair *fp)
{
    kill(fp->b, SIGKILL);
    waitpid(fp->b, NULL, 0);
}

static void forked_pair_close(struct forked_pair *fp)
{
    ivshm_ep_destroy(fp->a);
    view_close(&fp->v);
}

static void test_send_after_owner_collected(void **state)
{
    (void)state;
    struct forked_pair fp;
    forked_pair_open(&fp, "collected");
    forked_pair_kill(&fp);
    assert_int_equal(forked_pair_send(&fp, 1), IVSHM_OK);
    assert_int_equal(ivshm_gc(fp.v.r, NULL), IVSHM_OK);
    assert_int_equal(forked_pair_send(&fp, 2), IVSHM_ERR_PEER_DEAD);
    forked_pair_close(&fp);
}

/* The receiver destroys its endpoint and nothing takes the index: its
 * entry reads free, its epoch and its owner's lease are unchanged, so the
 * entry's word alone says that life ended. The next send fails instead
 * of writing the freed block. */
static void test_send_after_receiver_destroyed(void **state)
{
    (void)state;
    struct view v;
    view_open(&v, "destroyed");
    struct sink rs, ss;
    ivshm_ep_t *rx = make_ep(&v, 0, NULL, &rs);
    ivshm_ep_t *tx = make_ep(&v, 1, NULL, &ss);
    uint32_t peer = connect_ep(tx, rx);
    unsigned char m[16];
    fill(m, sizeof(m), 0);
    assert_int_equal(ivshm_ep_try_send(tx, peer, 0, m, sizeof(m)), IVSHM_OK);
    ivshm_ep_destroy(rx);
    assert_int_equal(ivshm_ep_try_send(tx, peer, 1, m, sizeof(m)),
                     IVSHM_ERR_PEER_DEAD);
    /* a count of ended lives garbled to the value a dead record holds
     * (LIVES_UNSEEN) does not let a send past its record's checks */
    size_t len;
    unsigned char *base = tu_map_raw(path, &len);
    atomic_store(&((struct ivshm_hdr *)base)->lives_ended, UINT64_MAX);
    assert_int_equal(ivshm_ep_try_send(tx, peer, 2, m, sizeof(m)),
                     IVSHM_ERR_PEER_DEAD);
    munmap(base, len);
    ivshm_ep_destroy(tx);
    view_close(&v);
}

/* A receiver and a sender in two leases of this process (two views of
 * the job), connected, one message sent: the sender's checks have seen
 * the receiver's life (the tests below then end a life). */
struct sent_pair {
    struct view vr, vs;
    struct sink rs, ss;
    ivshm_ep_t *rx, *tx;
    uint32_t peer;
    unsigned char m[16];
};

static void sent_pair_open(struct sent_pair *sp, const char *job)
{
    view_open(&sp->vr, job);
    view_open(&sp->vs, job);
    sp->rx = make_ep(&sp->vr, 0, NULL, &sp->rs);
    sp->tx = make_ep(&sp->vs, 1, NULL, &sp->ss);
    sp->peer = connect_ep(sp->tx, sp->rx);
    fill(sp->m, sizeof(sp->m), 0);
    assert_int_equal(ivshm_ep_try_send(sp->tx, sp->peer, 0, sp->m,
                                       sizeof(sp->m)),
                     IVSHM_OK);
}

/* The sender's next message, after the test ended a life. */
static ivshm_status_t sent_pair_again(struct sent_pair *sp)
{
    return ivshm_ep_try_send(sp->tx, sp->peer, 1, sp->m, sizeof(sp->m));
}

static void sent_pair_close(struct sent_pair *sp)
{
    ivshm_ep_destroy(sp->tx);
    ivshm_ep_destroy(sp->rx);
    view_close(&sp->vs);
    view_close(&sp->vr);
}

/* An admin formats the region again (--force) under a running sender:
 * every lease ends there, its own included, and the format counts it,
 * so the next send fails instead of writing into the new layout. */
static void test_send_after_forced_format(void **state)
{
    (void)state;
    struct sent_pair sp;
    sent_pair_open(&sp, "reformat");
    ivshm_format_opts_t o;
    ivshm_format_opts_init(&o);
    o.size = 64 << 20;
    o.reg_slots = 64;
    o.force = 1;
    assert_int_equal(ivshm_format(tu_uri(path), &o), IVSHM_OK);
    assert_int_equal(sent_pair_again(&sp), IVSHM_ERR_LEASE_LOST);
    sent_pair_close(&sp);
}

/* The registry slot of the process with this pid (a live lease). */
static struct ivshm_reg_slot *slot_of(unsigned char *base, ivshm_region_t *r,
                                      pid_t pid)
{
    const struct ivshm_hdr *h = (const struct ivshm_hdr *)base;
    ivshm_proc_info_t pi;
    for (uint32_t i = 0; ivshm_region_proc(r, i, &pi) == IVSHM_OK; i++)
        if (pi.state == 2 && pi.pid == (uint32_t)pid)
            return (struct ivshm_reg_slot *)(base + h->reg_off) + i;
    fail_msg("no live slot of pid %d", (int)pid);
    return NULL;
}

/* A collector took the receiver's slot (alive -> reclaiming) and died
 * before it counted the end. Two lease timeouts later another collect
 * finishes the release: it counts the end itself, so the sender, whose
 * last send checked that life, fails its next one instead of writing
 * memory that goes to a new owner. */
static void test_send_after_reclaimer_died(void **state)
{
    (void)state;
    struct forked_pair fp;
    forked_pair_open(&fp, "reclaimer");
    size_t len;
    unsigned char *base = tu_map_raw(path, &len);
    struct ivshm_reg_slot *s = slot_of(base, fp.v.r, fp.b);
    forked_pair_kill(&fp);
    uint64_t w = atomic_load(&s->word);
    atomic_store(&s->word, SLOT_WORD(SLOT_GEN(w), SLOT_RECLAIMING));
    atomic_store(&s->heartbeat_ns, ivshm__now_ns() - 3000000000ull);
    assert_int_equal(ivshm_gc(fp.v.r, NULL), IVSHM_OK);
    assert_int_equal(SLOT_STATE(atomic_load(&s->word)), SLOT_FREE);
    assert_int_equal(forked_pair_send(&fp, 1), IVSHM_ERR_PEER_DEAD);
    munmap(base, len);
    forked_pair_close(&fp);
}

/* Our own slot reads "reclaiming" until our lease renewal gives up, one
 * lease timeout (5 s here) after its heartbeat by the clock
 * (IVSHM_ERR_LEASE_LOST, sticky); then the reclaimer backs off and the
 * slot reads alive again. Nothing else ended: the loss itself is counted,
 * so the next send fails instead of going on under a lost lease. */
static void test_send_after_lease_given_up(void **state)
{
    (void)state;
    struct sent_pair sp;
    sent_pair_open(&sp, "givenup");
    size_t len;
    unsigned char *base = tu_map_raw(path, &len);
    ivshm_identity_t id;
    ivshm_self_identity(sp.vs.r, &id);
    struct ivshm_reg_slot *s =
        (struct ivshm_reg_slot *)(base +
                                  ((struct ivshm_hdr *)base)->reg_off) +
        id.slot;
    uint64_t alive = atomic_load(&s->word);
    atomic_store(&s->word, SLOT_WORD(SLOT_GEN(alive), SLOT_RECLAIMING));
    double start = tu_now_s();
    while (ivshm_lease_renew(sp.vs.r) != IVSHM_ERR_LEASE_LOST)
        assert_true(tu_now_s() < start + 60);
    /* it waited for the reclaimer to back off: the 5 s lease timeout */
    double waited = tu_now_s() - start;
    assert_true(waited > 4.9);
    assert_true(waited < 30);
    atomic_store(&s->word, alive); /* the reclaimer backs off */
    assert_int_equal(sent_pair_again(&sp), IVSHM_ERR_LEASE_LOST);
    munmap(base, len);
    sent_pair_close(&sp);
}

/* The receiver's process leaves the region (its own detach) with its
 * endpoint still open: its lease ends and its memory is freed at once.
 * The sender, whose last send checked that life, fails its next send with
 * no progress between, instead of writing freed memory. */
static void test_send_after_receiver_detached(void **state)
{
    (void)state;
    struct sent_pair sp;
    sent_pair_open(&sp, "detached");
    assert_int_equal(ivshm_detach(sp.vr.r), IVSHM_OK);
    assert_int_equal(sent_pair_again(&sp), IVSHM_ERR_PEER_DEAD);
    sent_pair_close(&sp);
}

/* ---- 5: an endpoint's life is (index, lease, epoch) ---- */

/* The receiver re-creates its endpoint (same process, same index): the old
 * sender's next send fails instead of writing the freed block. A new
 * endpoint at a sender's freed index is heard (not taken for replays) and
 * never picks up the grant made for its predecessor. Before: sends were
 * "accepted" into freed memory; the new sender got 0 of 100 through. */
static void test_endpoint_lives(void **state)
{
    (void)state;
    struct view v;
    view_open(&v, "lives");
    ivshm_ep_config_t c;
    ivshm_ep_config_init(&c);
    c.fbox_threshold = 4;
    struct sink rs, ss, s2;
    ivshm_ep_t *rx = make_ep(&v, 0, &c, &rs);
    ivshm_ep_t *tx = make_ep(&v, 1, &c, &ss);
    uint32_t peer = connect_ep(tx, rx);
    for (uint32_t k = 0; k < 20; k++)
        assert_true(pump_one(tx, peer, rx, k, 0, 5));
    drain(rx, &rs, 20, 5);
    assert_int_equal(rs.got, 20);
    /* the sender leaves, a new one takes its index; the receiver lives on
     * (it granted the old one a fast box) */
    ivshm_ep_destroy(tx);
    ivshm_ep_t *tx2 = make_ep(&v, 1, &c, &s2);
    uint32_t peer2 = connect_ep(tx2, rx);
    memset(&rs, 0, sizeof(rs));
    for (uint32_t k = 0; k < 100; k++)
        assert_true(pump_one(tx2, peer2, rx, k, 0, 5));
    drain(rx, &rs, 100, 5);
    ivshm_ep_stats_t st;
    ivshm_ep_stats(rx, &st);
    if (rs.got != 100 || rs.bad || st.invalid_dropped)
        fail_msg("new sender: %u of 100 delivered, %u bad, %llu dropped",
                 rs.got, rs.bad, (unsigned long long)st.invalid_dropped);
    /* the receiver re-creates itself at the same index */
    ivshm_ep_destroy(rx);
    struct sink rs2;
    ivshm_ep_t *rx2 = make_ep(&v, 0, &c, &rs2);
    unsigned char m[16] = {0};
    assert_int_equal(ivshm_ep_try_send(tx2, peer2, 0, m, sizeof(m)),
                     IVSHM_ERR_PEER_DEAD);
    assert_int_equal(ivshm_domain_valid(v.d, NULL, NULL), IVSHM_OK);
    /* the sender meets the new life, which then ends too, and a third
     * one takes the index; the sender meets it by a connect first (as
     * UCX's reachability check does), with no send or progress between:
     * the second life's record, not known dead yet, ends with its event
     * instead of being replaced silently (what was bound to it would
     * have sent to the third life) */
    assert_int_equal(connect_ep(tx2, rx2), peer2);
    assert_true(pump_one(tx2, peer2, rx2, 1, 0, 5));
    drain(rx2, &rs2, 1, 5);
    assert_int_equal(rs2.got, 1);
    uint32_t dead0 = s2.dead;
    ivshm_ep_destroy(rx2);
    struct sink rs3;
    ivshm_ep_t *rx3 = make_ep(&v, 0, &c, &rs3);
    assert_int_equal(connect_ep(tx2, rx3), peer2);
    assert_int_equal(s2.dead, dead0 + 1);
    for (uint32_t k = 0; k < 10; k++)
        assert_true(pump_one(tx2, peer2, rx3, k, 0, 5));
    drain(rx3, &rs3, 10, 5);
    assert_int_equal(rs3.got, 10);
    assert_int_equal(rs3.bad, 0);
    assert_int_equal(s2.dead, dead0 + 1);
    ivshm_ep_destroy(rx3);
    ivshm_ep_destroy(tx2);
    view_close(&v);
}

/* ---- 6: a claim left by an earlier lap is not this lap's ---- */

/* A claimer takes a FIFO position and dies before naming itself; the
 * cell still holds the previous lap's claim of a live sender. The receiver
 * gives the position up after one lease timeout and the live sender's
 * messages flow. Before: the FIFO stayed full for good. */
static void test_stale_claim(void **state)
{
    (void)state;
    struct view v;
    view_open(&v, "claim");
    size_t len;
    unsigned char *base = tu_map_raw(path, &len);
    struct sink rs, ss;
    ivshm_ep_config_t c = fifo_cfg(8);
    ivshm_ep_t *rx = make_ep(&v, 0, &c, &rs);
    ivshm_ep_t *tx = make_ep(&v, 1, &c, &ss);
    uint32_t peer = connect_ep(tx, rx);
    for (uint32_t k = 0; k < 8; k++)
        assert_true(pump_one(tx, peer, rx, k, 0, 5));
    drain(rx, &rs, 8, 5);
    /* the dead claimer: a head CAS, nothing else */
    atomic_fetch_add(&raw_ctl(base, rx)->head, 1);
    memset(&rs, 0, sizeof(rs));
    for (uint32_t k = 8; k < 28; k++)
        if (!pump_one(tx, peer, rx, k, 0, 5))
            fail_msg("send %u found no room for 5 s", k);
    drain(rx, &rs, 20, 5);
    assert_int_equal(rs.got, 20);
    assert_int_equal(rs.bad, 0);
    ivshm_ep_destroy(tx);
    ivshm_ep_destroy(rx);
    munmap(base, len);
    view_close(&v);
}

/* ---- 7: a blocked receiver wakes although no sender can ring ---- */

/* The receiver blocks in ivshm_ep_wait(-1); its FIFO then fills with claims
 * of a claimer that died. A sender waits for room. The receiver must give
 * the claims up and take the message (alarm: 20 s). Before: it slept
 * forever. */
static void test_wait_is_bounded(void **state)
{
    (void)state;
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t rxp = fork();
    if (rxp == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(20);
        struct view v;
        view_open(&v, "wait");
        struct sink s;
        ivshm_ep_config_t c = fifo_cfg(8);
        ivshm_ep_t *ep = make_ep(&v, 0, &c, &s);
        if (write(ready[1], "r", 1) != 1)
            _exit(9);
        while (s.got == 0)
            if (ivshm_ep_wait(ep, -1) != IVSHM_OK)
                _exit(10);
        _exit(s.bad ? 11 : 0);
    }
    char x;
    assert_int_equal(read(ready[0], &x, 1), 1);
    usleep(50 * 1000); /* the receiver is asleep in its wait */
    struct view v;
    view_open(&v, "wait");
    size_t len;
    unsigned char *base = tu_map_raw(path, &len);
    uint8_t addr[IVSHM_EP_ADDR_SIZE];
    assert_int_equal(ivshm_domain_address(v.d, 0, addr), IVSHM_OK);
    uint64_t ctl_off;
    memcpy(&ctl_off, addr + 40, 8);
    struct ep_ctl *rc = (struct ep_ctl *)(base + ctl_off);
    atomic_fetch_add(&rc->head, 8); /* a full lap of dead claims */
    struct sink ss;
    ivshm_ep_t *tx = make_ep(&v, 1, NULL, &ss);
    uint32_t peer;
    assert_int_equal(ivshm_ep_connect(tx, addr, sizeof(addr), &peer), IVSHM_OK);
    bool sent = pump_one(tx, peer, NULL, 0, 10, 15);
    int ws;
    assert_int_equal(waitpid(rxp, &ws, 0), rxp);
    if (!sent || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail_msg("message %ssent; blocked receiver ended with 0x%x",
                 sent ? "" : "not ", ws);
    ivshm_ep_destroy(tx);
    munmap(base, len);
    view_close(&v);
}

/* ---- 8: `ivshm stat` on a damaged job slot ---- */

static void count_ep(void *arg, const char *job, uint32_t index, uint32_t pid,
                     const ivshm_ep_stats_t *s)
{
    (void)job, (void)index, (void)pid, (void)s;
    ++*(unsigned *)arg;
}

/* A job slot whose area runs past the region: the endpoint walk skips it
 * and still reports the healthy job. Before: SIGBUS/SIGSEGV. */
static void test_stat_damaged_job(void **state)
{
    (void)state;
    struct view v, w;
    view_open(&v, "healthy");
    view_open(&w, "damaged");
    struct sink s1, s2;
    ivshm_ep_t *e1 = make_ep(&v, 0, NULL, &s1);
    ivshm_ep_t *e2 = make_ep(&w, 0, NULL, &s2);
    pid_t c = fork();
    if (c == 0) {
        size_t len;
        unsigned char *base = tu_map_raw(path, &len);
        ivshm_region_t *r;
        if (!base || ivshm_region_open(tu_uri(path), 0, &r) != IVSHM_OK)
            _exit(9);
        ivshm_region_info_t ri;
        ivshm_region_info(r, &ri);
        struct ivshm_hdr *h = (struct ivshm_hdr *)base;
        for (uint32_t j = 0; j < ri.job_slots; j++) {
            ivshm_job_info_t ji;
            if (ivshm_region_job(r, j, &ji) == IVSHM_OK &&
                strcmp(ji.key, "damaged") == 0) {
                struct ivshm_job_slot *js =
                    (struct ivshm_job_slot *)(base + h->job_off) + j;
                /* the last 64 bytes of the mapping, and 1 MiB beyond */
                atomic_store(&js->area_off, ri.size - 64);
                js->area_size = 1ull << 20;
            }
        }
        unsigned n = 0;
        ivshm_region_endpoints(r, count_ep, &n);
        _exit(n == 1 ? 0 : 10);
    }
    int ws;
    assert_int_equal(waitpid(c, &ws, 0), c);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        fail_msg("endpoint walk ended with 0x%x", ws);
    ivshm_ep_destroy(e2);
    ivshm_ep_destroy(e1);
    view_close(&w);
    view_close(&v);
}

/* ---- 9: a lease in doubt is not a death ---- */

/* Two views of one job (the doubt tests): a receiver at index 0, a sender
 * at 1 (FIFO cells of 128 bytes), and the raw mapping, in which a test
 * forges a view's registry slot as a collector would. */
struct doubt_pair {
    struct view vr, vs;
    unsigned char *base;
    size_t len;
    struct sink rs, ss;
    ivshm_ep_t *rx, *tx;
    ivshm_ep_config_t c;
};
static struct ivshm_reg_slot *own_slot(struct doubt_pair *dp, struct view *v)
{
    ivshm_identity_t id;
    ivshm_self_identity(v->r, &id);
    struct ivshm_hdr *h = (struct ivshm_hdr *)dp->base;
    return (struct ivshm_reg_slot *)(dp->base + h->reg_off) + id.slot;
}
static void doubt_pair_open(struct doubt_pair *dp, const char *job)
{
    view_open(&dp->vr, job);
    view_open(&dp->vs, job);
    dp->base = tu_map_raw(path, &dp->len);
    dp->c = fifo_cfg(64);
    dp->c.cell_size = 128;
    dp->rx = make_ep(&dp->vr, 0, &dp->c, &dp->rs);
    dp->tx = make_ep(&dp->vs, 1, &dp->c, &dp->ss);
}
static void doubt_pair_close(struct doubt_pair *dp)
{
    ivshm_ep_destroy(dp->tx);
    ivshm_ep_destroy(dp->rx);
    munmap(dp->base, dp->len);
    view_close(&dp->vs);
    view_close(&dp->vr);
}

/* A reclaimer holds the sender's lease for a moment (then backs off, as it
 * does when the heartbeat is fresh); the receiver's liveness checks run
 * meanwhile. The sender's fragment messages are all delivered afterwards
 * and no death is reported. Before: the peer was marked dead for good and
 * its messages dropped. */
static void test_doubt_is_not_death(void **state)
{
    (void)state;
    struct doubt_pair dp;
    doubt_pair_open(&dp, "doubt");
    uint32_t peer = connect_ep(dp.tx, dp.rx);
    for (uint32_t k = 0; k < 10; k++)
        assert_true(pump_one(dp.tx, peer, NULL, k, 2000, 5));
    struct ivshm_reg_slot *slot = own_slot(&dp, &dp.vs);
    uint64_t alive = atomic_load(&slot->word);
    atomic_store(&slot->word, SLOT_WORD(SLOT_GEN(alive), SLOT_RECLAIMING));
    double end = tu_now_s() + 0.25;
    while (tu_now_s() < end)
        ivshm_ep_progress(dp.rx);
    atomic_store(&slot->word, alive); /* the reclaimer backs off */
    drain(dp.rx, &dp.rs, 10, 5);
    assert_int_equal(dp.rs.dead, 0);
    assert_int_equal(dp.rs.got, 10);
    assert_int_equal(dp.rs.bad, 0);
    doubt_pair_close(&dp);
}

/* A connect, and the locality by which a front end picks a transport for
 * the job (the BTL's add_procs, UCX's reachability), that meet the peer's
 * lease in doubt (a collector between its claim and its back-off) wait for
 * the doubt to end instead of answering "again" or "stale" at once, which
 * the front ends take as "not reachable" for the rest of the job. A doubt
 * that lasts past the bound still ends in IVSHM_ERR_AGAIN, with the
 * reason, and in "stale". */
struct backoff_later {
    _Atomic uint64_t *word;
    uint64_t alive;
    double after_s;
};
static void *back_off_later(void *arg)
{
    struct backoff_later *b = arg;
    struct timespec ts = {0, (long)(b->after_s * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(b->word, b->alive); /* the collector backs off */
    return NULL;
}
/* Starts the thread that backs a forged claim off after_s seconds on. */
static void doubt_end_later(struct backoff_later *b, pthread_t *t,
                            struct ivshm_reg_slot *slot, uint64_t alive,
                            double after_s)
{
    *b = (struct backoff_later){&slot->word, alive, after_s};
    assert_int_equal(pthread_create(t, NULL, back_off_later, b), 0);
}

/* The collector backs off just after the settled locality's first look
 * (its "locality-doubt" step), before its second. */
static struct backoff_later *back_off_at_step;
static void back_off_on_step(const char *step)
{
    if (back_off_at_step && strcmp(step, "locality-doubt") == 0) {
        atomic_store(back_off_at_step->word, back_off_at_step->alive);
        back_off_at_step = NULL;
    }
}

static void test_connect_waits_out_doubt(void **state)
{
    (void)state;
    struct doubt_pair dp;
    doubt_pair_open(&dp, "doubtc");
    struct ivshm_reg_slot *slot = own_slot(&dp, &dp.vr);
    uint64_t alive = atomic_load(&slot->word);
    uint64_t held = SLOT_WORD(SLOT_GEN(alive), SLOT_RECLAIMING);
    ivshm_identity_t id;
    ivshm_self_identity(dp.vr.r, &id);
    uint8_t a[IVSHM_EP_ADDR_SIZE];
    uint32_t peer = 99;
    ivshm_ep_address(dp.rx, a);
    struct backoff_later b;
    pthread_t t;
    /* a doubt that ends 0.1 s on: the plain locality says stale, the one
     * that picks a transport waits for it, and so does a connect (each
     * clock starts before the thread that ends the doubt) */
    atomic_store(&slot->word, held);
    assert_int_equal(ivshm_peer_locality(dp.vs.r, &id), IVSHM_PEER_STALE);
    double t0 = tu_now_s();
    doubt_end_later(&b, &t, slot, alive, 0.1);
    assert_int_equal(ivshm_peer_locality_settled(dp.vs.r, &id),
                     IVSHM_PEER_SAME_VM);
    assert_true(tu_now_s() - t0 >= 0.09);
    pthread_join(t, NULL);
    atomic_store(&slot->word, held);
    t0 = tu_now_s();
    doubt_end_later(&b, &t, slot, alive, 0.1);
    assert_int_equal(ivshm_ep_connect(dp.tx, a, sizeof(a), &peer), IVSHM_OK);
    assert_true(tu_now_s() - t0 >= 0.09);
    pthread_join(t, NULL);
    assert_int_equal(peer, 0);
    for (uint32_t k = 0; k < 10; k++)
        assert_true(pump_one(dp.tx, peer, NULL, k, 2000, 5));
    drain(dp.rx, &dp.rs, 10, 5);
    assert_int_equal(dp.rs.got, 10);
    assert_int_equal(dp.rs.bad, 0);
    /* a doubt that ends between the settled locality's two looks */
    atomic_store(&slot->word, held);
    b = (struct backoff_later){&slot->word, alive, 0};
    back_off_at_step = &b;
    ivshm__test_step = back_off_on_step;
    ivshm_locality_t loc = ivshm_peer_locality_settled(dp.vs.r, &id);
    ivshm__test_step = NULL;
    assert_null(back_off_at_step);
    assert_int_equal(loc, IVSHM_PEER_SAME_VM);
    /* a doubt that outlasts the bound: stale, and "again" from a second
     * sender that has not met the receiver, after about a second; asked
     * again about that life, both answer at once */
    struct view vt;
    view_open(&vt, "doubtc");
    struct sink ts;
    ivshm_ep_t *tx2 = make_ep(&vt, 2, &dp.c, &ts);
    atomic_store(&slot->word, held);
    t0 = tu_now_s();
    assert_int_equal(ivshm_peer_locality_settled(vt.r, &id),
                     IVSHM_PEER_STALE);
    double took = tu_now_s() - t0;
    assert_true(took >= 0.95 && took < 5);
    t0 = tu_now_s();
    assert_int_equal(ivshm_peer_locality_settled(vt.r, &id),
                     IVSHM_PEER_STALE);
    assert_int_equal(ivshm_ep_connect(tx2, a, sizeof(a), &peer),
                     IVSHM_ERR_AGAIN);
    took = tu_now_s() - t0;
    assert_true(took < 0.5);
    assert_non_null(strstr(ivshm_last_error(), "being judged"));
    atomic_store(&slot->word, alive);
    assert_int_equal(ivshm_ep_connect(tx2, a, sizeof(a), &peer), IVSHM_OK);
    assert_int_equal(dp.rs.dead + dp.ss.dead + ts.dead, 0);
    ivshm_ep_destroy(tx2);
    view_close(&vt);
    doubt_pair_close(&dp);
}

/* A connect that waited for a peer in doubt checks our own lease again
 * before it writes its record of the peer: a lease lost during the wait
 * (our slot's generation moved on) ends the connect in
 * IVSHM_ERR_LEASE_LOST, the peer's index not handed out. */
struct lose_later {
    _Atomic uint64_t *own_word, *peer_word;
    uint64_t own_lost, peer_alive;
};
static void *lose_then_back_off(void *arg)
{
    struct lose_later *l = arg;
    struct timespec ts = {0, 100000000L};
    nanosleep(&ts, NULL);
    atomic_store(l->own_word, l->own_lost);    /* our lease is taken */
    atomic_store(l->peer_word, l->peer_alive); /* the peer's doubt ends */
    return NULL;
}
static void test_connect_rechecks_own_lease(void **state)
{
    (void)state;
    struct doubt_pair dp;
    doubt_pair_open(&dp, "doubtl");
    struct view vt;
    view_open(&vt, "doubtl");
    struct sink ts;
    ivshm_ep_t *tx2 = make_ep(&vt, 2, &dp.c, &ts);
    struct ivshm_reg_slot *peer_slot = own_slot(&dp, &dp.vr);
    struct ivshm_reg_slot *mine = own_slot(&dp, &vt);
    uint64_t alive = atomic_load(&peer_slot->word);
    uint64_t mine_alive = atomic_load(&mine->word);
    uint8_t a[IVSHM_EP_ADDR_SIZE];
    ivshm_ep_address(dp.rx, a);
    atomic_store(&peer_slot->word,
                 SLOT_WORD(SLOT_GEN(alive), SLOT_RECLAIMING));
    struct lose_later l = {
        &mine->word, &peer_slot->word,
        SLOT_WORD(SLOT_GEN(mine_alive) + 1, SLOT_FREE), alive};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, lose_then_back_off, &l), 0);
    uint32_t peer = 99;
    assert_int_equal(ivshm_ep_connect(tx2, a, sizeof(a), &peer),
                     IVSHM_ERR_LEASE_LOST);
    pthread_join(t, NULL);
    assert_int_equal(peer, 99);
    /* the other sender, whose lease holds, still connects */
    assert_int_equal(ivshm_ep_connect(dp.tx, a, sizeof(a), &peer), IVSHM_OK);
    assert_int_equal(peer, 0);
    atomic_store(&mine->word, mine_alive); /* for the detach at the close */
    ivshm_ep_destroy(tx2);
    view_close(&vt);
    doubt_pair_close(&dp);
}

/* A check that another process' memory is its own (coll ivshmem maps
 * areas so) meets the owner's lease in doubt: it waits the doubt out
 * instead of calling the owner dead; a doubt past the bound is a death. */
static void test_owned_waits_out_doubt(void **state)
{
    (void)state;
    struct doubt_pair dp;
    doubt_pair_open(&dp, "doubto");
    struct ivshm_reg_slot *slot = own_slot(&dp, &dp.vr);
    uint64_t alive = atomic_load(&slot->word);
    ivshm_identity_t id;
    ivshm_self_identity(dp.vr.r, &id);
    uint64_t off;
    assert_int_equal(ivshm_alloc(dp.vr.r, 4096, &off), IVSHM_OK);
    assert_int_equal(ivshm_region_owned(dp.vs.r, &id, off, 4096), IVSHM_OK);
    struct backoff_later b;
    pthread_t t;
    uint64_t held = SLOT_WORD(SLOT_GEN(alive), SLOT_RECLAIMING);
    /* a doubt that ends 0.1 s on: the plain locality says stale, the
     * check waits (twice: each doubt is waited for anew) */
    for (int k = 0; k < 2; k++) {
        atomic_store(&slot->word, held);
        assert_int_equal(ivshm_peer_locality(dp.vs.r, &id), IVSHM_PEER_STALE);
        double t0 = tu_now_s();
        doubt_end_later(&b, &t, slot, alive, 0.1);
        assert_int_equal(ivshm_region_owned(dp.vs.r, &id, off, 4096),
                         IVSHM_OK);
        assert_true(tu_now_s() - t0 >= 0.09);
        pthread_join(t, NULL);
        if (k)
            break;
        /* one that outlasts the bound: the owner is dead to the check, at
         * once when asked again while the doubt lasts */
        atomic_store(&slot->word, held);
        t0 = tu_now_s();
        assert_int_equal(ivshm_region_owned(dp.vs.r, &id, off, 4096),
                         IVSHM_ERR_PEER_DEAD);
        double took = tu_now_s() - t0;
        assert_true(took >= 0.95 && took < 5);
        t0 = tu_now_s();
        assert_int_equal(ivshm_region_owned(dp.vs.r, &id, off, 4096),
                         IVSHM_ERR_PEER_DEAD);
        assert_true(tu_now_s() - t0 < 0.5);
        /* the collector backs off: alive again, and forgotten as given up
         * on, so the next doubt (k = 1) is waited for */
        atomic_store(&slot->word, alive);
        assert_int_equal(ivshm_region_owned(dp.vs.r, &id, off, 4096),
                         IVSHM_OK);
    }
    assert_int_equal(ivshm_free(dp.vr.r, off), IVSHM_OK);
    doubt_pair_close(&dp);
}

/* A detach that meets a collector judging its own lease (a claim the
 * collector backs off from once it sees the fresh heartbeat) waits for the
 * back-off and frees the slot. Before, it answered "reclaimed" at once and
 * left the slot alive, with its memory, until the lease timed out. A
 * judgement that outlasts the bound ends in IVSHM_ERR_LEASE_LOST with the
 * reason, the slot left to the collector. */
static void test_detach_waits_out_doubt(void **state)
{
    (void)state;
    size_t len;
    unsigned char *base = tu_map_raw(path, &len);
    struct ivshm_reg_slot *slots =
        (struct ivshm_reg_slot *)(base + ((struct ivshm_hdr *)base)->reg_off);
    for (int outlasts = 0; outlasts < 2; outlasts++) {
        struct view v;
        view_open(&v, "doubtd");
        ivshm_identity_t id;
        ivshm_self_identity(v.r, &id);
        struct ivshm_reg_slot *slot = slots + id.slot;
        uint64_t alive = atomic_load(&slot->word);
        uint64_t held = SLOT_WORD(SLOT_GEN(alive), SLOT_RECLAIMING);
        ivshm_domain_leave(v.d);
        atomic_store(&slot->word, held);
        struct backoff_later b;
        pthread_t t;
        double t0 = tu_now_s();
        if (outlasts) {
            assert_int_equal(ivshm_detach(v.r), IVSHM_ERR_LEASE_LOST);
            double took = tu_now_s() - t0;
            assert_true(took >= 0.95 && took < 5);
            assert_non_null(strstr(ivshm_last_error(), "being judged"));
            assert_int_equal(atomic_load(&slot->word), held);
            /* the collector finishes: the generation moves on */
            atomic_store(&slot->word,
                         SLOT_WORD(SLOT_GEN(alive) + 1, SLOT_FREE));
        } else {
            doubt_end_later(&b, &t, slot, alive, 0.1);
            assert_int_equal(ivshm_detach(v.r), IVSHM_OK);
            assert_true(tu_now_s() - t0 >= 0.09);
            pthread_join(t, NULL);
            uint64_t w = atomic_load(&slot->word);
            assert_int_equal(SLOT_GEN(w), SLOT_GEN(alive) + 1);
            assert_int_equal(SLOT_STATE(w), SLOT_FREE);
        }
        ivshm_region_close(v.r);
    }
    munmap(base, len);
}

/* ---- 10: ownership is checked for every chunk of a range ---- */

/* A's buffer range that straddles a chunk of B is not A's: a single-copy
 * send of it is refused. Before: only the first and last chunk were
 * looked at, and the receiver read B's memory. */
static void test_range_straddles(void **state)
{
    (void)state;
    struct view va, vb;
    view_open(&va, "range");
    view_open(&vb, "range");
    struct sink rs, as;
    ivshm_ep_t *rx = make_ep(&vb, 0, NULL, &rs);
    ivshm_ep_t *a = make_ep(&va, 1, NULL, &as);
    uint32_t peer = connect_ep(a, rx);
    ivshm_region_info_t ri;
    ivshm_region_info(va.r, &ri);
    uint64_t x, y, z;
    assert_int_equal(ivshm_alloc(va.r, ri.chunk_size, &x), IVSHM_OK);
    assert_int_equal(ivshm_alloc(vb.r, ri.chunk_size, &y), IVSHM_OK);
    assert_int_equal(ivshm_alloc(va.r, ri.chunk_size, &z), IVSHM_OK);
    assert_int_equal(y, x + ri.chunk_size);
    assert_int_equal(z, y + ri.chunk_size);
    uint64_t ticket;
    assert_int_equal(ivshm_ep_send_region(a, peer, 0, x, 3 * ri.chunk_size,
                                          &ticket),
                     IVSHM_ERR_INVAL);
    assert_int_equal(ivshm_ep_send_region(a, peer, 0, x, ri.chunk_size,
                                          &ticket),
                     IVSHM_OK);
    ivshm_ep_destroy(a);
    ivshm_ep_destroy(rx);
    view_close(&vb);
    view_close(&va);
}

/* ---- one-sided reads of a peer's buffer (the MPI RGET path) ---- */

/* Collects a dead owner's lease and waits until its chunks have cooled
 * (one lease timeout, docs/lifetimes.md), so that a new process can take
 * them. */
static void collect_cooled(ivshm_region_t *r)
{
    assert_int_equal(ivshm_gc(r, NULL), IVSHM_OK);
    ivshm_region_info_t ri;
    ivshm_region_info(r, &ri);
    usleep((ri.lease_timeout_ms + 100) * 1000u);
}

/* B reads A's region buffer by offset, as ob1's RGET does through the
 * BTL. A is killed after announcing it and its chunks go to a new owner:
 * B's check before the copy refuses the handle, and a copy that was under
 * way when A died is reported by the check after it. The BTL's own checks
 * (btl_ivshmem_handle.h) are run on A's handle at each point. */
static void test_owner_dies_during_get(void **state)
{
    (void)state;
    uint64_t off;
    pid_t a = fork_idle_peer("rget", 4, &off, NULL);
    struct view b;
    view_open(&b, "rget");
    struct sink s;
    ivshm_ep_t *ep = make_ep(&b, 0, NULL, &s);
    ivshm_region_info_t ri;
    ivshm_region_info(b.r, &ri);
    uint64_t len = 4 * ri.chunk_size;
    uint32_t pa;
    assert_int_equal(tr_connect(b.d, ep, 1, &pa), 0);
    /* a live owner's own buffer: readable; a range past it: refused */
    assert_int_equal(ivshm_ep_peer_holds(ep, pa, off, len), IVSHM_OK);
    assert_int_equal(ivshm_ep_peer_holds(ep, pa, off, len + ri.chunk_size),
                     IVSHM_ERR_INVAL);
    assert_int_equal(ivshm_ep_peer_alive(ep, pa), IVSHM_OK);
    /* the handle A's BTL would send for the buffer, at A's address X */
    const uint64_t x = 0x7f0000000000ull;
    struct mca_btl_base_registration_handle_t h = {
        x, len, off, IVSHMEM_REG_IN_REGION,
        IVSHMEM_REG_CHECK ^ IVSHMEM_REG_IN_REGION};
    uint64_t rsize = ivshm_region_size(b.r);
    assert_true(ivshmem_handle_range(ep, rsize, pa, &h, x + 100, 200) ==
                off + 100);
    assert_true(ivshmem_range_held(ep, pa, off, len));
    /* past the buffer, a forged offset, a broken mark: refused */
    assert_true(ivshmem_handle_range(ep, rsize, pa, &h, x + len - 8, 16) ==
                UINT64_MAX);
    struct mca_btl_base_registration_handle_t bad = h;
    bad.len += ri.chunk_size; /* a chunk that is not A's */
    assert_true(ivshmem_handle_range(ep, rsize, pa, &bad, x, bad.len) ==
                UINT64_MAX);
    bad = h;
    bad.check ^= 1;
    assert_true(ivshmem_handle_range(ep, rsize, pa, &bad, x, 8) == UINT64_MAX);
    /* a copy under way, checked before: its first half is A's bytes */
    const unsigned char *src =
        (const unsigned char *)ivshm_region_base(b.r) + off;
    unsigned char *got = malloc(len);
    assert_non_null(got);
    memcpy(got, src, len / 2);
    /* the owner dies mid-transfer; a new process gets its chunks */
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    collect_cooled(b.r);
    struct view c;
    view_open(&c, "rget-other");
    uint64_t reuse;
    unsigned mine = 0;
    while (ivshm_alloc(c.r, ri.chunk_size, &reuse) == IVSHM_OK) {
        memset((char *)ivshm_region_base(c.r) + reuse, 0x55, ri.chunk_size);
        mine += reuse >= off && reuse < off + len;
    }
    assert_int_equal(mine, 4); /* every chunk of A's buffer is C's now */
    /* the copy ends: its second half is C's bytes, and the check after it
     * (as the BTL's get makes) reports the owner gone */
    memcpy(got + len / 2, src + len / 2, len - len / 2);
    assert_int_equal(got[0], 0xaa);
    assert_int_equal(got[len - 1], 0x55);
    free(got);
    assert_int_equal(ivshm_ep_peer_alive(ep, pa), IVSHM_ERR_PEER_DEAD);
    /* and a new copy's check before it refuses the handle */
    assert_int_equal(ivshm_ep_peer_holds(ep, pa, off, len), IVSHM_ERR_PEER_DEAD);
    /* the BTL fails a get that was under way, and refuses a new one */
    assert_false(ivshmem_range_held(ep, pa, off, len));
    assert_true(ivshmem_handle_range(ep, rsize, pa, &h, x, len) == UINT64_MAX);
    ivshm_ep_destroy(ep);
    view_close(&c);
    view_close(&b);
}

/* A bystander's view v takes every free chunk of the region and fills it
 * with 0x55; their offsets (malloc'd) in *offs, their size in
 * *chunk_size. Returns how many it took. */
static uint32_t take_free_chunks(struct view *v, uint64_t **offs,
                                 uint32_t *chunk_size)
{
    ivshm_region_info_t ri;
    ivshm_region_info(v->r, &ri);
    *chunk_size = ri.chunk_size;
    *offs = calloc(ri.chunk_count, sizeof(**offs));
    assert_non_null(*offs);
    uint32_t n = 0;
    uint64_t off;
    while (n < ri.chunk_count &&
           ivshm_alloc(v->r, ri.chunk_size, &off) == IVSHM_OK) {
        memset((char *)ivshm_region_base(v->r) + off, 0x55, ri.chunk_size);
        (*offs)[n++] = off;
    }
    return n;
}

/* ---- one-sided writes into a peer's buffer (ob1's put) ---- */

/* The put's copy (ivshmem_copy_held, the BTL's own loop) asks this before
 * each piece and after the last: the BTL's check, except that at check
 * number kill_at the target A is killed first and a bystander C takes
 * every free chunk, A's among them once their cooling period is over
 * (docs/lifetimes.md), and fills it with 0x55. */
struct put_target {
    ivshm_ep_t *ep;
    uint32_t owner;
    pid_t pid;
    unsigned checks, kill_at;
    struct view bystander;
    uint64_t *offs; /* the chunks C took */
    uint32_t noffs, chunk_size;
};

static bool put_check(void *arg, uint64_t off, uint64_t len)
{
    struct put_target *t = arg;
    if (t->checks++ == t->kill_at) {
        kill(t->pid, SIGKILL);
        waitpid(t->pid, NULL, 0);
        collect_cooled(t->bystander.r);
        t->noffs = take_free_chunks(&t->bystander, &t->offs, &t->chunk_size);
    }
    return ivshmem_range_held(t->ep, t->owner, off, len);
}

/* B puts 4 chunks of 0x11 into A's buffer, one chunk a piece, with A
 * killed at check number kill_at (4 checks: one before each piece but the
 * first, which the BTL's handle check stands for, and one after the last;
 * from 4 on: never). Returns what the copy reported, with
 * the number of bytes of C's chunks that are not C's own in *changed and
 * of A's buffer that are not the put's (A alive) in *missing. */
#define PUT_CHECKS 4u
static bool put_run(unsigned kill_at, bool *killed, uint64_t *changed,
                    uint64_t *missing)
{
    struct put_target t;
    memset(&t, 0, sizeof(t));
    t.kill_at = kill_at;
    uint64_t off;
    t.pid = fork_idle_peer("rput", 4, &off, NULL);
    struct view b;
    view_open(&b, "rput");
    view_open(&t.bystander, "rput-other");
    struct sink s;
    t.ep = make_ep(&b, 0, NULL, &s);
    assert_int_equal(tr_connect(b.d, t.ep, 1, &t.owner), 0);
    ivshm_region_info_t ri;
    ivshm_region_info(b.r, &ri);
    t.chunk_size = ri.chunk_size;
    uint64_t len = 4 * ri.chunk_size;
    unsigned char *src = malloc(len);
    assert_non_null(src);
    memset(src, 0x11, len);
    unsigned char *base = ivshm_region_base(b.r);
    bool ok = ivshmem_copy_held(true, src, base + off, off, len,
                                ri.chunk_size, put_check, &t);
    *changed = 0;
    for (uint32_t i = 0; i < t.noffs; i++)
        for (uint32_t k = 0; k < t.chunk_size; k++)
            *changed += base[t.offs[i] + k] != 0x55;
    *killed = t.checks > kill_at;
    *missing = 0;
    for (uint64_t i = 0; !*killed && i < len; i++)
        *missing += base[off + i] != 0x11;
    if (!*killed) {
        kill(t.pid, SIGKILL);
        waitpid(t.pid, NULL, 0);
    }
    free(t.offs);
    free(src);
    ivshm_ep_destroy(t.ep);
    view_close(&t.bystander);
    view_close(&b);
    return ok;
}

/* A put into a live target writes every byte and reports success; one
 * whose target dies before a piece (its chunks then reused) writes no
 * byte of the new owner's and reports failure; one whose target dies
 * after the last piece reports failure too (ob1 must not complete the
 * send into memory that is no longer the receiver's). */
static void test_owner_dies_during_put(void **state)
{
    (void)state;
    uint64_t changed, missing;
    bool killed;
    assert_true(put_run(PUT_CHECKS, &killed, &changed, &missing));
    assert_false(killed);
    assert_int_equal(missing, 0);
    unsigned succeeded = 0, unchecked = 0;
    uint64_t overwritten = 0;
    for (unsigned kill_at = 0; kill_at < PUT_CHECKS; kill_at++) {
        bool ok = put_run(kill_at, &killed, &changed, &missing);
        if (!killed)
            print_message("check %u never came: the put checked its "
                          "target fewer than %u times\n", kill_at,
                          PUT_CHECKS);
        else
            print_message("killed at check %u: put %s, %llu bytes of the "
                          "bystander's chunks overwritten\n",
                          kill_at, ok ? "succeeded" : "failed",
                          (unsigned long long)changed);
        succeeded += ok;
        unchecked += !killed;
        overwritten += changed;
    }
    assert_int_equal(unchecked, 0);
    assert_int_equal(succeeded, 0);
    assert_int_equal(overwritten, 0);
}

/* ---- lent data whose lender dies while the receiver is at it ---- */

/* The sender lends its fragments: once its lease is gone that memory may
 * be another process's. The test makes the sender die in the middle of the
 * receiver's progress pass, from a handler, and hands its chunks to a new
 * process at once, so that the receiver's own check of the lender before
 * it reads a fragment is what stands between it and the new owner's
 * memory (the check at the start of the pass has already passed). */
struct lend_rx {
    pid_t lender;
    ivshm_region_t *r;   /* the receiver's view of the region */
    uint32_t got[4];     /* deliveries by tag */
    uint32_t bad;        /* a fragment's bytes not the lender's */
    struct view other;   /* the new owner */
    bool reused;
    uint64_t *offs;      /* the chunks it took, each filled with 0x55 */
    uint32_t noffs;
    uint32_t chunk_size;
};

static void lender_gone(struct lend_rx *l, ivshm_region_t *r)
{
    kill(l->lender, SIGKILL);
    waitpid(l->lender, NULL, 0);
    collect_cooled(r);
    view_open(&l->other, "lend-other");
    l->noffs = take_free_chunks(&l->other, &l->offs, &l->chunk_size);
    l->reused = true;
}

static void on_lent(void *arg, const ivshm_msg_t *m)
{
    struct lend_rx *l = arg;
    if (m->tag < 4)
        l->got[m->tag]++;
    for (size_t i = 0; m->tag == 2 && i < m->len; i++)
        l->bad += ((const unsigned char *)m->data)[i] != 0xaa;
    if (m->tag == 1) /* the inline one, first in the pass */
        lender_gone(l, l->r);
}

/* The lender's work: tag 1 (8 bytes, inline) and tag 2 (4000 bytes of
 * 0xaa, in a fragment) to endpoint 0, before it reports ready. */
static int send_inline_and_lent(struct view *v, ivshm_ep_t *ep)
{
    uint32_t peer;
    static unsigned char big[4000];
    memset(big, 0xaa, sizeof(big));
    return tr_connect(v->d, ep, 0, &peer) ||
           ivshm_ep_send(ep, peer, 1, "inline!", 8) != IVSHM_OK ||
           ivshm_ep_send(ep, peer, 2, big, sizeof(big)) != IVSHM_OK;
}

static void lend_run(struct lend_rx *l, ivshm_ep_stats_t *st)
{
    struct view b;
    view_open(&b, "lend");
    memset(l, 0, sizeof(*l));
    l->r = b.r;
    ivshm_ep_t *ep;
    assert_int_equal(ivshm_ep_create(b.d, 0, NULL, on_lent, l, &ep), IVSHM_OK);
    l->lender = fork_idle_peer("lend", 0, NULL, send_inline_and_lent);
    /* one pass takes both pieces: the first one's handler kills */
    for (int i = 0; i < 1000000 && !l->reused; i++)
        ivshm_ep_progress(ep);
    assert_true(l->reused);
    for (int i = 0; i < 1000; i++)
        ivshm_ep_progress(ep);
    ivshm_ep_stats(ep, st);
    /* every chunk the new owner took still holds only what it wrote */
    const unsigned char *base = ivshm_region_base(l->other.r);
    uint64_t changed = 0;
    for (uint32_t i = 0; i < l->noffs; i++)
        for (uint32_t k = 0; k < l->chunk_size; k++)
            changed += base[l->offs[i] + k] != 0x55;
    free(l->offs);
    ivshm_ep_destroy(ep);
    view_close(&l->other);
    view_close(&b);
    assert_true(l->noffs > 0);
    assert_int_equal(changed, 0);
}

/* The lender dies in the handler of its inline message: its fragment,
 * next in the same pass, is not read (the lease check before the read). */
static void test_lender_dies_before_read(void **state)
{
    (void)state;
    struct lend_rx l;
    ivshm_ep_stats_t st;
    lend_run(&l, &st);
    assert_int_equal(l.got[1], 1);
    assert_int_equal(l.got[2], 0); /* never the new owner's bytes */
    assert_int_equal(l.bad, 0);
    assert_true(st.invalid_dropped >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pause_past_lease, setup_short,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_mixed_geometry, setup_long,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lost_piece_resyncs, setup_long,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_frags_back_from_dead, setup_long,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_send_after_owner_collected,
                                        setup_long, teardown),
        cmocka_unit_test_setup_teardown(test_send_after_receiver_detached,
                                        setup_long, teardown),
        cmocka_unit_test_setup_teardown(test_send_after_forced_format,
                                        setup_long, teardown),
        cmocka_unit_test_setup_teardown(test_send_after_reclaimer_died,
                                        setup_short, teardown),
        cmocka_unit_test_setup_teardown(test_send_after_lease_given_up,
                                        setup_long, teardown),
        cmocka_unit_test_setup_teardown(test_send_after_receiver_destroyed,
                                        setup_long, teardown),
        cmocka_unit_test_setup_teardown(test_endpoint_lives, setup_long,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stale_claim, setup_short,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_wait_is_bounded, setup_short,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stat_damaged_job, setup_long,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_doubt_is_not_death, setup_long,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_owned_waits_out_doubt, setup_long,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_connect_rechecks_own_lease,
                                        setup_long, teardown),
        cmocka_unit_test_setup_teardown(test_detach_waits_out_doubt,
                                        setup_long, teardown),
        cmocka_unit_test_setup_teardown(test_connect_waits_out_doubt,
                                        setup_long, teardown),
        cmocka_unit_test_setup_teardown(test_range_straddles, setup_long,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lender_dies_before_read,
                                        setup_short, teardown),
        cmocka_unit_test_setup_teardown(test_owner_dies_during_get,
                                        setup_short, teardown),
        cmocka_unit_test_setup_teardown(test_owner_dies_during_put,
                                        setup_short, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
