/*
 * The two jobs of tests/simvm/test_quota.sh, one region between them.
 *
 *   mpi_quota hog READY DONE  (under libivshm-heap.so) allocates ordinary
 *       arrays, 1 MiB and then 64 KiB (one chunk) at a time, until they
 *       stop coming from the region, writes every byte, creates READY
 *       (rank 0) and stays alive until DONE exists (at most 120 s); then
 *       checks and frees its arrays.
 *   mpi_quota work  point-to-point messages and collectives, every value
 *       checked; "mpi_quota work: N ranks: passed" when all is right.
 */
#include <mpi.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ivshm/heap.h>

typedef void (*stats_fn)(ivshm_heap_stats_t *);

static uint64_t region_allocs(stats_fn stats)
{
    ivshm_heap_stats_t s;
    stats(&s);
    return s.region_allocs;
}

#define MAX_ARRAYS 4096

static int hog(int rank, const char *ready, const char *done)
{
    /* found by name: the heap is preloaded, not linked */
    stats_fn stats = (stats_fn)dlsym(RTLD_DEFAULT, "ivshm_heap_stats");
    if (!stats) {
        fprintf(stderr, "mpi_quota hog: no region heap (LD_PRELOAD)\n");
        return 1;
    }
    MPI_Barrier(MPI_COMM_WORLD); /* the world's collective area first */
    static unsigned char *arrays[MAX_ARRAYS];
    static size_t sizes[MAX_ARRAYS];
    size_t n = 0, in_region = 0;
    const size_t steps[2] = {1 << 20, 64 << 10};
    for (int s = 0; s < 2; s++)
        while (n < MAX_ARRAYS) {
            uint64_t before = region_allocs(stats);
            unsigned char *p = malloc(steps[s]);
            if (!p)
                break;
            memset(p, (int)(n & 0xff), steps[s]);
            arrays[n] = p;
            sizes[n++] = steps[s];
            if (region_allocs(stats) == before)
                break; /* private: the region gives no more */
            in_region += steps[s];
        }
    printf("mpi_quota hog: rank %d: %zu bytes of arrays from the region, "
           "then private\n", rank, in_region);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        FILE *f = fopen(ready, "w");
        if (f)
            fclose(f);
        struct stat st;
        for (int i = 0; i < 2400 && stat(done, &st) != 0; i++)
            usleep(50000);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < sizes[i]; k += 4096)
            bad += arrays[i][k] != (unsigned char)(i & 0xff);
        free(arrays[i]);
    }
    if (bad)
        printf("mpi_quota hog: rank %d: %d pages changed\n", rank, bad);
    return bad != 0;
}

static int work(int rank, int size)
{
    int bad = 0;
    const int lens[] = {8, 4000, 70000, 1 << 20};
    for (int t = 0; t < 4; t++) {
        int len = lens[t];
        char *buf = malloc((size_t)len);
        if (rank == 0) {
            for (int i = 0; i < len; i++)
                buf[i] = (char)(i * 7 + t);
            for (int p = 1; p < size; p++)
                MPI_Send(buf, len, MPI_CHAR, p, t, MPI_COMM_WORLD);
        } else {
            MPI_Recv(buf, len, MPI_CHAR, 0, t, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            for (int i = 0; i < len; i++)
                bad += buf[i] != (char)(i * 7 + t);
        }
        free(buf);
    }
    for (int i = 0; i < 100; i++) {
        long v = rank + i, sum = 0, root = rank == 0 ? i : -1;
        MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        bad += sum != (long)size * (size - 1) / 2 + (long)size * i;
        MPI_Bcast(&root, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        bad += root != i;
    }
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_quota work: %d ranks: %s\n", size,
               all ? "FAILED" : "passed");
    return all != 0;
}

int main(int argc, char **argv)
{
    int rank, size, rc = 2;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc == 4 && strcmp(argv[1], "hog") == 0)
        rc = hog(rank, argv[2], argv[3]);
    else if (argc == 2 && strcmp(argv[1], "work") == 0)
        rc = work(rank, size);
    else if (rank == 0)
        fprintf(stderr, "usage: mpi_quota hog READY DONE | work\n");
    MPI_Finalize();
    return rc;
}
