/*
 * MPI job of the mixed guest test (tests/qemu/test_qemu_mpi.sh): four
 * guests, two per "host" (region), the hosts joined by soft-RoCE.
 *
 *   mpi_routes check    rank 0 and the last rank (other hosts) first
 *                       post 100 sends each way before either receives
 *                       (first contact over verbs: both burst past the
 *                       other's receive buffers), then
 *                       every pair ping-pongs (8 B to 300 KB, payload
 *                       checked), then a >= 4 MiB message each way per
 *                       pair, then Allreduce, Alltoall and Bcast with
 *                       checked results, then a burst of 300 small
 *                       messages from rank 0 to the last rank (another
 *                       host) while that rank does not receive: more than
 *                       its verbs receive buffers, so the sender must
 *                       wait for credits. Rank 0 prints one line per part:
 *                       "IVT-PASS mpi-NAME" or "IVT-FAIL mpi-NAME: why".
 *   mpi_routes stream N the first rank sends N checked 256 KiB messages
 *                       to the last (a job that must not be disturbed);
 *                       the last says "stream: 10 messages checked" once
 *                       they came, and names a wrong message at once
 *   mpi_routes victim   rank 0 streams 1 MiB messages to rank 1, which
 *                       kills itself (SIGKILL) after the third one: the
 *                       job must end with an error, not hang
 *   mpi_routes allocmem rank 0 and the last rank (other hosts) ping-pong
 *                       1 MiB between MPI_Alloc_mem buffers, ALLOCMEM_ITERS
 *                       round trips, every byte checked; rank 0 prints
 *                       "IVT-INFO allocmem-latency N us" (half the mean
 *                       round trip after the first) and the part's line.
 *                       The guest test counts how the messages went
 *                       (one RDMA read each, or sends)
 */
#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;

static unsigned char pat(int from, int to, size_t i, int iter)
{
    return (unsigned char)(from * 31 + to * 7 + i * 13 + (i >> 8) + iter * 5);
}

static void fill(unsigned char *b, size_t n, int from, int to, int iter)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pat(from, to, i, iter);
}

static long bad_bytes(const unsigned char *b, size_t n, int from, int to, int iter)
{
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += b[i] != pat(from, to, i, iter);
    return bad;
}

/* everyone's error count reaches rank 0, which reports the part */
static int report(const char *name, long errors)
{
    long total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total == 0)
            printf("IVT-PASS mpi-%s\n", name);
        else
            printf("IVT-FAIL mpi-%s: %ld errors\n", name, total);
        fflush(stdout);
    }
    return total != 0;
}

/* the peer of rank in round r of a round-robin schedule (size even) */
static int partner(int r)
{
    int n = size - 1;
    if (rank == n)
        return r % n;
    int p = (r - rank + n) % n;
    if (p == rank)
        return n;
    return p;
}

static long pingpong(int peer, size_t n, int iters)
{
    unsigned char *b = malloc(n);
    long bad = 0;
    for (int it = 0; it < iters; it++) {
        if (rank < peer) {
            fill(b, n, rank, peer, it);
            MPI_Send(b, (int)n, MPI_BYTE, peer, it, MPI_COMM_WORLD);
            MPI_Recv(b, (int)n, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            bad += bad_bytes(b, n, peer, rank, it);
        } else {
            MPI_Recv(b, (int)n, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            bad += bad_bytes(b, n, peer, rank, it);
            fill(b, n, rank, peer, it);
            MPI_Send(b, (int)n, MPI_BYTE, peer, it, MPI_COMM_WORLD);
        }
    }
    free(b);
    return bad;
}

static long big_exchange(int peer, size_t n)
{
    unsigned char *s = malloc(n), *r = malloc(n);
    fill(s, n, rank, peer, 99);
    memset(r, 0, n);
    MPI_Sendrecv(s, (int)n, MPI_BYTE, peer, 7, r, (int)n, MPI_BYTE, peer, 7,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    long bad = bad_bytes(r, n, peer, rank, 99);
    free(s);
    free(r);
    return bad;
}

/* First contact: both sides post their sends before any receive. */
static long first_contact(int peer)
{
    enum { FIRST = 100, FLEN = 8 };
    unsigned char *fs = malloc(FIRST * FLEN), *fr = malloc(FIRST * FLEN);
    MPI_Request rq[2 * FIRST];
    for (int i = 0; i < FIRST; i++) {
        fill(fs + i * FLEN, FLEN, rank, peer, i);
        MPI_Isend(fs + i * FLEN, FLEN, MPI_BYTE, peer, 11, MPI_COMM_WORLD,
                  &rq[i]);
    }
    for (int i = 0; i < FIRST; i++)
        MPI_Irecv(fr + i * FLEN, FLEN, MPI_BYTE, peer, 11, MPI_COMM_WORLD,
                  &rq[FIRST + i]);
    MPI_Waitall(2 * FIRST, rq, MPI_STATUSES_IGNORE);
    long bad = 0;
    for (int i = 0; i < FIRST; i++)
        bad += bad_bytes(fr + i * FLEN, FLEN, peer, rank, i);
    free(fs);
    free(fr);
    return bad;
}

static int check(void)
{
    int failed = 0;
    failed |= report("first-contact",
                     rank == 0          ? first_contact(size - 1)
                     : rank == size - 1 ? first_contact(0)
                                        : 0);
    static const size_t sizes[] = {8, 1000, 20000, 300000};
    long bad = 0;
    for (int r = 0; r < size - 1; r++)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
            bad += pingpong(partner(r), sizes[k], 5);
    failed |= report("pingpong", bad);

    bad = 0;
    for (int r = 0; r < size - 1; r++)
        bad += big_exchange(partner(r), (4u << 20) + 4093);
    failed |= report("large-4MiB", bad);

    /* Allreduce: ints and doubles */
    enum { N = 10000 };
    int *iv = malloc(N * sizeof(int)), *io = malloc(N * sizeof(int));
    double *dv = malloc(N * sizeof(double)), *dout = malloc(N * sizeof(double));
    for (int i = 0; i < N; i++) {
        iv[i] = rank * 1000 + i;
        dv[i] = rank + i * 0.5;
    }
    MPI_Allreduce(iv, io, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(dv, dout, N, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    bad = 0;
    for (int i = 0; i < N; i++) {
        bad += io[i] != size * i + 1000 * size * (size - 1) / 2;
        bad += dout[i] != (size - 1) + i * 0.5;
    }
    failed |= report("allreduce", bad);

    /* Alltoall: 5000 ints to each rank */
    enum { A = 5000 };
    int *as = malloc((size_t)A * size * sizeof(int)), *ar = malloc((size_t)A * size * sizeof(int));
    for (int p = 0; p < size; p++)
        for (int i = 0; i < A; i++)
            as[p * A + i] = rank * 1000000 + p * 10000 + i;
    MPI_Alltoall(as, A, MPI_INT, ar, A, MPI_INT, MPI_COMM_WORLD);
    bad = 0;
    for (int p = 0; p < size; p++)
        for (int i = 0; i < A; i++)
            bad += ar[p * A + i] != p * 1000000 + rank * 10000 + i;
    failed |= report("alltoall", bad);

    /* A burst larger than the receiver's verbs buffers (64 by default),
     * sent while the last rank is busy elsewhere: every message arrives,
     * in order, once the sender has waited for credits */
    enum { BURST = 300, BLEN = 64 };
    unsigned char *burst = malloc((size_t)BURST * BLEN);
    bad = 0;
    if (rank == 0) {
        MPI_Request *rq = malloc(BURST * sizeof(*rq));
        for (int i = 0; i < BURST; i++) {
            fill(burst + (size_t)i * BLEN, BLEN, 0, size - 1, i);
            MPI_Isend(burst + (size_t)i * BLEN, BLEN, MPI_BYTE, size - 1, 7,
                      MPI_COMM_WORLD, &rq[i]);
        }
        MPI_Waitall(BURST, rq, MPI_STATUSES_IGNORE);
        free(rq);
    } else if (rank == size - 1) {
        sleep(2);
        for (int i = 0; i < BURST; i++) {
            MPI_Recv(burst, BLEN, MPI_BYTE, 0, 7, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            bad += bad_bytes(burst, BLEN, 0, size - 1, i);
        }
    }
    free(burst);
    failed |= report("burst", bad);

    /* Bcast of 1 MiB from the last rank (another host than rank 0) */
    size_t bn = 1u << 20;
    unsigned char *bb = malloc(bn);
    if (rank == size - 1)
        fill(bb, bn, size - 1, 0, 3);
    else
        memset(bb, 0, bn);
    MPI_Bcast(bb, (int)bn, MPI_BYTE, size - 1, MPI_COMM_WORLD);
    failed |= report("bcast", bad_bytes(bb, bn, size - 1, 0, 3));
    free(iv); free(io); free(dv); free(dout); free(as); free(ar); free(bb);
    return failed;
}

/* the receiver says when this many messages arrived checked: the job is
 * under way (test_libvirt_mpi.sh unplugs the region then) */
enum { STREAM_UNDERWAY = 10 };
static int stream(int n, bool victim)
{
    size_t len = victim ? (1u << 20) : (256u << 10);
    unsigned char *b = malloc(len);
    long bad = 0;
    int last = size - 1;
    for (int i = 0; i < n; i++) {
        if (rank == 0) {
            fill(b, len, 0, last, i);
            MPI_Send(b, (int)len, MPI_BYTE, last, i, MPI_COMM_WORLD);
        } else if (rank == last) {
            MPI_Recv(b, (int)len, MPI_BYTE, 0, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            long wrong = bad_bytes(b, len, 0, last, i);
            bad += wrong;
            /* said at once: a job that ends midway reports no total */
            if (wrong)
                printf("IVT-FAIL mpi-stream-payload: message %d has %ld wrong bytes\n",
                       i, wrong);
            if (i + 1 == STREAM_UNDERWAY)
                printf("stream: %d messages checked\n", STREAM_UNDERWAY);
            if (wrong || i + 1 == STREAM_UNDERWAY)
                fflush(stdout);
            if (victim && i == 2) {
                printf("victim: rank %d killed mid-stream\n", rank);
                fflush(stdout);
                raise(SIGKILL);
            }
        }
    }
    free(b);
    return report(victim ? "victim" : "stream", bad);
}

/* 1 MiB round trips between MPI_Alloc_mem buffers of rank 0 and the last
 * rank: the buffers come from whichever pool MPI_Alloc_mem picks (the
 * region, or private memory where verbs peers are, docs/verbs.md) */
enum { ALLOCMEM_ITERS = 6 };
static int allocmem(void)
{
    const size_t n = 1u << 20;
    int last = size - 1, peer = rank == 0 ? last : 0;
    long bad = 0;
    double t0 = 0, t1 = 0;
    if (rank == 0 || rank == last) {
        unsigned char *b;
        if (MPI_Alloc_mem((MPI_Aint)n, MPI_INFO_NULL, &b) != MPI_SUCCESS)
            return report("allocmem", 1);
        for (int it = 0; it < ALLOCMEM_ITERS; it++) {
            if (it == 1)
                t0 = MPI_Wtime();
            if (rank == 0) {
                fill(b, n, rank, peer, it);
                MPI_Send(b, (int)n, MPI_BYTE, peer, it, MPI_COMM_WORLD);
                MPI_Recv(b, (int)n, MPI_BYTE, peer, it, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                bad += bad_bytes(b, n, peer, rank, it);
            } else {
                MPI_Recv(b, (int)n, MPI_BYTE, peer, it, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                bad += bad_bytes(b, n, peer, rank, it);
                fill(b, n, rank, peer, it);
                MPI_Send(b, (int)n, MPI_BYTE, peer, it, MPI_COMM_WORLD);
            }
        }
        t1 = MPI_Wtime();
        MPI_Free_mem(b);
    }
    if (rank == 0) {
        printf("IVT-INFO allocmem-latency %.0f us\n",
               (t1 - t0) / (ALLOCMEM_ITERS - 1) / 2 * 1e6);
        fflush(stdout);
    }
    return report("allocmem", bad);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "check";
    int failed;
    if (strcmp(mode, "stream") == 0)
        failed = stream(argc > 2 ? atoi(argv[2]) : 100, false);
    else if (strcmp(mode, "victim") == 0)
        failed = stream(64, true);
    else if (strcmp(mode, "allocmem") == 0)
        failed = allocmem();
    else if (size % 2 == 0)
        failed = check();
    else {
        if (rank == 0)
            printf("IVT-FAIL mpi-check: needs an even number of ranks\n");
        failed = 1;
    }
    MPI_Finalize();
    return failed;
}
