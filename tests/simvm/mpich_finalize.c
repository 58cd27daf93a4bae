/*
 * MPI_Finalize for MPICH before 4.2 over UCX (linked into the MPICH build of
 * mpi_check by test_ucx_mpich.sh): one message to every other rank, a PMI
 * barrier, then MPICH's own finalize.
 *
 * Why: MPICH 4.0.2's ch4:ucx finalize closes every endpoint in flush mode,
 * progresses until its own closes are done, and only then waits in a PMI
 * barrier, which does not progress UCX. UCX's tcp transport flushes an
 * endpoint that sent anything since its last flush (an acknowledgement
 * counts) with a zero-length put that the peer must acknowledge; an
 * endpoint that sent nothing is flushed at once. So a rank with nothing to
 * flush towards a peer ends its closes, sits in the PMI barrier, and the
 * peer's close waits for its ack for ever (docs/ucx.md, "MPICH 4.0.2's
 * finalize"). Here every pair of ranks has something to flush on both
 * sides (the message each way), and after the PMI barrier no rank
 * progresses UCX before it has issued all its closes: each peer's close
 * put reaches a rank ahead of the ack that rank waits for (one connection,
 * in order), so it is answered inside the close loop. MPICH 4.2 orders its
 * finalize this way itself (pmodels/mpich 08d8105, d6c7cd5). Endpoints of
 * the region need neither: a committed message is in the peer's queue.
 *
 * The barrier speaks hydra's PMI-1 wire protocol on $PMI_FD, the simple
 * PMI that MPICH uses there (its PMI_Barrier is not exported); MPICH is
 * between PMI calls here. Without $PMI_FD (a singleton) it does nothing.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int pmi_barrier(int fd)
{
    static const char in[] = "cmd=barrier_in\n";
    char line[256];
    size_t n = 0;
    if (write(fd, in, sizeof(in) - 1) != (ssize_t)(sizeof(in) - 1))
        return -1;
    for (;;) { /* one reply line: cmd=barrier_out */
        char c;
        if (read(fd, &c, 1) != 1)
            return -1;
        if (c == '\n')
            break;
        if (n < sizeof(line) - 1)
            line[n++] = c;
    }
    line[n] = '\0';
    return strstr(line, "cmd=barrier_out") != NULL ? 0 : -1;
}

/* one message each way between every pair of ranks */
static void touch_every_peer(void)
{
    int rank, size, out = 1, in;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int d = 1; d < size; d++)
        MPI_Sendrecv(&out, 1, MPI_INT, (rank + d) % size, 0, &in, 1, MPI_INT,
                     (rank - d + size) % size, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
}

int MPI_Finalize(void)
{
    const char *fd = getenv("PMI_FD");
    touch_every_peer();
    if (fd != NULL && pmi_barrier(atoi(fd)) != 0)
        fprintf(stderr, "mpich_finalize: the PMI barrier before "
                        "MPI_Finalize failed\n");
    return PMPI_Finalize();
}
