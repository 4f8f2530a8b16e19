/* The MPI side of the start-up rows of `benches/hosts_scale.rs`: MPI_Init and one
 * MPI_Barrier, then rank 0 prints the wall-clock time ("startup-done NANOS", since
 * the epoch), as `volley worker startup` does. Every rank then leaves at once: with
 * more ranks than cores, MPICH's MPI_Finalize over TCP can spin for minutes, and
 * the start-up is what is measured. */
#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    if (rank == 0) printf("startup-done %lld\n", (long long)t.tv_sec * 1000000000LL + t.tv_nsec);
    fflush(stdout);
    _exit(0);
}
