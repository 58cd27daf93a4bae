/*
 * MPI with ordinary heap buffers (malloc, realloc, posix_memalign; never
 * MPI_Alloc_mem), as unmodified applications use them, with or without
 * the region heap (libivshm-heap.so). Every byte received is checked.
 * Rank 0 prints "mpi_heap: N passed, M failed".
 *
 *  - a fresh malloc'd buffer per size around each protocol boundary of
 *    btl ivshmem (eager limit 4 KiB with the region heap and 32 KiB
 *    without, RDMA pipeline length 32 KiB, fragment 64 KiB = the heap's
 *    threshold), up to 4 MiB + 4093, both ways;
 *  - buffers allocated before MPI_Init (private memory), freed after;
 *  - buffers grown and shrunk by realloc across the threshold;
 *  - fork while MPI runs: the child checks its copy and overwrites it, the
 *    parent's buffer is then sent and must be intact; fork + exec (system);
 *  - a window of 48 nonblocking 1 MiB sends, one way and both ways;
 *  - threads that allocate, write, check and free large and small blocks
 *    while the main thread exchanges messages (MPI_THREAD_FUNNELED).
 */
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TALLY_NAME "mpi_heap"
#include "mpi_tally.h"

static unsigned char pat(int src, size_t i, int salt)
{
    return (unsigned char)(src * 31 + (int)(i * 13) + salt);
}
static void fill(unsigned char *b, size_t n, int src, int salt)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pat(src, i, salt);
}
static int intact(const unsigned char *b, size_t n, int src, int salt)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pat(src, i, salt))
            return 0;
    return 1;
}

/* s (n bytes, filled by us with salt) goes to every other rank in turn,
 * r receives theirs; both checked */
static int exchange(unsigned char *s, unsigned char *r, size_t n, int salt)
{
    int ok = 1;
    for (int step = 1; step < size; step++) {
        int to = (rank + step) % size, from = (rank - step + size) % size;
        fill(s, n, rank, salt);
        MPI_Sendrecv(s, (int)n, MPI_BYTE, to, salt, r, (int)n, MPI_BYTE, from,
                     salt, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        ok &= intact(r, n, from, salt);
    }
    return ok;
}

static void t_boundaries(void)
{
    static const size_t sizes[] = {1, 4095, 4096, 4097, 8192, 32767, 32768,
                                   32769, 65535, 65536, 65537, 131072,
                                   1 << 20, (4 << 20) + 4093};
    int ok = 1;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        unsigned char *s = malloc(sizes[k]), *r = malloc(sizes[k]);
        ok &= s && r && exchange(s, r, sizes[k], (int)k);
        free(s);
        free(r);
    }
    /* an interior slice of a large block, misaligned both ends */
    unsigned char *s = malloc(3 << 20), *r = malloc(3 << 20);
    ok &= exchange(s + 123, r + 77, (2 << 20) + 5, 40);
    free(s);
    free(r);
    void *a = NULL, *b = NULL;
    ok &= posix_memalign(&a, 4096, 1 << 20) == 0 &&
          posix_memalign(&b, 64, 1 << 20) == 0 && exchange(a, b, 1 << 20, 41);
    free(a);
    free(b);
    check(ok, "malloc'd buffers around every protocol boundary, 1 B .. 4 MiB");
}

static void t_realloc(void)
{
    int ok = 1;
    unsigned char *s = malloc(1000), *r = malloc(1000);
    ok &= exchange(s, r, 1000, 50);
    s = realloc(s, 2 << 20);
    r = realloc(r, 2 << 20);
    ok &= intact(s, 1000, rank, 50); /* kept across the threshold */
    ok &= exchange(s, r, 2 << 20, 51);
    s = realloc(s, 3000);
    r = realloc(r, 3000);
    ok &= intact(s, 3000, rank, 51);
    ok &= exchange(s, r, 3000, 52);
    free(s);
    free(r);
    check(ok, "realloc across the heap threshold, both ways");
}

static void t_fork(void)
{
    size_t n = 2 << 20;
    unsigned char *s = malloc(n), *r = malloc(n);
    fill(s, n, rank, 60);
    int ok = 1;
    pid_t pid = fork();
    if (pid == 0) {
        int rc = intact(s, n, rank, 60) ? 0 : 1;
        memset(s, 0x5a, n); /* the child's copy only */
        free(s);
        _exit(rc);
    }
    int st = 0;
    ok &= pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
          WEXITSTATUS(st) == 0;
    ok &= intact(s, n, rank, 60);
    /* send what the parent holds: the peer must see the parent's bytes */
    int to = (rank + 1) % size, from = (rank - 1 + size) % size;
    MPI_Sendrecv(s, (int)n, MPI_BYTE, to, 60, r, (int)n, MPI_BYTE, from, 60,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    ok &= intact(r, n, from, 60);
    check(ok, "fork while MPI runs: the child writes its copy, the parent's buffer is sent intact");
    pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", "exit 7", (char *)NULL);
        _exit(127);
    }
    ok = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
         WEXITSTATUS(st) == 7;
    ok &= system("exit 0") == 0; /* posix_spawn inside glibc */
    ok &= exchange(s, r, n, 61);
    check(ok, "fork + exec and system() while MPI runs");
    free(s);
    free(r);
}

/* a window of large nonblocking sends, as osu_bw posts them (a window of
 * 4 MiB sends once deadlocked the fragment pool): rank 0 to 1, then both
 * ways at once */
static void t_window(void)
{
    enum { W = 48 };
    size_t n = 1 << 20;
    int ok = 1;
    unsigned char *s = malloc(W * n), *r = malloc(W * n);
    MPI_Request q[2 * W];
    for (int pass = 0; pass < 2 && size >= 2; pass++) {
        int nq = 0;
        int sender = rank == 0 || (pass == 1 && rank == 1);
        int receiver = rank == 1 || (pass == 1 && rank == 0);
        int peer = rank == 0 ? 1 : 0;
        if (rank > 1)
            sender = receiver = 0;
        for (int k = 0; k < W && sender; k++) {
            fill(s + k * n, n, rank, 80 + k);
            MPI_Isend(s + k * n, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD, &q[nq++]);
        }
        for (int k = 0; k < W && receiver; k++)
            MPI_Irecv(r + k * n, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD, &q[nq++]);
        MPI_Waitall(nq, q, MPI_STATUSES_IGNORE);
        for (int k = 0; k < W && receiver; k++)
            ok &= intact(r + k * n, n, peer, 80 + k);
    }
    free(s);
    free(r);
    check(ok, "a window of 48 nonblocking 1 MiB sends, one way and both ways");
}

static atomic_int stop;
static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    long bad = 0;
    while (!atomic_load(&stop)) {
        size_t n = (rand_r(&seed) % 2) ? (size_t)(rand_r(&seed) % 2000) + 1
                                       : (size_t)(rand_r(&seed) % (1 << 20)) + 65536;
        unsigned char *p = malloc(n);
        if (!p) {
            bad++;
            continue;
        }
        int tag = (int)(seed & 0xff);
        fill(p, n, tag, 3);
        if (rand_r(&seed) % 3 == 0) {
            size_t m = n * 2;
            unsigned char *q = realloc(p, m);
            if (!q) {
                bad++;
                free(p);
                continue;
            }
            p = q;
        }
        bad += !intact(p, n, tag, 3);
        free(p);
    }
    return (void *)bad;
}

static void t_threads(void)
{
    enum { T = 3 };
    pthread_t th[T];
    atomic_store(&stop, 0);
    for (int i = 0; i < T; i++)
        pthread_create(&th[i], NULL, churn, (void *)(uintptr_t)(rank * 10 + i + 1));
    int ok = 1;
    for (int it = 0; it < 20; it++) {
        size_t n = (size_t)(it % 4 == 0 ? 100 : (it * 97 * 1024) % (3 << 20)) + 1;
        unsigned char *s = malloc(n), *r = malloc(n);
        ok &= exchange(s, r, n, 70 + it);
        free(s);
        free(r);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < T; i++) {
        void *rv;
        pthread_join(th[i], &rv);
        ok &= rv == NULL;
    }
    check(ok, "threads allocate and free while the main thread exchanges messages");
}

int main(int argc, char **argv)
{
    /* allocated before MPI_Init: private memory, sent with two copies */
    size_t pre_n = (1 << 20) + 1;
    unsigned char *pre_s = malloc(pre_n), *pre_r = malloc(pre_n);
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check(exchange(pre_s, pre_r, pre_n, 90), "buffers allocated before MPI_Init");
    free(pre_s);
    free(pre_r);
    t_boundaries();
    t_window();
    t_realloc();
    t_fork();
    t_threads();
    t_boundaries(); /* again, on a heap the others have churned */
    if (rank == 0)
        printf("mpi_heap: %d ranks: %d passed, %d failed\n", size, passed, failed);
    MPI_Finalize();
    return failed ? 1 : 0;
}
