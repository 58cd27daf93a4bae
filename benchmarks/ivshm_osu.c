/*
 * ivshm-osu: OSU-style MPI micro-benchmarks in one program, for comparing
 * transports in one run (see benchmarks/compare.sh).
 *
 *   ivshm-osu BENCH [-m MAXBYTES] [-i ITERS] [-r REPEATS]
 *   BENCH: latency bw bibw mlat put get putbw getbw allreduce reduce barrier bcast
 *          allgather alltoall mtrate mbwmr
 *
 * Prints "bytes value" lines (latency in us one-way / per operation,
 * bandwidth in MB/s): the median of REPEATS runs of ITERS, then the mean
 * over all of them (OSU's average).
 * -a: the buffers come from MPI_Alloc_mem.
 * -T: MPI_THREAD_MULTIPLE (what a hybrid code asks for), one thread.
 * mtrate -t N: N threads per rank (MPI_THREAD_MULTIPLE), thread k of rank
 *   0 ping-pongs with thread k of rank 1 on tag k; prints the aggregate
 *   message rate (millions of messages per second, both directions).
 *   Where the rank may run on at least N CPUs, thread k is pinned to the
 *   k-th of them, so that every set-up runs its threads on the same CPUs.
 * mbwmr: size/2 pairs (rank i sends to rank i + size/2), windows of 64
 *   non-blocking sends, as osu_mbw_mr: the aggregate message rate
 *   (millions of messages per second, all pairs together).
 * -P A,B: latency, bw and bibw between ranks A and B of a larger job (the
 *   others wait): one job measures pairs on one host and across hosts,
 *   e.g. ranks 0,1 in two VMs of one host and 0,2 on another host.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size, iters = 0, repeats = 7, use_alloc_mem;
static int pa = 0, pb = 1; /* the measured pair (-P) */
static int nthreads = 4;     /* mtrate -t */
static size_t maxb = 1 << 22;

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *buf_alloc(size_t n)
{
    void *p;
    if (use_alloc_mem) {
        MPI_Alloc_mem((MPI_Aint)n, MPI_INFO_NULL, &p);
    } else {
        p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
    }
    memset(p, 1, n);
    return p;
}

static void buf_free(void *p)
{
    if (use_alloc_mem)
        MPI_Free_mem(p);
    else
        free(p);
}

static int iters_for(size_t n, int small)
{
    if (iters)
        return iters;
    return n <= 8192 ? small : (int)(small * 8192 / n) + 4;
}

/* one measurement (seconds per iteration), run `repeats` times: median,
 * and the mean in *mean (what OSU reports: the average over every
 * iteration, which medians of repeats hide periodic stalls from) */
typedef double (*bench_fn)(size_t n, int it, char *s, char *r);

static double median_of(bench_fn f, size_t n, int it, char *s, char *r,
                        double *mean)
{
    double v[64];
    f(n, it / 4 + 1, s, r); /* warm-up */
    for (int k = 0; k < repeats; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        v[k] = f(n, it, s, r);
    }
    MPI_Bcast(v, repeats, MPI_DOUBLE, pa, MPI_COMM_WORLD);
    double sum = 0;
    for (int k = 0; k < repeats; k++)
        sum += v[k];
    *mean = sum / repeats;
    qsort(v, (size_t)repeats, sizeof(double), cmpd);
    return v[repeats / 2];
}

static double b_latency(size_t n, int it, char *s, char *r)
{
    double t0 = MPI_Wtime();
    for (int i = 0; i < it; i++) {
        if (rank == pa) {
            MPI_Send(s, (int)n, MPI_CHAR, pb, 1, MPI_COMM_WORLD);
            MPI_Recv(r, (int)n, MPI_CHAR, pb, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == pb) {
            MPI_Recv(r, (int)n, MPI_CHAR, pa, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(s, (int)n, MPI_CHAR, pa, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) / it / 2;
}

/* pairs (i, i + size/2) ping-pong at the same time */
static double b_mlat(size_t n, int it, char *s, char *r)
{
    int half = size / 2, peer = rank < half ? rank + half : rank - half;
    double t0 = MPI_Wtime();
    for (int i = 0; i < it && rank < 2 * half; i++) {
        if (rank < half) {
            MPI_Send(s, (int)n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(r, (int)n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(r, (int)n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(s, (int)n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
        }
    }
    double t = (MPI_Wtime() - t0) / it / 2, avg;
    MPI_Allreduce(&t, &avg, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return avg / size;
}

#define WINDOW 64
static double b_bw_common(size_t n, int it, char *s, char *r, int bi)
{
    MPI_Request q[2 * WINDOW];
    char ack = 0;
    if (rank != pa && rank != pb)
        return 1.0; /* not measured: rank pa's figures are reported */
    int peer = rank == pa ? pb : pa;
    double t0 = MPI_Wtime();
    for (int i = 0; i < it; i++) {
        int k = 0;
        if (rank == pa || bi)
            for (int w = 0; w < WINDOW; w++)
                MPI_Isend(s, (int)n, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &q[k++]);
        if (rank == pb || bi)
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(r, (int)n, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &q[k++]);
        MPI_Waitall(k, q, MPI_STATUSES_IGNORE);
        if (rank == pa)
            MPI_Recv(&ack, 1, MPI_CHAR, pb, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else
            MPI_Send(&ack, 1, MPI_CHAR, pa, 3, MPI_COMM_WORLD);
    }
    double t = MPI_Wtime() - t0;
    return t / ((double)n * WINDOW * it * (bi ? 2 : 1)); /* s per byte */
}
static double b_bw(size_t n, int it, char *s, char *r) { return b_bw_common(n, it, s, r, 0); }
static double b_bibw(size_t n, int it, char *s, char *r) { return b_bw_common(n, it, s, r, 1); }

/* mbwmr (as osu_mbw_mr): ranks i < size/2 each send windows of WINDOW
 * messages to rank i + size/2, which receives them and answers each window
 * with one byte; every pair at once. Seconds per message of all pairs
 * together, from the slowest sender's time. */
static double b_mbwmr(size_t n, int it, char *s, char *r)
{
    MPI_Request q[WINDOW];
    char ack = 0;
    int half = size / 2, peer = rank < half ? rank + half : rank - half;
    double t = 0, slowest;
    if (rank < 2 * half) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < it; i++) {
            for (int w = 0; w < WINDOW; w++) {
                if (rank < half)
                    MPI_Isend(s, (int)n, MPI_CHAR, peer, 4, MPI_COMM_WORLD, &q[w]);
                else
                    MPI_Irecv(r, (int)n, MPI_CHAR, peer, 4, MPI_COMM_WORLD, &q[w]);
            }
            MPI_Waitall(WINDOW, q, MPI_STATUSES_IGNORE);
            if (rank < half)
                MPI_Recv(&ack, 1, MPI_CHAR, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else
                MPI_Send(&ack, 1, MPI_CHAR, peer, 5, MPI_COMM_WORLD);
        }
        t = MPI_Wtime() - t0;
    }
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest / ((double)WINDOW * it * half);
}

/* mtrate: each thread ping-pongs on its own tag */
struct mt_arg {
    size_t n;
    int it, tag;
    char *buf;
};
static void *mt_pingpong(void *p)
{
    struct mt_arg *a = p;
    for (int i = 0; i < a->it; i++) {
        if (rank == 0) {
            MPI_Send(a->buf, (int)a->n, MPI_CHAR, 1, a->tag, MPI_COMM_WORLD);
            MPI_Recv(a->buf, (int)a->n, MPI_CHAR, 1, a->tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(a->buf, (int)a->n, MPI_CHAR, 0, a->tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(a->buf, (int)a->n, MPI_CHAR, 0, a->tag, MPI_COMM_WORLD);
        }
    }
    return NULL;
}
/* The k-th CPU this rank may run on, -1 if it has fewer than nthreads. */
static int mt_cpu(int k)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < nthreads)
        return -1;
    for (int c = 0, seen = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set) && seen++ == k)
            return c;
    return -1;
}
/* each thread's buffer, allocated once at the largest size as OSU's are
 * (with the region heap preloaded, in the region: single copy from the
 * rendezvous on, at every size; with -a, from MPI_Alloc_mem) */
static char *mt_buf[64];
static double b_mtrate(size_t n, int it, char *s, char *r)
{
    (void)s;
    (void)r;
    pthread_t th[64];
    struct mt_arg a[64];
    for (int k = 0; k < nthreads; k++)
        if (!mt_buf[k])
            mt_buf[k] = buf_alloc(maxb);
    double t0 = MPI_Wtime();
    for (int k = 0; k < nthreads; k++) {
        a[k] = (struct mt_arg){n, it, k, mt_buf[k]};
        pthread_attr_t at;
        pthread_attr_init(&at);
        int cpu = mt_cpu(k);
        if (cpu >= 0) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            pthread_attr_setaffinity_np(&at, sizeof(one), &one);
        }
        pthread_create(&th[k], &at, mt_pingpong, &a[k]);
        pthread_attr_destroy(&at);
    }
    for (int k = 0; k < nthreads; k++)
        pthread_join(th[k], NULL);
    return (MPI_Wtime() - t0) / ((double)it * nthreads * 2); /* s per message */
}

static MPI_Win win;
static double b_put(size_t n, int it, char *s, char *r)
{
    (void)r;
    double t0 = MPI_Wtime();
    if (rank == 0)
        for (int i = 0; i < it; i++) {
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            MPI_Put(s, (int)n, MPI_CHAR, 1, 0, (int)n, MPI_CHAR, win);
            MPI_Win_unlock(1, win);
        }
    return (MPI_Wtime() - t0) / it;
}
static double b_get(size_t n, int it, char *s, char *r)
{
    (void)s;
    double t0 = MPI_Wtime();
    if (rank == 0)
        for (int i = 0; i < it; i++) {
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            MPI_Get(r, (int)n, MPI_CHAR, 1, 0, (int)n, MPI_CHAR, win);
            MPI_Win_unlock(1, win);
        }
    return (MPI_Wtime() - t0) / it;
}

/* one-sided bandwidth: a window of operations per epoch (osu_put_bw) */
static double b_rma_bw(size_t n, int it, char *s, char *r, int put)
{
    double t0 = MPI_Wtime();
    if (rank == 0)
        for (int i = 0; i < it; i++) {
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            for (int w = 0; w < WINDOW; w++) {
                if (put)
                    MPI_Put(s, (int)n, MPI_CHAR, 1, 0, (int)n, MPI_CHAR, win);
                else
                    MPI_Get(r, (int)n, MPI_CHAR, 1, 0, (int)n, MPI_CHAR, win);
            }
            MPI_Win_unlock(1, win);
        }
    double t = MPI_Wtime() - t0;
    MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return t / ((double)n * WINDOW * it); /* s per byte */
}
static double b_putbw(size_t n, int it, char *s, char *r) { return b_rma_bw(n, it, s, r, 1); }
static double b_getbw(size_t n, int it, char *s, char *r) { return b_rma_bw(n, it, s, r, 0); }

/* Collectives, as the OSU suite measures them: each operation timed on its
 * own (a barrier between operations, outside the timing), the average over
 * the ranks. Timing back-to-back operations at the root alone would show
 * only how fast the root hands off eager messages. */
#define COLL_TIMED(op)                                                      \
    double t = 0;                                                           \
    for (int i = 0; i < it; i++) {                                          \
        double t0 = MPI_Wtime();                                            \
        op;                                                                 \
        t += MPI_Wtime() - t0;                                              \
        MPI_Barrier(MPI_COMM_WORLD);                                        \
    }                                                                       \
    double sum;                                                             \
    MPI_Allreduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);        \
    return sum / size / it

static double b_allgather(size_t n, int it, char *s, char *r)
{
    COLL_TIMED(MPI_Allgather(s, (int)n, MPI_CHAR, r, (int)n, MPI_CHAR,
                             MPI_COMM_WORLD));
}
static double b_allreduce(size_t n, int it, char *s, char *r)
{
    int cnt = (int)(n / sizeof(float));
    COLL_TIMED(MPI_Allreduce(s, r, cnt ? cnt : 1, MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD));
}
static double b_reduce(size_t n, int it, char *s, char *r)
{
    int cnt = (int)(n / sizeof(float));
    COLL_TIMED(MPI_Reduce(s, r, cnt ? cnt : 1, MPI_FLOAT, MPI_SUM, 0,
                          MPI_COMM_WORLD));
}
/* as osu_barrier: back-to-back barriers, no size (printed as 0) */
static double b_barrier(size_t n, int it, char *s, char *r)
{
    (void)n;
    (void)s;
    (void)r;
    double t0 = MPI_Wtime();
    for (int i = 0; i < it; i++)
        MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0, sum;
    MPI_Allreduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / size / it;
}
static double b_bcast(size_t n, int it, char *s, char *r)
{
    (void)r;
    COLL_TIMED(MPI_Bcast(s, (int)n, MPI_CHAR, 0, MPI_COMM_WORLD));
}
static double b_alltoall(size_t n, int it, char *s, char *r)
{
    COLL_TIMED(MPI_Alltoall(s, (int)n, MPI_CHAR, r, (int)n, MPI_CHAR,
                            MPI_COMM_WORLD));
}

int main(int argc, char **argv)
{
    const char *bench = argc > 1 ? argv[1] : "latency";
    int threads = strcmp(bench, "mtrate") == 0;
    for (int k = 2; k < argc; k++)
        threads |= strcmp(argv[k], "-T") == 0;
    if (threads) {
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        if (provided != MPI_THREAD_MULTIPLE) {
            fprintf(stderr, "ivshm-osu: MPI_THREAD_MULTIPLE not provided\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int c;
    optind = 2;
    while ((c = getopt(argc, argv, "m:i:r:aP:Tt:")) != -1) {
        if (c == 'm')
            maxb = strtoull(optarg, NULL, 0);
        else if (c == 'i')
            iters = atoi(optarg);
        else if (c == 'r')
            repeats = atoi(optarg) > 0 && atoi(optarg) <= 64 ? atoi(optarg) : 7;
        else if (c == 'a')
            use_alloc_mem = 1;
        else if (c == 't')
            nthreads = atoi(optarg) > 0 && atoi(optarg) <= 64 ? atoi(optarg) : 4;
        else if (c == 'P' && (sscanf(optarg, "%d,%d", &pa, &pb) != 2 ||
                              pa < 0 || pb < 0 || pa >= size || pb >= size ||
                              pa == pb)) {
            if (rank == 0)
                fprintf(stderr, "ivshm-osu: -P %s: two different ranks of "
                                "the %d are needed\n", optarg, size);
            MPI_Finalize();
            return 2;
        }
    }
    int paired = strcmp(bench, "latency") == 0 || strcmp(bench, "bw") == 0 ||
                 strcmp(bench, "bibw") == 0;
    if ((pa != 0 || pb != 1) && !paired) {
        if (rank == 0)
            fprintf(stderr, "ivshm-osu: -P applies to latency, bw and bibw\n");
        MPI_Finalize();
        return 2;
    }
    static const struct {
        const char *name;
        bench_fn fn;
        int small_iters, bw, min_ranks, per_rank_buf;
    } tab[] = {
        {"latency", b_latency, 2000, 0, 2, 0}, {"bw", b_bw, 20, 1, 2, 0},
        {"bibw", b_bibw, 20, 1, 2, 0},          {"mlat", b_mlat, 2000, 0, 2, 0},
        {"put", b_put, 1000, 0, 2, 0},          {"get", b_get, 1000, 0, 2, 0},
        {"putbw", b_putbw, 20, 1, 2, 0},        {"getbw", b_getbw, 20, 1, 2, 0},
        {"allgather", b_allgather, 200, 0, 2, 1},
        {"allreduce", b_allreduce, 300, 0, 2, 0},
        {"reduce", b_reduce, 300, 0, 2, 0},     {"barrier", b_barrier, 2000, 0, 2, 0},
        {"bcast", b_bcast, 300, 0, 2, 0},       {"alltoall", b_alltoall, 200, 0, 2, 1},
        {"mtrate", b_mtrate, 2000, 2, 2, 0},    {"mbwmr", b_mbwmr, 20, 2, 2, 0},
    };
    int b = -1;
    for (size_t k = 0; k < sizeof(tab) / sizeof(tab[0]); k++)
        if (strcmp(tab[k].name, bench) == 0)
            b = (int)k;
    if (b < 0 || size < tab[b].min_ranks) {
        if (rank == 0)
            fprintf(stderr, "usage: ivshm-osu latency|bw|bibw|mlat|put|get|"
                            "putbw|getbw|allreduce|reduce|barrier|bcast|"
                            "allgather|alltoall|"
                            "mtrate|mbwmr [-m MAX] [-i N] [-r R] [-a] [-P A,B] [-T] "
                            "[-t THREADS] (>= 2 ranks)\n");
        MPI_Finalize();
        return 2;
    }
    size_t bufn = tab[b].per_rank_buf ? maxb * (size_t)size : maxb;
    char *s = buf_alloc(bufn), *r = buf_alloc(bufn);
    int onesided = tab[b].fn == b_put || tab[b].fn == b_get ||
                   tab[b].fn == b_putbw || tab[b].fn == b_getbw;
    if (onesided) {
        void *base;
        MPI_Win_allocate((MPI_Aint)maxb, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    }
    if (rank == 0)
        printf("# ivshm-osu %s, %d ranks (ranks %d and %d)%s, %s (median of %d, then mean)\n",
               bench, size, pa, pb, threads ? ", MPI_THREAD_MULTIPLE" : "",
               tab[b].bw == 2 ? "million messages/s" : tab[b].bw ? "MB/s" : "us",
               repeats);
    size_t start = tab[b].fn == b_allreduce || tab[b].fn == b_reduce ? 4 : 1;
    if (tab[b].fn == b_barrier)
        start = 0, maxb = 0;
    for (size_t n = start; n <= maxb; n = n ? n * 2 : 1) {
        double mean;
        double v = median_of(tab[b].fn, n, iters_for(n, tab[b].small_iters), s, r, &mean);
        if (rank == 0)
            printf("%zu %.3f %.3f\n", n, tab[b].bw ? 1.0 / v / 1e6 : v * 1e6,
                   tab[b].bw ? 1.0 / mean / 1e6 : mean * 1e6);
        fflush(stdout);
    }
    if (onesided)
        MPI_Win_free(&win);
    buf_free(s);
    buf_free(r);
    for (int k = 0; k < 64; k++)
        if (mt_buf[k])
            buf_free(mt_buf[k]);
    MPI_Finalize();
    return 0;
}
