/*
 * MPI_Finalize for MPICH before 4.2 over UCX (linked into the MPICH build of
 * mpi_check by test_ucx_mpich.sh): a PMI barrier first, then MPICH's own
 * finalize.
 *
 * Why: MPICH 4.0.2's ch4:ucx finalize closes every endpoint in flush mode,
 * progresses until its closes are done, and only then waits in a PMI
 * barrier, which does not progress UCX. UCX's tcp transport flushes an
 * endpoint that sent anything since its last flush (a put's ack counts)
 * with a zero-length put that the peer must acknowledge. A rank whose
 * closes were acknowledged while a slower peer was still inside its last
 * MPI call (that peer's ack marked its own endpoint for a flush) sits in
 * the PMI barrier when that peer's close asks it for the ack: both wait
 * for ever (docs/ucx.md, "MPICH 4.0.2's finalize"). MPICH 4.2 moved the
 * barrier ahead of the closes (pmodels/mpich 08d8105, d6c7cd5); this does
 * the same from outside: after it no rank progresses UCX before it has
 * issued its own closes, so each peer's close reaches a rank before the
 * ack it waits for, and is answered.
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

int MPI_Finalize(void)
{
    const char *fd = getenv("PMI_FD");
    if (fd != NULL && pmi_barrier(atoi(fd)) != 0)
        fprintf(stderr, "mpich_finalize: the PMI barrier before "
                        "MPI_Finalize failed\n");
    return PMPI_Finalize();
}
