/*
 * MPI coverage over whatever BTLs the job uses: every check verifies the
 * bytes it received. Rank 0 prints "mpi_check: N passed, M failed".
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TALLY_NAME "mpi_check"
#include "mpi_tally.h"

static unsigned char pat(int src, int dst, size_t i, int salt)
{
    return (unsigned char)(src * 31 + dst * 17 + (int)(i * 13) + salt);
}

/* every pair exchanges messages of growing size, blocking */
static void t_pairs(void)
{
    /* around btl ivshmem's eager limits: 4 KiB with the region heap,
     * 32 KiB without (ob1's header counts against it) */
    static const size_t sizes[] = {0,     1,     8,     100,     4096,
                                   4097,  32700, 32767, 32768,   65537,
                                   1 << 20, 4 << 20};
    int ok = 1;
    unsigned char *s = malloc(4 << 20), *r = malloc(4 << 20);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k];
        for (int step = 1; step < size; step++) {
            int to = (rank + step) % size, from = (rank - step + size) % size;
            for (size_t i = 0; i < n; i++)
                s[i] = pat(rank, to, i, (int)k);
            MPI_Sendrecv(s, (int)n, MPI_BYTE, to, (int)k, r, (int)n, MPI_BYTE,
                         from, (int)k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < n; i++)
                if (r[i] != pat(from, rank, i, (int)k)) {
                    ok = 0;
                    break;
                }
        }
    }
    free(s);
    free(r);
    check(ok, "blocking pairwise exchange 0 B .. 4 MiB");
}

/* MPI_Alloc_mem buffers (placed in the shared region where the ivshmem
 * mpool serves them, which makes large messages single copy) mixed with
 * malloc'd ones on either side, also with the mpool asked for by name */
static void t_alloc_mem(void)
{
    static const size_t sizes[] = {65536, 1 << 20, 4 << 20};
    const size_t max = 4 << 20;
    MPI_Info hint;
    MPI_Info_create(&hint);
    MPI_Info_set(hint, "mpool_hints", "ivshmem");
    unsigned char *as, *ar, *hs, *ms = malloc(max), *mr = malloc(max);
    MPI_Alloc_mem((MPI_Aint)max, MPI_INFO_NULL, &as);
    MPI_Alloc_mem((MPI_Aint)max, MPI_INFO_NULL, &ar);
    MPI_Alloc_mem((MPI_Aint)max, hint, &hs);
    unsigned char *snd[] = {as, as, ms, hs}, *rcv[] = {ar, mr, ar, ar};
    int ok = ms && mr;
    for (size_t v = 0; ok && v < sizeof(snd) / sizeof(snd[0]); v++)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            size_t n = sizes[k];
            int salt = (int)(v * 8 + k);
            for (int step = 1; step < size; step++) {
                int to = (rank + step) % size,
                    from = (rank - step + size) % size;
                for (size_t i = 0; i < n; i++)
                    snd[v][i] = pat(rank, to, i, salt);
                memset(rcv[v], 0, n);
                MPI_Sendrecv(snd[v], (int)n, MPI_BYTE, to, salt, rcv[v],
                             (int)n, MPI_BYTE, from, salt, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                for (size_t i = 0; i < n; i++)
                    if (rcv[v][i] != pat(from, rank, i, salt)) {
                        ok = 0;
                        break;
                    }
            }
        }
    MPI_Free_mem(as);
    MPI_Free_mem(ar);
    MPI_Free_mem(hs);
    MPI_Info_free(&hint);
    free(ms);
    free(mr);
    check(ok, "MPI_Alloc_mem buffers, 64 KiB .. 4 MiB, mixed with malloc");
}

/* non-blocking all-to-all of 64 KiB with Waitall */
static void t_nonblocking(void)
{
    size_t n = 65536;
    unsigned char *s = malloc(n * size), *r = malloc(n * size);
    MPI_Request *q = malloc(sizeof(*q) * 2 * size);
    for (int p = 0; p < size; p++)
        for (size_t i = 0; i < n; i++)
            s[p * n + i] = pat(rank, p, i, 7);
    for (int p = 0; p < size; p++) {
        MPI_Irecv(r + p * n, (int)n, MPI_BYTE, p, 9, MPI_COMM_WORLD, &q[p]);
        MPI_Isend(s + p * n, (int)n, MPI_BYTE, p, 9, MPI_COMM_WORLD, &q[size + p]);
    }
    MPI_Waitall(2 * size, q, MPI_STATUSES_IGNORE);
    int ok = 1;
    for (int p = 0; p < size; p++)
        for (size_t i = 0; i < n; i++)
            if (r[p * n + i] != pat(p, rank, i, 7))
                ok = 0;
    free(s);
    free(r);
    free(q);
    check(ok, "non-blocking all-pairs 64 KiB");
}

/* rank 0 receives from anyone, using probe for the size */
static void t_anysource_probe(void)
{
    int ok = 1;
    if (rank == 0) {
        for (int k = 1; k < size; k++) {
            MPI_Status st;
            int count;
            MPI_Probe(MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_INT, &count);
            int *b = malloc(sizeof(int) * (size_t)count);
            MPI_Recv(b, count, MPI_INT, st.MPI_SOURCE, 3, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            if (count != 1000 * st.MPI_SOURCE)
                ok = 0;
            for (int i = 0; i < count; i++)
                if (b[i] != st.MPI_SOURCE * i)
                    ok = 0;
            free(b);
        }
    } else {
        int count = 1000 * rank;
        int *b = malloc(sizeof(int) * (size_t)count);
        for (int i = 0; i < count; i++)
            b[i] = rank * i;
        MPI_Send(b, count, MPI_INT, 0, 3, MPI_COMM_WORLD);
        free(b);
    }
    check(ok, "any-source receive with probe");
}

/* a strided vector type (non-contiguous pack/unpack) */
static void t_datatype(void)
{
    MPI_Datatype vec;
    MPI_Type_vector(1000, 3, 7, MPI_DOUBLE, &vec);
    MPI_Type_commit(&vec);
    double *s = calloc(7000, sizeof(double)), *r = calloc(7000, sizeof(double));
    for (int i = 0; i < 7000; i++)
        s[i] = rank * 10000.0 + i;
    int to = (rank + 1) % size, from = (rank - 1 + size) % size;
    MPI_Sendrecv(s, 1, vec, to, 4, r, 1, vec, from, 4, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    int ok = 1;
    for (int b = 0; b < 1000; b++)
        for (int j = 0; j < 7; j++) {
            double want = j < 3 ? from * 10000.0 + b * 7 + j : 0.0;
            if (r[b * 7 + j] != want)
                ok = 0;
        }
    MPI_Type_free(&vec);
    free(s);
    free(r);
    check(ok, "derived datatype (vector)");
}

static void t_collectives(void)
{
    int ok = 1;
    /* bcast 1 MiB from the last rank */
    size_t n = 1 << 20;
    unsigned char *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = rank == size - 1 ? pat(size - 1, 0, i, 5) : 0;
    MPI_Bcast(b, (int)n, MPI_BYTE, size - 1, MPI_COMM_WORLD);
    for (size_t i = 0; i < n; i++)
        if (b[i] != pat(size - 1, 0, i, 5))
            ok = 0;
    free(b);
    check(ok, "bcast 1 MiB");
    ok = 1;
    long v[1000], sum[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = rank + i;
    MPI_Allreduce(v, sum, 1000, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 1000; i++)
        if (sum[i] != (long)size * (size - 1) / 2 + (long)size * i)
            ok = 0;
    check(ok, "allreduce");
    ok = 1;
    int *a = malloc(sizeof(int) * 4096 * size), *c = malloc(sizeof(int) * 4096 * size);
    for (int p = 0; p < size; p++)
        for (int i = 0; i < 4096; i++)
            a[p * 4096 + i] = rank * 1000000 + p * 10000 + i;
    MPI_Alltoall(a, 4096, MPI_INT, c, 4096, MPI_INT, MPI_COMM_WORLD);
    for (int p = 0; p < size; p++)
        for (int i = 0; i < 4096; i++)
            if (c[p * 4096 + i] != p * 1000000 + rank * 10000 + i)
                ok = 0;
    free(a);
    free(c);
    check(ok, "alltoall");
    MPI_Barrier(MPI_COMM_WORLD);
}

static void t_onesided(void)
{
    int n = 4096;
    long *mem;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)(n * sizeof(long)), sizeof(long), MPI_INFO_NULL,
                     MPI_COMM_WORLD, &mem, &win);
    for (int i = 0; i < n; i++)
        mem[i] = 0;
    int to = (rank + 1) % size, from = (rank - 1 + size) % size;
    long *src = malloc(sizeof(long) * (size_t)n), *got = malloc(sizeof(long) * (size_t)n);
    for (int i = 0; i < n; i++)
        src[i] = rank * 100000L + i;
    /* active target: put then get, fenced */
    MPI_Win_fence(0, win);
    MPI_Put(src, n, MPI_LONG, to, 0, n, MPI_LONG, win);
    MPI_Win_fence(0, win);
    int ok = 1;
    for (int i = 0; i < n; i++)
        if (mem[i] != from * 100000L + i)
            ok = 0;
    MPI_Get(got, n, MPI_LONG, to, 0, n, MPI_LONG, win);
    MPI_Win_fence(0, win);
    for (int i = 0; i < n; i++)
        if (got[i] != rank * 100000L + i)
            ok = 0;
    check(ok, "MPI_Put / MPI_Get with fence");
    /* passive target: everyone accumulates into rank 0 */
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < n; i++)
        src[i] = 1;
    if (rank == 0)
        for (int i = 0; i < n; i++)
            mem[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    MPI_Accumulate(src, n, MPI_LONG, 0, 0, n, MPI_LONG, MPI_SUM, win);
    MPI_Win_unlock(0, win);
    MPI_Barrier(MPI_COMM_WORLD);
    ok = 1;
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        for (int i = 0; i < n; i++)
            if (mem[i] != size)
                ok = 0;
        MPI_Win_unlock(0, win);
    }
    check(ok, "MPI_Accumulate, passive target (lock/unlock)");
    free(src);
    free(got);
    MPI_Win_free(&win);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    t_pairs();
    t_alloc_mem();
    t_nonblocking();
    t_anysource_probe();
    t_datatype();
    t_collectives();
    t_onesided();
    if (rank == 0)
        printf("mpi_check: %d ranks: %d passed, %d failed\n", size, passed,
               failed);
    MPI_Finalize();
    return failed != 0;
}
