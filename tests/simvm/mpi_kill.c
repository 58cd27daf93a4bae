/*
 * A rank killed in the middle of large transfers (test_ucx_fail.sh: Open
 * MPI's pml ucx across the simulated VMs). Ranks 0 and 1 (two co-resident
 * VMs: the region carries them) exchange 4 MiB messages each round, rank 2
 * (a VM of another host) 256 KiB ones with rank 0; every payload is
 * checked. In round KILL_ROUND rank 1 posts its transfers, lets them run
 * for a few milliseconds and kills itself (SIGKILL). The job must then
 * end with an error, not hang, and no surviving rank may have taken a
 * wrong payload: each prints "mpi_kill: rank R: wrong payload ..." if it
 * did.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BIG (4 << 20)
#define SMALL (256 << 10)
#define ROUNDS 1000
#define KILL_ROUND 3

static unsigned char pat(int from, int round, size_t i)
{
    return (unsigned char)(from * 31 + round * 7 + i * 13 + (i >> 10));
}

/* partner p of rank r, and the size they exchange: 0-1 big, 0-2 small */
static int partners(int r, int size, int *p, int *len)
{
    int n = 0;
    if (size < 3)
        return 0;
    if (r == 0) {
        p[n] = 1, len[n++] = BIG;
        p[n] = 2, len[n++] = SMALL;
    } else if (r == 1 || r == 2) {
        p[n] = 0, len[n++] = r == 1 ? BIG : SMALL;
    }
    return n;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int rank, size, p[2], len[2];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int n = partners(rank, size, p, len);
    unsigned char *tx[2], *rx[2];
    for (int k = 0; k < n; k++) {
        tx[k] = malloc(len[k]);
        rx[k] = malloc(len[k]);
    }
    for (int round = 0; round < ROUNDS; round++) {
        MPI_Request req[4];
        for (int k = 0; k < n; k++) {
            for (int i = 0; i < len[k]; i++)
                tx[k][i] = pat(rank, round, i);
            memset(rx[k], 0, len[k]);
            MPI_Irecv(rx[k], len[k], MPI_BYTE, p[k], round, MPI_COMM_WORLD,
                      &req[2 * k]);
            MPI_Isend(tx[k], len[k], MPI_BYTE, p[k], round, MPI_COMM_WORLD,
                      &req[2 * k + 1]);
        }
        if (rank == 1 && round == KILL_ROUND) {
            /* let the transfers start: part of each message is through */
            int done;
            for (double t0 = now(); now() - t0 < 0.005;)
                MPI_Testall(2, req, &done, MPI_STATUSES_IGNORE);
            printf("mpi_kill: rank 1 killed in the middle of round %d's "
                   "transfers\n", round);
            fflush(stdout);
            raise(SIGKILL);
        }
        MPI_Waitall(2 * n, req, MPI_STATUSES_IGNORE);
        for (int k = 0; k < n; k++) {
            for (int i = 0; i < len[k]; i++) {
                if (rx[k][i] != pat(p[k], round, i)) {
                    printf("mpi_kill: rank %d: wrong payload from rank %d in "
                           "round %d at byte %d\n", rank, p[k], round, i);
                    fflush(stdout);
                    MPI_Abort(MPI_COMM_WORLD, 2);
                }
            }
        }
        if (rank == 0 && round == KILL_ROUND - 1) {
            printf("mpi_kill: rank 0: rounds 0-%d checked\n", round);
            fflush(stdout);
        }
    }
    printf("mpi_kill: rank %d: all %d rounds done (rank 1 was not killed)\n",
           rank, ROUNDS);
    MPI_Finalize();
    return 1;
}
