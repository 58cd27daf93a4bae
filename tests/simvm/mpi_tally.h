/* Shared by the MPI test programs: a check holds only when it holds on
 * every rank; rank 0 names each that failed ("NAME: FAILED what", NAME
 * from TALLY_NAME) and the program prints its tally at the end. */
#ifndef MPI_TALLY_H
#define MPI_TALLY_H

#include <mpi.h>
#include <stdio.h>

static int rank, size, passed, failed;

static void check(int ok, const char *what)
{
    int all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (all_ok)
        passed++;
    else
        failed++;
    if (rank == 0 && !all_ok)
        printf(TALLY_NAME ": FAILED %s\n", what);
}

#endif
