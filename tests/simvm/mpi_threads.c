/*
 * MPI_THREAD_MULTIPLE over the region (tests/simvm/test_threads.sh). Every
 * byte received is checked against what its sender (rank, thread, message
 * number) put there.
 *
 *   mpi_threads pingpong T   ranks 0 and 1: T threads each, thread t
 *                            ping-pongs with thread t of the peer on tag t
 *                            (8 B to 64 KiB)
 *   mpi_threads many T       ranks 1..N-1 send from T threads to rank 0,
 *                            whose T threads receive MPI_ANY_SOURCE and
 *                            MPI_ANY_TAG
 *   mpi_threads large T      ranks 0 and 1: T threads each send 4 MiB
 *                            messages at once, from malloc'd and from
 *                            MPI_Alloc_mem buffers (single copy)
 *   mpi_threads victim T     rank 1 dies (SIGKILL) while T threads of rank
 *                            0 are sending to it: the job must end, not hang
 * Prints "THREADS ok NAME" or "THREADS FAIL NAME: why" from rank 0.
 */
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXT 32
static int rank, size, nthreads;
static long errors[MAXT];

static unsigned char pat(int from, int thread, int msg, size_t i)
{
    return (unsigned char)(from * 37 + thread * 11 + msg * 7 + i * 13 + (i >> 9));
}

static void fill(unsigned char *b, size_t n, int from, int t, int m)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pat(from, t, m, i);
}

static long bad_bytes(const unsigned char *b, size_t n, int from, int t, int m)
{
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += b[i] != pat(from, t, m, i);
    return bad;
}

static void *pingpong(void *arg)
{
    int t = (int)(intptr_t)arg, peer = 1 - rank;
    static const size_t sizes[] = {8, 200, 4096, 20000, 65536};
    unsigned char *b = malloc(65536);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
        for (int m = 0; m < 50; m++) {
            size_t n = sizes[k];
            if (rank == 0) {
                fill(b, n, rank, t, m);
                MPI_Send(b, (int)n, MPI_BYTE, peer, t, MPI_COMM_WORLD);
                MPI_Recv(b, (int)n, MPI_BYTE, peer, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                errors[t] += bad_bytes(b, n, peer, t, m);
            } else {
                MPI_Recv(b, (int)n, MPI_BYTE, peer, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                errors[t] += bad_bytes(b, n, peer, t, m);
                fill(b, n, rank, t, m);
                MPI_Send(b, (int)n, MPI_BYTE, peer, t, MPI_COMM_WORLD);
            }
        }
    free(b);
    return NULL;
}

#define MANY_MSGS 200
#define MANY_LEN 1000
/* senders: thread t of rank r sends MANY_MSGS messages on tag t; the
 * message number is the first int of the payload */
static void *many_send(void *arg)
{
    int t = (int)(intptr_t)arg;
    unsigned char b[MANY_LEN];
    for (int m = 0; m < MANY_MSGS; m++) {
        fill(b, sizeof(b), rank, t, m);
        memcpy(b, &m, sizeof(m));
        MPI_Send(b, sizeof(b), MPI_BYTE, 0, t, MPI_COMM_WORLD);
    }
    return NULL;
}

/* per (source, tag, message number): times received. Matching keeps each
 * sender thread's order, but receiving threads may record in any order. */
static unsigned char many_seen[64][MAXT][MANY_MSGS];
static pthread_mutex_t many_lock = PTHREAD_MUTEX_INITIALIZER;

static void *many_recv(void *arg)
{
    int t = (int)(intptr_t)arg;
    int total = (size - 1) * nthreads * MANY_MSGS;
    int share = total / nthreads + (t < total % nthreads);
    unsigned char b[MANY_LEN];
    for (int k = 0; k < share; k++) {
        MPI_Status st;
        MPI_Recv(b, sizeof(b), MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        int m;
        memcpy(&m, b, sizeof(m));
        int n;
        MPI_Get_count(&st, MPI_BYTE, &n);
        if (n != MANY_LEN || st.MPI_TAG < 0 || st.MPI_TAG >= nthreads ||
            st.MPI_SOURCE < 1 || st.MPI_SOURCE >= size || m < 0 || m >= MANY_MSGS) {
            errors[t]++;
            continue;
        }
        /* bytes after the message number */
        long bad = 0;
        for (size_t i = sizeof(m); i < sizeof(b); i++)
            bad += b[i] != pat(st.MPI_SOURCE, st.MPI_TAG, m, i);
        errors[t] += bad;
        pthread_mutex_lock(&many_lock);
        many_seen[st.MPI_SOURCE][st.MPI_TAG][m]++;
        pthread_mutex_unlock(&many_lock);
    }
    return NULL;
}

#define LARGE (4u << 20)
static void *large(void *arg)
{
    int t = (int)(intptr_t)arg, peer = 1 - rank;
    for (int kind = 0; kind < 2; kind++) {
        unsigned char *s, *r;
        if (kind) {
            MPI_Alloc_mem(LARGE, MPI_INFO_NULL, &s);
            MPI_Alloc_mem(LARGE, MPI_INFO_NULL, &r);
        } else {
            s = malloc(LARGE);
            r = malloc(LARGE);
        }
        for (int m = 0; m < 3; m++) {
            fill(s, LARGE, rank, t, m + 10 * kind);
            memset(r, 0, LARGE);
            MPI_Sendrecv(s, LARGE, MPI_BYTE, peer, t, r, LARGE, MPI_BYTE, peer, t,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            errors[t] += bad_bytes(r, LARGE, peer, t, m + 10 * kind);
        }
        if (kind) {
            MPI_Free_mem(s);
            MPI_Free_mem(r);
        } else {
            free(s);
            free(r);
        }
    }
    return NULL;
}

static void *victim(void *arg)
{
    int t = (int)(intptr_t)arg;
    unsigned char *b = malloc(1 << 20);
    for (int m = 0; m < 1000; m++) {
        if (rank == 0) {
            fill(b, 1 << 20, 0, t, m);
            MPI_Send(b, 1 << 20, MPI_BYTE, 1, t, MPI_COMM_WORLD);
        } else {
            MPI_Recv(b, 1 << 20, MPI_BYTE, 0, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (t == 0 && m == 2) {
                printf("THREADS victim: rank 1 killed while rank 0's threads send\n");
                fflush(stdout);
                raise(SIGKILL);
            }
        }
    }
    free(b);
    return NULL;
}

static void run(void *(*fn)(void *), int threads)
{
    pthread_t th[MAXT];
    for (int t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, fn, (void *)(intptr_t)t);
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "pingpong";
    nthreads = argc > 2 ? atoi(argv[2]) : 8;
    if (nthreads < 1 || nthreads > MAXT || size > 64)
        nthreads = 8;
    if (provided != MPI_THREAD_MULTIPLE) {
        if (rank == 0)
            printf("THREADS FAIL %s: MPI_THREAD_MULTIPLE not provided (%d)\n", mode, provided);
        MPI_Finalize();
        return 1;
    }
    if (strcmp(mode, "pingpong") == 0) {
        if (rank < 2)
            run(pingpong, nthreads);
    } else if (strcmp(mode, "many") == 0) {
        run(rank == 0 ? many_recv : many_send, nthreads);
        if (rank == 0)
            for (int s = 1; s < size; s++)
                for (int t = 0; t < nthreads; t++)
                    for (int m = 0; m < MANY_MSGS; m++)
                        errors[0] += many_seen[s][t][m] != 1; /* each once */
    } else if (strcmp(mode, "large") == 0) {
        if (rank < 2)
            run(large, nthreads);
    } else if (strcmp(mode, "victim") == 0) {
        if (rank < 2)
            run(victim, nthreads);
    }
    long mine = 0, all = 0;
    for (int t = 0; t < MAXT; t++)
        mine += errors[t];
    MPI_Reduce(&mine, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all == 0)
            printf("THREADS ok %s (%d threads per rank, %d ranks)\n", mode, nthreads, size);
        else
            printf("THREADS FAIL %s: %ld errors\n", mode, all);
        fflush(stdout);
    }
    MPI_Finalize();
    return all != 0;
}
