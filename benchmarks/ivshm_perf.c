/*
 * ivshm-lat / ivshm-bw: primitive channel benchmarks in the manner of
 * perftest's ib_send_lat / ib_send_bw. Two processes (as two VMs would)
 * map one region, each on its own core, and measure, in the same run:
 *   lat: raw cache-line ping-pong (over 64 line pairs in turn, and on
 *        one pair), then channel ping-pong per size;
 *   bw:  single-core memcpy, then channel streaming per size (a window of
 *        sends, one acknowledgement), also from a buffer in the region
 *        (single copy).
 * Medians and percentiles are over batches; ratios against the physical
 * limits are printed with the targets.
 *
 *   ivshm-lat [--region URI] [--max SIZE] [--iters N] [--cpus A,B] [--csv F]
 *   ivshm-bw  [--region URI] [--max SIZE] [--reps N]  [--cpus A,B] [--csv F]
 */
#include "config.h"

#include <ivshm/channel.h>

#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef HAVE_HWLOC
#include <hwloc.h>
#endif

#define TAG_DATA 1
#define TAG_SYNC 2
#define TAG_ACK 3

static struct {
    const char *region;
    size_t max;
    long iters;
    int cpus[2];
    const char *csv;
    bool bw;
} opt = {NULL, 4u << 20, 0, {-1, -1}, NULL, false};

struct rank {
    int id;
    ivshm_region_t *r;
    ivshm_domain_t *d;
    ivshm_ep_t *ep;
    uint32_t peer;
    char *rbuf;
    volatile uint64_t got_bytes; /* of the data message in flight */
    volatile uint64_t msgs_done; /* complete data messages */
    volatile uint64_t syncs;
    uint64_t syncs_sent;
    volatile uint64_t acks;
    /* running targets: a message may arrive before we start waiting for it
     * (inside another wait), so never derive a target from a counter */
    uint64_t data_target, ack_target;
    uint64_t raw_seq; /* the raw ping-pong's last value, both sides in step */
};

static void on_msg(void *arg, const ivshm_msg_t *m)
{
    struct rank *k = arg;
    if (m->tag == TAG_SYNC) {
        k->syncs++;
        return;
    }
    if (m->tag == TAG_ACK) {
        k->acks++;
        return;
    }
    /* the receive side's one copy, into the user buffer */
    memcpy(k->rbuf + m->offset, m->data, m->len);
    if (m->offset + m->len == m->total)
        k->msgs_done++;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The region this run formatted itself (no --region), removed at exit. */
static char own_region[64];
static pid_t own_region_pid; /* the process that formatted it */
static void remove_own_region(void)
{
    if (own_region[0] && getpid() == own_region_pid) {
        unlink(own_region + 5);
        own_region_pid = 0; /* once */
    }
}

static void die(const char *what, ivshm_status_t st)
{
    fprintf(stderr, "%s: %s: %s\n", what, ivshm_strerror(st),
            ivshm_last_error());
    exit(1);
}

/* This process runs on CPU cpu from now on, or it says why rank id
 * cannot and returns false. */
static bool move_to_cpu(int cpu, int id)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu < CPU_SETSIZE)
        CPU_SET(cpu, &set);
    if (cpu < CPU_SETSIZE && sched_setaffinity(0, sizeof(set), &set) == 0)
        return true;
    fprintf(stderr, "%s: rank %d cannot run on CPU %d: %s\n",
            program_invocation_short_name, id, cpu,
            cpu >= CPU_SETSIZE ? "no such CPU" : strerror(errno));
    return false;
}

/* Binds to the core of rank `id`: two distinct physical cores (hwloc), or
 * the CPUs given with --cpus. */
static void bind_rank(int id)
{
    int cpu = opt.cpus[id];
#ifdef HAVE_HWLOC
    if (cpu < 0) {
        hwloc_topology_t t;
        hwloc_topology_init(&t);
        hwloc_topology_load(t);
        int ncores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
        if (ncores >= 2) {
            hwloc_obj_t core = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, id);
            hwloc_obj_t pu = hwloc_get_obj_inside_cpuset_by_type(
                t, core->cpuset, HWLOC_OBJ_PU, 0);
            if (pu && hwloc_set_cpubind(t, pu->cpuset, HWLOC_CPUBIND_PROCESS) == 0) {
                hwloc_topology_destroy(t);
                return;
            }
        }
        hwloc_topology_destroy(t);
    }
#endif
    bool asked = cpu >= 0;
    if (!asked)
        cpu = id;
    /* a figure taken unpinned is not the figure asked for: say so, and
     * stop where the CPUs were given */
    if (!move_to_cpu(cpu, id) && asked)
        exit(2);
}

/* The CPUs given with --cpus, tried before the ranks start (a rank that
 * could not run on its CPU would leave the other waiting for it): this
 * process moves to each in turn, as its rank will, then back. */
static void check_cpus(void)
{
    cpu_set_t saved;
    if (sched_getaffinity(0, sizeof(saved), &saved) != 0)
        return; /* bind_rank judges each rank's own */
    for (int id = 0; id < 2; id++)
        if (opt.cpus[id] >= 0 && !move_to_cpu(opt.cpus[id], id))
            exit(2);
    sched_setaffinity(0, sizeof(saved), &saved);
}

/* A buffer of at least `bytes`, page-aligned, its size whole pages (as
 * aligned_alloc asks). */
static char *page_alloc(size_t bytes)
{
    char *b = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
    if (!b) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return b;
}

static void progress(struct rank *k) { ivshm_ep_progress(k->ep); }

/* Barrier: the n-th sync we send matches the peer's n-th, whenever it
 * arrived (it may come early, inside another wait). */
static void sync_peer(struct rank *k)
{
    ivshm_status_t st = ivshm_ep_send(k->ep, k->peer, TAG_SYNC, "", 0);
    if (st != IVSHM_OK)
        die("sync", st);
    k->syncs_sent++;
    while (k->syncs < k->syncs_sent)
        progress(k);
}

static void setup_rank(struct rank *k, int id, const char *job)
{
    memset(k, 0, sizeof(*k));
    k->id = id;
    bind_rank(id);
    ivshm_status_t st;
    if ((st = ivshm_region_open(opt.region, 0, &k->r)) != IVSHM_OK)
        die("open", st);
    if ((st = ivshm_attach(k->r)) != IVSHM_OK)
        die("attach", st);
    if ((st = ivshm_domain_join(k->r, job, 4, &k->d)) != IVSHM_OK)
        die("domain", st);
    ivshm_ep_config_t cfg;
    ivshm_ep_config_init(&cfg);
    if ((st = ivshm_ep_create(k->d, id, &cfg, on_msg, k, &k->ep)) != IVSHM_OK)
        die("endpoint", st);
    k->rbuf = page_alloc(opt.max + 4096);
    memset(k->rbuf, 0, opt.max);
    uint8_t addr[IVSHM_EP_ADDR_SIZE];
    for (int i = 0;; i++) {
        if (ivshm_domain_address(k->d, 1 - id, addr) == IVSHM_OK &&
            ivshm_ep_connect(k->ep, addr, sizeof(addr), &k->peer) == IVSHM_OK)
            break;
        if (i > 200000)
            die("connect", IVSHM_ERR_NOT_FOUND);
        usleep(100);
    }
    sync_peer(k);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct dist {
    double p50, p5, p95, p99;
};

static struct dist summarize(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    struct dist d = {v[n / 2], v[n * 5 / 100], v[n * 95 / 100],
                     v[n * 99 / 100 < n ? n * 99 / 100 : n - 1]};
    return d;
}

/* ---- latency ---- */

#define PP_BATCHES 101
#define PP_BATCH 200

/* The raw ping-pong's line pairs: pair n's two lines at RAW_PAIR_BYTES * n
 * and 128 bytes on (adjacent line prefetch). */
#define RAW_PAIRS 64
#define RAW_PAIR_BYTES 256
/* The walk's order: pair (RAW_STEP * j) % RAW_PAIRS at its j-th step (odd:
 * every pair once a round), so that no two steps in a row touch the next
 * lines up (an ascending walk cost 17 % more than one pair on the 2-CPU AMD
 * machine, where lines have no place of their own: the prefetchers). */
#define RAW_STEP 37

/* Raw ping-pong: one side stores a counter on a line, the other answers on
 * a line 128 bytes on, each spinning on the other's. With pairs == 1 it is
 * the ping-pong of one place; with RAW_PAIRS it walks the pairs in the
 * order above, one step a round trip. One place's time depends on where
 * its lines live (on a mesh each line has its home in one slice of the
 * cache: 172-242 ns between places of one mapping on the 16-CPU Xeon), and
 * a channel's messages take many places (its entries move through its
 * boxes' lines), so the walk, their mean, is the reference its ratio is
 * judged by (docs/channels.md, "The raw ping-pong's places"). One-way time
 * per batch average, in ns. */
static struct dist raw_pingpong(struct rank *k, char *area, int pairs)
{
    char *at[RAW_PAIRS];
    for (int j = 0; j < pairs; j++)
        at[j] = area + (size_t)(RAW_STEP * j % pairs) * RAW_PAIR_BYTES;
    double v[PP_BATCHES];
    int j = 0;
    for (int bt = 0; bt < PP_BATCHES; bt++) {
        uint64_t t0 = now_ns();
        for (int it = 0; it < PP_BATCH; it++) {
            uint64_t i = ++k->raw_seq; /* never a value a line held before */
            _Atomic uint64_t *a = (_Atomic uint64_t *)at[j];
            _Atomic uint64_t *b = (_Atomic uint64_t *)(at[j] + 128);
            if (++j == pairs)
                j = 0;
            if (k->id == 0) {
                atomic_store_explicit(a, i, memory_order_release);
                while (atomic_load_explicit(b, memory_order_acquire) != i)
                    ;
            } else {
                while (atomic_load_explicit(a, memory_order_acquire) != i)
                    ;
                atomic_store_explicit(b, i, memory_order_release);
            }
        }
        v[bt] = (double)(now_ns() - t0) / PP_BATCH / 2;
    }
    return summarize(v, PP_BATCHES);
}

static struct dist chan_pingpong(struct rank *k, char *sbuf, size_t size,
                                 long iters, int batches)
{
    double *v = malloc(sizeof(double) * (size_t)batches);
    for (int bt = 0; bt < batches; bt++) {
        uint64_t t0 = now_ns();
        for (long it = 0; it < iters; it++) {
            uint64_t want = ++k->data_target;
            if (k->id == 0) {
                ivshm_ep_send(k->ep, k->peer, TAG_DATA, sbuf, size);
                while (k->msgs_done < want)
                    progress(k);
            } else {
                while (k->msgs_done < want)
                    progress(k);
                ivshm_ep_send(k->ep, k->peer, TAG_DATA, sbuf, size);
            }
        }
        v[bt] = (double)(now_ns() - t0) / (double)iters / 2;
    }
    struct dist d = summarize(v, batches);
    free(v);
    return d;
}

static double target_ratio_lat = 1.3, target_ratio_bw = 0.5;

static int run_lat(struct rank *k, FILE *csv)
{
    ivshm_job_t *pj;
    ivshm_status_t st = ivshm_job_join(
        k->r, "bench-pingpong", RAW_PAIRS * RAW_PAIR_BYTES, &pj);
    if (st != IVSHM_OK)
        die("job", st);
    /* a job of that name left by an older ivshm-lat keeps its smaller area */
    if (ivshm_job_area_size(pj) < RAW_PAIRS * RAW_PAIR_BYTES) {
        fprintf(stderr, "job bench-pingpong: its area has %llu bytes, the "
                        "raw ping-pong needs %d (a job of an older ivshm-lat "
                        "in this region?)\n",
                (unsigned long long)ivshm_job_area_size(pj),
                RAW_PAIRS * RAW_PAIR_BYTES);
        exit(1);
    }
    char *area = (char *)ivshm_region_base(k->r) + ivshm_job_area_off(pj);
    sync_peer(k);
    raw_pingpong(k, area, 1); /* warm-up */
    struct dist one = raw_pingpong(k, area, 1);
    raw_pingpong(k, area, RAW_PAIRS); /* warm-up */
    struct dist raw = raw_pingpong(k, area, RAW_PAIRS);
    sync_peer(k);
    char *sbuf = page_alloc(opt.max + 4096);
    memset(sbuf, 0x5a, opt.max);
    if (k->id == 0) {
        printf("# ivshm-lat: one-way latency, ns (batch medians, %d batches)\n",
               PP_BATCHES);
        printf("# raw cache-line ping-pong: p50 %.1f  p5 %.1f  p95 %.1f  "
               "p99 %.1f  (%d line pairs in turn)\n",
               raw.p50, raw.p5, raw.p95, raw.p99, RAW_PAIRS);
        printf("# raw ping-pong, one pair: p50 %.1f  p5 %.1f  p95 %.1f  "
               "p99 %.1f  (%.2f x the walk)\n",
               one.p50, one.p5, one.p95, one.p99, one.p50 / raw.p50);
        printf("%10s %10s %10s %10s %10s %8s %8s\n", "bytes", "p50", "p5",
               "p95", "p99", "x raw", "x 1 pair");
        if (csv)
            fprintf(csv,
                    "bench,bytes,p50_ns,p5_ns,p95_ns,p99_ns,ratio_raw,"
                    "ratio_one_pair\n"
                    "raw-pingpong,8,%.2f,%.2f,%.2f,%.2f,1,%.3f\n"
                    "raw-pingpong-one-pair,8,%.2f,%.2f,%.2f,%.2f,%.3f,1\n",
                    raw.p50, raw.p5, raw.p95, raw.p99, raw.p50 / one.p50,
                    one.p50, one.p5, one.p95, one.p99, one.p50 / raw.p50);
    }
    double lat8 = 0;
    for (size_t s = 1; s <= opt.max; s *= 2) {
        long iters = opt.iters ? opt.iters : (s <= 4096 ? 100 : (long)(2000000 / s) + 2);
        int batches = s <= 65536 ? 51 : 11;
        chan_pingpong(k, sbuf, s, iters / 4 + 1, 3); /* warm-up */
        struct dist d = chan_pingpong(k, sbuf, s, iters, batches);
        if (s == 8)
            lat8 = d.p50;
        if (k->id == 0) {
            printf("%10zu %10.1f %10.1f %10.1f %10.1f %8.2f %8.2f\n", s,
                   d.p50, d.p5, d.p95, d.p99, d.p50 / raw.p50,
                   d.p50 / one.p50);
            if (csv)
                fprintf(csv, "ivshm-lat,%zu,%.2f,%.2f,%.2f,%.2f,%.3f,%.3f\n",
                        s, d.p50, d.p5, d.p95, d.p99, d.p50 / raw.p50,
                        d.p50 / one.p50);
        }
        sync_peer(k);
    }
    if (k->id == 0) {
        double ratio = lat8 / raw.p50;
        printf("# 8-byte one-way latency %.1f ns = %.2f x raw ping-pong "
               "(%.1f ns, %d line pairs in turn; %.2f x one pair's %.1f "
               "ns); target <= %.2f: %s\n",
               lat8, ratio, raw.p50, RAW_PAIRS, lat8 / one.p50, one.p50,
               target_ratio_lat, ratio <= target_ratio_lat ? "met" : "MISSED");
    }
    ivshm_job_leave(pj);
    free(sbuf);
    return 0;
}

/* ---- bandwidth ---- */

static double memcpy_bw(size_t s, int reps)
{
    char *src = page_alloc(s + 4096), *dst = page_alloc(s + 4096);
    memset(src, 1, s);
    memset(dst, 2, s);
    double *v = malloc(sizeof(double) * (size_t)reps);
    int inner = (int)(64u << 20) / (int)s + 1;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < inner; i++) {
            memcpy(dst, src, s);
            __asm__ __volatile__("" ::"r"(dst) : "memory");
        }
        v[r] = (double)s * inner / (double)(now_ns() - t0); /* GB/s */
    }
    qsort(v, (size_t)reps, sizeof(*v), cmp_double);
    double m = v[reps / 2];
    free(v);
    free(src);
    free(dst);
    return m;
}

/* Streams `window` messages, then waits for one acknowledgement. */
static double chan_bw(struct rank *k, const char *sbuf, uint64_t region_off,
                      size_t s, int reps)
{
    int window = s <= 65536 ? 64 : 16;
    double *v = malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = now_ns();
        if (k->id == 0) {
            uint64_t want = ++k->ack_target;
            uint64_t ticket = 0;
            for (int w = 0; w < window; w++) {
                /* the region buffer is only read: the window can share it */
                if (region_off)
                    ivshm_ep_send_region(k->ep, k->peer, TAG_DATA, region_off,
                                         s, &ticket);
                else
                    ivshm_ep_send(k->ep, k->peer, TAG_DATA, sbuf, s);
            }
            while (ticket && ivshm_ep_region_done(k->ep, k->peer, ticket) == 0)
                progress(k);
            while (k->acks < want)
                progress(k);
        } else {
            uint64_t want = k->data_target += (uint64_t)window;
            while (k->msgs_done < want)
                progress(k);
            ivshm_ep_send(k->ep, k->peer, TAG_ACK, "", 0);
        }
        v[r] = (double)s * window / (double)(now_ns() - t0);
    }
    qsort(v, (size_t)reps, sizeof(*v), cmp_double);
    double m = v[reps / 2];
    free(v);
    return m;
}

static int run_bw(struct rank *k, FILE *csv)
{
    int reps = opt.iters ? (int)opt.iters : 21;
    char *sbuf = page_alloc(opt.max + 4096);
    memset(sbuf, 0x5a, opt.max);
    uint64_t roff = 0;
    if (k->id == 0) {
        ivshm_status_t st = ivshm_alloc(k->r, opt.max, &roff);
        if (st != IVSHM_OK)
            die("alloc", st);
        memset((char *)ivshm_region_base(k->r) + roff, 0x5a, opt.max);
        printf("# ivshm-bw: streaming bandwidth, GB/s (median of %d reps)\n",
               reps);
        printf("%10s %10s %10s %10s %8s %8s\n", "bytes", "memcpy", "channel",
               "1-copy", "ch/mcp", "1c/mcp");
        if (csv)
            fprintf(csv, "bench,bytes,memcpy_gbs,channel_gbs,single_copy_gbs,"
                         "ratio_channel,ratio_single_copy\n");
    }
    double last_ratio = 0, last_ratio1 = 0;
    for (size_t s = 64; s <= opt.max; s *= 4) {
        double mc = memcpy_bw(s, reps);
        sync_peer(k);
        chan_bw(k, sbuf, 0, s, 3);
        double ch = chan_bw(k, sbuf, 0, s, reps);
        sync_peer(k);
        double one = 0;
        if (s >= 4096) {
            /* rank 1 mirrors what rank 0 does; the flag is rank 0's */
            one = chan_bw(k, sbuf, k->id == 0 ? roff : 1, s, reps);
            sync_peer(k);
        }
        if (k->id == 0) {
            printf("%10zu %10.2f %10.2f %10.2f %8.2f %8.2f\n", s, mc, ch, one,
                   ch / mc, one / mc);
            if (csv)
                fprintf(csv, "ivshm-bw,%zu,%.3f,%.3f,%.3f,%.3f,%.3f\n", s, mc,
                        ch, one, ch / mc, one / mc);
            last_ratio = ch / mc;
            last_ratio1 = one / mc;
        }
        if (s * 4 > opt.max && s != opt.max && opt.max > s)
            s = opt.max / 4; /* always end on the largest size */
    }
    if (k->id == 0)
        printf("# large-message (%zu B) bandwidth = %.2f x single-core memcpy "
               "(single copy from the region: %.2f x); target >= %.2f: %s\n",
               opt.max, last_ratio, last_ratio1, target_ratio_bw,
               last_ratio >= target_ratio_bw ? "met" : "MISSED");
    free(sbuf);
    return 0;
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--region URI] [--max SIZE] [--iters N] [--cpus A,B] "
            "[--csv FILE]\n"
            "Two processes on two cores exchange messages through a region "
            "(default: a\nfresh /dev/shm file) and compare with the physical "
            "limits measured in the\nsame run.\n",
            prog);
}

int main(int argc, char **argv)
{
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    opt.bw = strstr(prog, "bw") != NULL;
    static const struct option lo[] = {
        {"region", required_argument, 0, 'r'}, {"max", required_argument, 0, 'm'},
        {"iters", required_argument, 0, 'n'},  {"reps", required_argument, 0, 'n'},
        {"cpus", required_argument, 0, 'c'},   {"csv", required_argument, 0, 'o'},
        {"bw", no_argument, 0, 'B'},           {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "r:m:n:c:o:Bh", lo, NULL)) != -1) {
        switch (c) {
        case 'r': opt.region = optarg; break;
        case 'm': opt.max = strtoull(optarg, NULL, 0); break;
        case 'n': opt.iters = atol(optarg); break;
        case 'c': {
            int used = 0;
            if (sscanf(optarg, "%d,%d%n", &opt.cpus[0], &opt.cpus[1], &used) != 2 ||
                optarg[used] || opt.cpus[0] < 0 || opt.cpus[1] < 0 ||
                opt.cpus[0] == opt.cpus[1]) {
                fprintf(stderr, "--cpus takes A,B: two different CPUs\n");
                return 2;
            }
            break;
        }
        case 'o': opt.csv = optarg; break;
        case 'B': opt.bw = true; break;
        case 'h': usage(prog); return 0;
        default: usage(prog); return 2;
        }
    }
    if (opt.max < 64 || opt.max > (1u << 30)) {
        fprintf(stderr, "--max must lie in 64 .. 1 GiB\n");
        return 2;
    }
    check_cpus();
    if (!opt.region) {
        snprintf(own_region, sizeof(own_region),
                 "file:/dev/shm/ivshm-bench-%d", (int)getpid());
        ivshm_format_opts_t fo;
        ivshm_format_opts_init(&fo);
        fo.size = 64ull << 20;
        while (fo.size < opt.max * 3 + (8u << 20))
            fo.size *= 2;
        ivshm_status_t st = ivshm_format(own_region, &fo);
        if (st != IVSHM_OK)
            die("format", st);
        own_region_pid = getpid();
        atexit(remove_own_region); /* until both ranks have it (main) */
        opt.region = own_region;
    }
    char job[48];
    snprintf(job, sizeof(job), "bench-%d", (int)getpid());
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0)
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* its exit leaves the region */
    struct rank k;
    setup_rank(&k, child == 0 ? 1 : 0, job);
    /* both ranks have it mapped, and nothing opens it again: the name goes
     * now, so that no signal can leave it behind */
    if (child != 0)
        remove_own_region();
    FILE *csv = NULL;
    if (child != 0 && opt.csv && !(csv = fopen(opt.csv, "w"))) {
        perror(opt.csv);
        kill(child, SIGKILL);
        return 1;
    }
    int rc = opt.bw ? run_bw(&k, csv) : run_lat(&k, csv);
    sync_peer(&k);
    if (csv)
        fclose(csv);
    ivshm_ep_destroy(k.ep);
    ivshm_domain_leave(k.d);
    ivshm_region_close(k.r);
    if (child == 0)
        _exit(rc);
    int ws;
    waitpid(child, &ws, 0);
    return rc || !WIFEXITED(ws) || WEXITSTATUS(ws);
}
