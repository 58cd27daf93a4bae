/*
 * guest_test: the programs that run inside the QEMU test guests (built
 * static, see tests/qemu/test_qemu.sh). Each subcommand exits 0 on success;
 * on failure it prints why and exits with the ivshm status (or 1).
 *
 *   probe URI            open and validate the region, print what it is
 *   cross URI1 URI2      both URIs map the same memory (sysfs vs driver)
 *   chan ROLE N          ROLE a|b: N verified messages each way through
 *                        channels of the job $IVSHM_TEST_JOB ($IVSHM_REGION)
 *   doorbell-wait N      block in ivshm_ep_wait for N messages; succeed only
 *                        if doorbell interrupts woke us
 *   doorbell-fd N        the same through the caller's own poll loop
 *                        (ivshm_ep_event_fd/ivshm_ep_arm, as UCT's event
 *                        fd): succeed only if poll() on the fd woke us
 *   doorbell-send N      send N messages, 300 ms apart, to a blocked peer
 *   raw-wait             claim a vector, tell the peer (IVPosition, vector)
 *                        over a channel, block in read() on the device
 *   raw-ring             ring that vector through the mmapped register page
 *   hold-map SECONDS     keep /dev/ivshmem0 mapped (for the rmmod check)
 *   unplug-victim        map the device, block in read(), and report what
 *                        the process sees once the device is unbound
 *   unplug-guarded       open dev:auto through libivshm with the region
 *                        guard, wait until the device is gone, touch the
 *                        region: the guard ends us (IVSHM_EXIT_REGION_GONE)
 */
#include <ivshm/channel.h>
#include <ivshm/ivshm.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../chan_traffic.h"
#include "ivshmem_uapi.h"

#define TAG_DONE 0xfffffff0u
#define TAG_DB 0xfffffff1u

/* the job (channel domain) of one step: steps must not meet each other's
 * endpoints */
static const char *job(void)
{
    const char *j = getenv("IVSHM_TEST_JOB");
    return j && *j ? j : "qemu";
}

static int die(ivshm_status_t st, const char *what)
{
    fprintf(stderr, "guest_test: %s: %s\n", what, ivshm_last_error());
    return st ? (int)st : 1;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int cmd_probe(const char *uri)
{
    ivshm_region_t *r;
    ivshm_status_t st = ivshm_region_open(uri, 0, &r);
    if (st != IVSHM_OK)
        return die(st, "probe");
    ivshm_region_info_t inf;
    if ((st = ivshm_region_info(r, &inf)) != IVSHM_OK)
        return die(st, "info");
    printf("probe: %s is a valid region, %" PRIu64 " bytes\n",
           ivshm_region_uri(r), inf.size);
    ivshm_region_close(r);
    return 0;
}

static int cmd_cross(const char *u1, const char *u2)
{
    ivshm_region_t *a, *b;
    ivshm_status_t st;
    if ((st = ivshm_region_open(u1, 0, &a)) != IVSHM_OK)
        return die(st, u1);
    if ((st = ivshm_region_open(u2, 0, &b)) != IVSHM_OK)
        return die(st, u2);
    if ((st = ivshm_attach(a)) != IVSHM_OK)
        return die(st, "attach");
    uint64_t off;
    if ((st = ivshm_alloc(a, 4096, &off)) != IVSHM_OK)
        return die(st, "alloc");
    unsigned char *pa = (unsigned char *)ivshm_region_base(a) + off;
    volatile unsigned char *pb = (unsigned char *)ivshm_region_base(b) + off;
    int bad = 0;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 4096; i++)
            pa[i] = (unsigned char)(i * 7 + round * 13 + 1);
        for (int i = 0; i < 4096; i++)
            bad += pb[i] != (unsigned char)(i * 7 + round * 13 + 1);
    }
    ivshm_free(a, off);
    ivshm_region_close(b);
    ivshm_region_close(a);
    if (bad) {
        fprintf(stderr, "cross: %d bytes differ between %s and %s\n", bad,
                u1, u2);
        return 1;
    }
    printf("cross: %s and %s map the same memory\n", u1, u2);
    return 0;
}

/* ---- channel plumbing shared by the two-guest commands ---- */

struct ctx {
    ivshm_region_t *r;
    ivshm_domain_t *d;
    ivshm_ep_t *ep;
    uint32_t peer;
    struct tr_rx rx;
    int peer_done;
    uint32_t db_word[2]; /* TAG_DB payload: IVPosition, vector */
    int got_db;
};

static void on_msg(void *arg, const ivshm_msg_t *m)
{
    struct ctx *c = arg;
    if (m->tag == TAG_DONE)
        c->peer_done = 1;
    else if (m->tag == TAG_DB && m->len == sizeof(c->db_word)) {
        memcpy(c->db_word, m->data, sizeof(c->db_word));
        c->got_db = 1;
    } else
        tr_rx_piece(&c->rx, m->sender, m);
}

/* Role a is endpoint 0, b is endpoint 1; waits up to 120 s for the peer. */
static int open_pair(struct ctx *c, int me)
{
    memset(c, 0, sizeof(*c));
    tr_rx_init(&c->rx);
    ivshm_status_t st;
    if ((st = ivshm_region_open(NULL, 0, &c->r)) != IVSHM_OK)
        return die(st, "open");
    if ((st = ivshm_attach(c->r)) != IVSHM_OK)
        return die(st, "attach");
    if ((st = ivshm_domain_join(c->r, job(), 2, &c->d)) != IVSHM_OK)
        return die(st, "domain");
    if ((st = ivshm_ep_create(c->d, me, NULL, on_msg, c, &c->ep)) != IVSHM_OK)
        return die(st, "endpoint");
    uint8_t addr[IVSHM_EP_ADDR_SIZE];
    uint64_t deadline = now_ms() + 120000;
    while ((st = ivshm_domain_address(c->d, (uint32_t)!me, addr)) != IVSHM_OK) {
        if (now_ms() > deadline)
            return die(st, "the peer guest never showed up");
        usleep(20000);
    }
    if ((st = ivshm_ep_connect(c->ep, addr, sizeof(addr), &c->peer)) != IVSHM_OK)
        return die(st, "connect");
    return 0;
}

/* Sends DONE and waits for the peer's, so that nobody frees memory the
 * other still reads. */
static int close_pair(struct ctx *c)
{
    ivshm_status_t st = ivshm_ep_send(c->ep, c->peer, TAG_DONE, "", 0);
    uint64_t deadline = now_ms() + 120000;
    while (st == IVSHM_OK && !c->peer_done && now_ms() < deadline)
        ivshm_ep_progress(c->ep);
    ivshm_ep_stats_t s;
    ivshm_ep_stats(c->ep, &s);
    ivshm_ep_destroy(c->ep);
    ivshm_domain_leave(c->d);
    ivshm_region_close(c->r);
    tr_rx_free(&c->rx);
    if (!c->peer_done) {
        fprintf(stderr, "guest_test: the peer never said done\n");
        return 1;
    }
    return 0;
}

static int cmd_chan(const char *role, int n)
{
    struct ctx c;
    int me = strcmp(role, "a") == 0 ? 0 : 1;
    int rc = open_pair(&c, me);
    if (rc)
        return rc;
    static unsigned char buf[TR_MAX_SIZE];
    uint64_t bytes = 0, t0 = now_ms();
    for (int i = 0; i < n; i++) {
        size_t len = tr_size((uint32_t)me, (uint32_t)i);
        tr_fill((uint32_t)me, (uint32_t)i, buf, len);
        ivshm_status_t st = ivshm_ep_send(c.ep, c.peer, (uint32_t)i, buf, len);
        if (st != IVSHM_OK)
            return die(st, "send");
        bytes += len;
        ivshm_ep_progress(c.ep);
    }
    uint64_t deadline = now_ms() + 120000;
    while (c.rx.complete < (uint64_t)n && !c.rx.errors && now_ms() < deadline)
        ivshm_ep_progress(c.ep);
    printf("chan %s: sent %d messages (%" PRIu64 " bytes), received %" PRIu64
           " verified, %u errors, %" PRIu64 " ms\n",
           role, n, bytes, c.rx.complete, c.rx.errors, now_ms() - t0);
    if (c.rx.errors || c.rx.complete != (uint64_t)n) {
        fprintf(stderr, "chan: %s\n",
                c.rx.errors ? c.rx.first_error : "timed out");
        return 1;
    }
    return close_pair(&c);
}

static int cmd_doorbell_wait(int n)
{
    struct ctx c;
    int rc = open_pair(&c, 1);
    if (rc)
        return rc;
    ivshm_ep_stats_t s;
    ivshm_ep_stats(c.ep, &s);
    if (s.doorbell_vector < 0) {
        fprintf(stderr, "doorbell-wait: no doorbell vector for the endpoint\n");
        return 1;
    }
    uint64_t t0 = now_ms(), waits = 0;
    while (c.rx.complete < (uint64_t)n && !c.rx.errors) {
        if (ivshm_ep_wait(c.ep, 60000) != IVSHM_OK) {
            fprintf(stderr, "doorbell-wait: no wake-up within 60 s\n");
            return 1;
        }
        waits++;
        while (ivshm_ep_progress(c.ep) > 0)
            ;
    }
    ivshm_ep_stats(c.ep, &s);
    printf("doorbell-wait: %" PRIu64 " messages after %" PRIu64
           " waits in %" PRIu64 " ms; vector %d, %" PRIu64 " interrupts\n",
           c.rx.complete, waits, now_ms() - t0, s.doorbell_vector,
           s.doorbell_irqs);
    if (c.rx.errors || s.doorbell_irqs == 0) {
        fprintf(stderr, "doorbell-wait: %s\n",
                c.rx.errors ? c.rx.first_error
                            : "woken without any interrupt");
        return 1;
    }
    return close_pair(&c);
}

static int cmd_doorbell_fd(int n)
{
    struct ctx c;
    int rc = open_pair(&c, 1);
    if (rc)
        return rc;
    int fd = ivshm_ep_event_fd(c.ep);
    if (fd < 0) {
        fprintf(stderr, "doorbell-fd: the endpoint has no event fd\n");
        return 1;
    }
    uint64_t t0 = now_ms(), sleeps = 0, woken = 0, busy = 0;
    while (c.rx.complete < (uint64_t)n && !c.rx.errors) {
        ivshm_status_t st = ivshm_ep_arm(c.ep);
        if (st == IVSHM_OK) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            sleeps++;
            if (poll(&pfd, 1, 60000) != 1 || !(pfd.revents & POLLIN)) {
                fprintf(stderr, "doorbell-fd: no wake-up within 60 s\n");
                return 1;
            }
            woken++;
        } else if (st == IVSHM_ERR_AGAIN) {
            busy++;
        } else {
            return die(st, "arm");
        }
        while (ivshm_ep_progress(c.ep) > 0)
            ;
    }
    printf("doorbell-fd: %" PRIu64 " messages in %" PRIu64 " ms; %" PRIu64
           " sleeps on the fd, %" PRIu64 " woken by it, %" PRIu64
           " arms said busy\n",
           c.rx.complete, now_ms() - t0, sleeps, woken, busy);
    /* 300 ms between sends: every message but none must come by a ring */
    if (c.rx.errors || woken < (uint64_t)n - 1) {
        fprintf(stderr, "doorbell-fd: %s\n",
                c.rx.errors ? c.rx.first_error
                            : "messages came without the fd waking us");
        return 1;
    }
    return close_pair(&c);
}

static int cmd_doorbell_send(int n)
{
    struct ctx c;
    int rc = open_pair(&c, 0);
    if (rc)
        return rc;
    static unsigned char buf[TR_MAX_SIZE];
    for (int i = 0; i < n; i++) {
        usleep(300000); /* the receiver is asleep in the kernel by now */
        size_t len = tr_size(0, (uint32_t)i);
        tr_fill(0, (uint32_t)i, buf, len);
        ivshm_status_t st = ivshm_ep_send(c.ep, c.peer, (uint32_t)i, buf, len);
        if (st != IVSHM_OK)
            return die(st, "send");
    }
    ivshm_ep_stats_t s;
    ivshm_ep_stats(c.ep, &s);
    printf("doorbell-send: %d messages, %" PRIu64 " wake-ups rung\n", n,
           s.wakeups);
    return close_pair(&c);
}

static int open_dev(int *fd, struct ivshmem_info *info)
{
    *fd = open("/dev/ivshmem0", O_RDWR | O_CLOEXEC);
    if (*fd < 0 || ioctl(*fd, IVSHMEM_IOC_INFO, info) < 0) {
        perror("guest_test: /dev/ivshmem0");
        return 1;
    }
    /* the channels' ordering needs write-back (the driver's default) */
    if (!(info->flags & IVSHMEM_F_BAR2_WB)) {
        fprintf(stderr, "guest_test: BAR2 is not mapped write-back (flags "
                        "0x%x)\n", info->flags);
        return 1;
    }
    return 0;
}

static int cmd_raw_wait(void)
{
    int fd;
    struct ivshmem_info info;
    if (open_dev(&fd, &info))
        return 1;
    int32_t vec = -1;
    if (ioctl(fd, IVSHMEM_IOC_CLAIM_VECTOR, &vec) < 0) {
        perror("guest_test: claim vector");
        return 1;
    }
    /* a second claim of the same vector by another file is refused */
    int fd2 = open("/dev/ivshmem0", O_RDWR);
    int32_t same = vec;
    if (ioctl(fd2, IVSHMEM_IOC_CLAIM_VECTOR, &same) == 0 || errno != EBUSY) {
        fprintf(stderr, "raw-wait: vector %d claimed twice\n", vec);
        return 1;
    }
    close(fd2);
    struct ctx c;
    int rc = open_pair(&c, 1);
    if (rc)
        return rc;
    uint32_t w[2] = {info.ivposition, (uint32_t)vec};
    ivshm_ep_send(c.ep, c.peer, TAG_DB, w, sizeof(w));
    uint64_t t0 = now_ms(), cnt = 0;
    ssize_t n = read(fd, &cnt, sizeof(cnt)); /* blocks until rung */
    printf("raw-wait: IVPosition %u vector %d: read() returned %zd, %" PRIu64
           " interrupt(s) after %" PRIu64 " ms\n",
           info.ivposition, vec, n, cnt, now_ms() - t0);
    close(fd);
    if (n != sizeof(cnt) || cnt == 0)
        return 1;
    return close_pair(&c);
}

static int cmd_raw_ring(void)
{
    int fd;
    struct ivshmem_info info;
    if (open_dev(&fd, &info))
        return 1;
    if (!(info.flags & IVSHMEM_F_REGS_MMAP)) {
        fprintf(stderr, "raw-ring: BAR0 is not page-sized: boot with "
                        "pci=resource_alignment\n");
        return 1;
    }
    volatile uint32_t *regs = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                   MAP_SHARED, fd, (off_t)info.regs_offset);
    if (regs == MAP_FAILED) {
        perror("guest_test: mmap registers");
        return 1;
    }
    struct ctx c;
    int rc = open_pair(&c, 0);
    if (rc)
        return rc;
    uint64_t deadline = now_ms() + 60000;
    while (!c.got_db && now_ms() < deadline)
        ivshm_ep_progress(c.ep);
    if (!c.got_db) {
        fprintf(stderr, "raw-ring: the peer never sent its doorbell\n");
        return 1;
    }
    usleep(300000); /* let it block in read() */
    regs[3] = (c.db_word[0] << 16) | (c.db_word[1] & 0xffff); /* Doorbell */
    printf("raw-ring: rang peer %u vector %u through the register page "
           "(our IVPosition %u)\n",
           c.db_word[0], c.db_word[1], regs[2]);
    return close_pair(&c);
}

static int cmd_hold_map(int seconds)
{
    int fd;
    struct ivshmem_info info;
    if (open_dev(&fd, &info))
        return 1;
    void *p = mmap(NULL, info.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
    if (p == MAP_FAILED) {
        perror("guest_test: mmap");
        return 1;
    }
    close(fd); /* only the mapping holds the device now */
    printf("hold-map: mapped %llu bytes\n", (unsigned long long)info.shm_size);
    fflush(stdout);
    sleep((unsigned)seconds);
    return 0;
}

static sigjmp_buf bus_jmp;
static void on_sigbus(int sig)
{
    (void)sig;
    siglongjmp(bus_jmp, 1);
}

static int cmd_unplug_victim(void)
{
    int fd;
    struct ivshmem_info info;
    if (open_dev(&fd, &info))
        return 1;
    volatile unsigned char *p = mmap(NULL, info.shm_size,
                                     PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        perror("guest_test: mmap");
        return 1;
    }
    unsigned char before = p[0];
    printf("unplug-victim: mapped, blocking in read()\n");
    fflush(stdout);
    uint64_t cnt;
    ssize_t n = read(fd, &cnt, sizeof(cnt));
    int err = errno;
    printf("unplug-victim: read() returned %zd (%s)\n", n,
           n < 0 ? strerror(err) : "data");
    struct sigaction sa = {.sa_handler = on_sigbus};
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGSEGV, &sa, NULL);
    if (sigsetjmp(bus_jmp, 1) == 0) {
        unsigned char now = p[0];
        printf("unplug-victim: the mapping still reads (%u, was %u)\n", now,
               before);
        return 1;
    }
    printf("unplug-victim: the mapping is revoked (SIGBUS on access)\n");
    struct ivshmem_info again;
    if (ioctl(fd, IVSHMEM_IOC_INFO, &again) == 0 || errno != ENODEV) {
        printf("unplug-victim: ioctl on the removed device did not fail "
               "with ENODEV\n");
        return 1;
    }
    close(fd);
    return n < 0 && err == ENODEV ? 0 : 1;
}

static int cmd_unplug_guarded(void)
{
    ivshm_region_t *r;
    ivshm_status_t st = ivshm_region_open("dev:auto", 0, &r);
    if (st != IVSHM_OK)
        return die(st, "unplug-guarded: open");
    if ((st = ivshm_region_guard(r)) != IVSHM_OK)
        return die(st, "unplug-guarded: guard");
    volatile unsigned char *p = ivshm_region_base(r);
    printf("unplug-guarded: mapped and guarded\n");
    fflush(stdout);
    /* a loaded TCG host can take seconds to unbind: wait up to 60 s, and
     * never touch the region while the device may still be there (the
     * region is shared with the other guest) */
    int i;
    for (i = 0; i < 2400 && access("/dev/ivshmem0", F_OK) == 0; i++)
        usleep(25 * 1000);
    if (i == 2400) {
        printf("unplug-guarded: the device was not removed within 60 s\n");
        return 2;
    }
    printf("unplug-guarded: the device is gone; touching the region\n");
    fflush(stdout);
    /* a read: revoked, it faults (SIGBUS, the guard's exit); still mapped,
     * it changes nothing of the shared region */
    unsigned char seen = p[64];
    printf("unplug-guarded: the region is still mapped after the unplug "
           "(read %u)\n", seen);
    return 1;
}

int main(int argc, char **argv)
{
    const char *cmd = argc > 1 ? argv[1] : "";
    int n = argc > 2 ? atoi(argv[2]) : 0;
    if (!strcmp(cmd, "probe") && argc == 3)
        return cmd_probe(argv[2]);
    if (!strcmp(cmd, "cross") && argc == 4)
        return cmd_cross(argv[2], argv[3]);
    if (!strcmp(cmd, "chan") && argc == 4)
        return cmd_chan(argv[2], atoi(argv[3]));
    if (!strcmp(cmd, "doorbell-wait") && argc == 3)
        return cmd_doorbell_wait(n);
    if (!strcmp(cmd, "doorbell-fd") && argc == 3)
        return cmd_doorbell_fd(n);
    if (!strcmp(cmd, "doorbell-send") && argc == 3)
        return cmd_doorbell_send(n);
    if (!strcmp(cmd, "raw-wait"))
        return cmd_raw_wait();
    if (!strcmp(cmd, "raw-ring"))
        return cmd_raw_ring();
    if (!strcmp(cmd, "unplug-victim"))
        return cmd_unplug_victim();
    if (!strcmp(cmd, "unplug-guarded"))
        return cmd_unplug_guarded();
    if (!strcmp(cmd, "hold-map") && argc == 3)
        return cmd_hold_map(n);
    fprintf(stderr, "usage: see the comment at the top of guest_test.c\n");
    return 2;
}
