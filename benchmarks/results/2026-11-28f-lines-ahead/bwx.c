#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int r; MPI_Comm_rank(MPI_COMM_WORLD, &r);
    static char buf[64][8192]; char ack[4];
    MPI_Request q[64];
    for (int a = 1; a < argc; a++) {
        int n = atoi(argv[a]);
        for (int rep = 0; rep < 3; rep++) {
            int iters = getenv("IT") ? atoi(getenv("IT")) : 3000;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                if (r == 0) {
                    for (int w = 0; w < 64; w++) MPI_Isend(buf[w], n, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &q[w]);
                    MPI_Waitall(64, q, MPI_STATUSES_IGNORE);
                    MPI_Recv(ack, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    for (int w = 0; w < 64; w++) MPI_Irecv(buf[w], n, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &q[w]);
                    MPI_Waitall(64, q, MPI_STATUSES_IGNORE);
                    MPI_Send(ack, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
                }
            }
            double t = MPI_Wtime() - t0;
            if (r == 0) printf("%d %.2f Mmsg/s\n", n, 64.0 * iters / t / 1e6);
        }
    }
    MPI_Finalize();
}
