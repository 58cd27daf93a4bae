/*
 * "Kill at every step": a participant K is killed (SIGKILL, from
 * the library's fault seam) at each step of the channel's life: between
 * claim and publish, with a fragment lent, right after a publish, right
 * after granting a fast box, before acknowledging a fragment, between
 * claiming its directory index and publishing it, between freeing its
 * entry and its memory, and inside a lease renewal. Meanwhile an unrelated
 * sender T and the receiver R exchange checked traffic both ways. After
 * the kill, within a bounded time: all of T's and R's messages arrive
 * intact, a new process takes K's index and is heard, and after a
 * collection the region and the domain check clean.
 * IVSHM_KILL_MSGS sets T's message count (long mode: 20000).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../testutil.h"
#include "../chan_traffic.h"

#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

extern void (*ivshm__test_step)(const char *step);

enum { R_IDX = 0, K_IDX = 1, T_IDX = 2, R_TO_T = 200 };

static char path[256];
static uint32_t t_msgs;
static const char *kill_step;
static unsigned kill_after, steps_seen;

static void kill_hook(const char *step)
{
    if (strcmp(step, kill_step) == 0 && ++steps_seen >= kill_after)
        raise(SIGKILL);
}

static ivshm_ep_config_t small_cfg(void)
{
    ivshm_ep_config_t c;
    ivshm_ep_config_init(&c);
    c.fifo_cells = 64;
    c.cell_size = 128;
    c.fbox_cells = 16;
    c.fbox_threshold = 4;
    c.frag_count = 8;
    c.frag_size = 32768;
    return c;
}

struct proc {
    ivshm_region_t *r;
    ivshm_domain_t *d;
    ivshm_ep_t *ep;
    struct tr_rx rx;      /* checked traffic (T's at R, R's at T) */
    struct tr_rx rx_new;  /* the new owner of K's index, at R */
    bool k_replaced;
    uint64_t from_k;
};

static void on_msg(void *arg, const ivshm_msg_t *m)
{
    struct proc *p = arg;
    if (m->sender == K_IDX && !p->k_replaced) {
        p->from_k++; /* K's own traffic: it may die mid-message */
        return;
    }
    tr_rx_piece(m->sender == K_IDX ? &p->rx_new : &p->rx, m->sender, m);
}

static int proc_open(struct proc *p, int idx, bool heartbeat)
{
    memset(p, 0, sizeof(*p));
    tr_rx_init(&p->rx);
    tr_rx_init(&p->rx_new);
    ivshm_ep_config_t c = small_cfg();
    if (ivshm_region_open(tu_uri(path), 0, &p->r) != IVSHM_OK ||
        ivshm_attach(p->r) != IVSHM_OK)
        return 1;
    if (heartbeat && ivshm_lease_start_thread(p->r) != IVSHM_OK)
        return 2;
    if (ivshm_domain_join(p->r, "kill", 8, &p->d) != IVSHM_OK)
        return 3;
    if (idx >= 0 && ivshm_ep_create(p->d, idx, &c, on_msg, p, &p->ep) != IVSHM_OK)
        return 4;
    return 0;
}

static int send_tr(struct proc *p, uint32_t peer, uint32_t me, uint32_t seq)
{
    static unsigned char buf[TR_MAX_SIZE];
    size_t n = tr_size(me, seq);
    tr_fill(me, seq, buf, n);
    return ivshm_ep_send(p->ep, peer, seq, buf, n) == IVSHM_OK ? 0 : 1;
}

/* K: plays the role its step needs until the seam kills it. */
static void run_k(const char *step)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    kill_step = step;
    bool sender = !strcmp(step, "claim") || !strcmp(step, "lend") ||
                  !strcmp(step, "publish");
    kill_after = sender ? 40 : 1;
    ivshm__test_step = strcmp(step, "renew") ? kill_hook : NULL;
    struct proc p;
    uint32_t peer;
    bool renew = !strcmp(step, "renew");
    if (proc_open(&p, K_IDX, renew))
        _exit(20); /* "create" dies in here */
    if (renew)
        ivshm__test_step = kill_hook; /* the heartbeat thread meets it */
    if (tr_connect(p.d, p.ep, R_IDX, &peer))
        _exit(21);
    if (!strcmp(step, "destroy")) {
        for (uint32_t s = 0; s < 10; s++)
            send_tr(&p, peer, K_IDX, s);
        ivshm_ep_destroy(p.ep);
        _exit(22);
    }
    for (uint32_t s = 0;; s++) {
        if (sender && send_tr(&p, peer, K_IDX, s))
            _exit(23);
        if (ivshm_ep_progress(p.ep) == 0 && !sender)
            ivshm_ep_wait(p.ep, 5);
    }
}

/* T: sends t_msgs checked messages to R and takes R_TO_T from it. */
static void run_t(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct proc p;
    uint32_t peer;
    if (proc_open(&p, T_IDX, true) || tr_connect(p.d, p.ep, R_IDX, &peer))
        _exit(30);
    for (uint32_t s = 0; s < t_msgs; s++)
        if (send_tr(&p, peer, T_IDX, s))
            _exit(31);
    double end = tu_now_s() + 30;
    while (p.rx.complete < R_TO_T && tu_now_s() < end)
        if (ivshm_ep_progress(p.ep) == 0)
            ivshm_ep_wait(p.ep, 5);
    if (p.rx.errors) {
        fprintf(stderr, "T: %s\n", p.rx.first_error);
        _exit(32);
    }
    ivshm_ep_destroy(p.ep);
    _exit(p.rx.complete == R_TO_T ? 0 : 33);
}

/* The new owner of K's index: 20 checked messages to R. */
static void run_k2(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct proc p;
    uint32_t peer;
    if (proc_open(&p, K_IDX, true) || tr_connect(p.d, p.ep, R_IDX, &peer))
        _exit(40);
    for (uint32_t s = 0; s < 20; s++)
        if (send_tr(&p, peer, K_IDX, s))
            _exit(41);
    /* stay until R has read them (the inline ones live in our memory's
     * peer, the fragments in ours) */
    double end = tu_now_s() + 20;
    while (tu_now_s() < end)
        if (ivshm_ep_progress(p.ep) == 0)
            ivshm_ep_wait(p.ep, 5);
    _exit(0);
}

static void report(void *arg, ivshm_status_t st, const char *msg)
{
    (void)st;
    fprintf(stderr, "check: %s\n", msg);
    ++*(int *)arg;
}

static const char *hung_step;
static void on_alarm(int sig)
{
    (void)sig;
    char msg[128];
    int n = snprintf(msg, sizeof(msg), "kill at %s: no progress in 120 s\n",
                     hung_step);
    if (write(STDERR_FILENO, msg, (size_t)n) < 0)
        _exit(3);
    _exit(3); /* a hang fails the test instead of stalling the suite */
}

static void kill_at(const char *step)
{
    hung_step = step;
    signal(SIGALRM, on_alarm);
    alarm(120);
    tu_region_path(path, sizeof(path), "kill");
    assert_int_equal(tu_format(path, 64 << 20, 64, 300), IVSHM_OK);
    struct proc r;
    assert_int_equal(proc_open(&r, R_IDX, true), 0);
    pid_t k = fork();
    if (k == 0)
        run_k(step);
    pid_t t = fork();
    if (t == 0)
        run_t();
    uint32_t to_t, to_k = UINT32_MAX;
    assert_int_equal(tr_connect(r.d, r.ep, T_IDX, &to_t), 0);
    bool k_receives = !strcmp(step, "grant") || !strcmp(step, "ack");
    /* R: serves, sends to T, and (for the receiving roles) feeds K */
    uint32_t sent_t = 0, sent_k = 0;
    int k_status = -1, t_status = -1;
    double end = tu_now_s() + 60;
    while (tu_now_s() < end && (t_status < 0 || k_status < 0)) {
        ivshm_ep_progress(r.ep);
        if (sent_t < R_TO_T) {
            assert_int_equal(send_tr(&r, to_t, R_IDX, sent_t), 0);
            sent_t++;
        }
        if (k_receives && k_status < 0) {
            if (to_k == UINT32_MAX) {
                uint8_t a[IVSHM_EP_ADDR_SIZE];
                uint32_t pk;
                if (ivshm_domain_address(r.d, K_IDX, a) == IVSHM_OK &&
                    ivshm_ep_connect(r.ep, a, sizeof(a), &pk) == IVSHM_OK)
                    to_k = pk;
            } else {
                static unsigned char m[2000];
                ivshm_status_t st =
                    ivshm_ep_try_send(r.ep, to_k, sent_k, m, sizeof(m));
                sent_k += st == IVSHM_OK;
            }
        }
        int ws;
        if (k_status < 0 && waitpid(k, &ws, WNOHANG) == k)
            k_status = ws;
        if (t_status < 0 && waitpid(t, &ws, WNOHANG) == t)
            t_status = ws;
    }
    if (k_status < 0 || !WIFSIGNALED(k_status) ||
        WTERMSIG(k_status) != SIGKILL)
        fail_msg("%s: K was not killed at its step (status 0x%x)", step,
                 k_status);
    if (t_status < 0 || !WIFEXITED(t_status) || WEXITSTATUS(t_status) != 0)
        fail_msg("%s: T ended with 0x%x", step, t_status);
    /* what T sent all arrived, intact and in order */
    double done_by = tu_now_s() + 10;
    while (r.rx.complete < t_msgs && tu_now_s() < done_by)
        if (ivshm_ep_progress(r.ep) == 0)
            ivshm_ep_wait(r.ep, 5);
    if (r.rx.errors || r.rx.complete != t_msgs)
        fail_msg("%s: R has %llu of %u from T, %u errors (%s)", step,
                 (unsigned long long)r.rx.complete, t_msgs, r.rx.errors,
                 r.rx.first_error);
    /* what K published before it died is still delivered (its box is
     * drained before it is released), some of it only once a gap it left
     * is waited out or its stuck claim given up (one lease timeout): all
     * of that is K's, so R serves it as K's before the index may mean a
     * new process (the test tells the two lives apart only by time) */
    double quiet = tu_now_s() + 1.0;
    while (tu_now_s() < quiet)
        if (ivshm_ep_progress(r.ep) == 0)
            ivshm_ep_wait(r.ep, 5);
    /* K's index serves a new process */
    r.k_replaced = true;
    pid_t k2 = fork();
    if (k2 == 0)
        run_k2();
    done_by = tu_now_s() + 20;
    while (r.rx_new.complete < 20 && tu_now_s() < done_by)
        if (ivshm_ep_progress(r.ep) == 0)
            ivshm_ep_wait(r.ep, 5);
    kill(k2, SIGKILL);
    waitpid(k2, NULL, 0);
    if (r.rx_new.errors || r.rx_new.complete != 20)
        fail_msg("%s: the new owner of K's index got %llu of 20 through "
                 "(%s)",
                 step, (unsigned long long)r.rx_new.complete,
                 r.rx_new.first_error);
    /* the region is clean once the dead are collected */
    usleep(100 * 1000);
    ivshm_gc(r.r, NULL);
    int problems = 0;
    ivshm_region_check(r.r, report, &problems);
    ivshm_domain_valid(r.d, report, &problems);
    if (problems)
        fail_msg("%s: %d problems in the region after the kill", step,
                 problems);
    ivshm_ep_destroy(r.ep);
    ivshm_domain_leave(r.d);
    ivshm_region_close(r.r);
    tr_rx_free(&r.rx);
    tr_rx_free(&r.rx_new);
    unlink(path);
    alarm(0);
}

#define STEP_TEST(name)                                                      \
    static void test_kill_at_##name(void **state)                            \
    {                                                                        \
        (void)state;                                                         \
        kill_at(#name);                                                      \
    }
STEP_TEST(claim)
STEP_TEST(lend)
STEP_TEST(publish)
STEP_TEST(grant)
STEP_TEST(ack)
STEP_TEST(create)
STEP_TEST(destroy)
STEP_TEST(renew)

int main(void)
{
    const char *e = getenv("IVSHM_KILL_MSGS");
    t_msgs = e ? (uint32_t)strtoul(e, NULL, 0) : 1000;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_at_claim),
        cmocka_unit_test(test_kill_at_lend),
        cmocka_unit_test(test_kill_at_publish),
        cmocka_unit_test(test_kill_at_grant),
        cmocka_unit_test(test_kill_at_ack),
        cmocka_unit_test(test_kill_at_create),
        cmocka_unit_test(test_kill_at_destroy),
        cmocka_unit_test(test_kill_at_renew),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
