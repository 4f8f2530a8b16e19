/* The MPI side of `volley bench`'s collective rows, measured exactly as Volley's:
 * MPI_Barrier timed on rank 0 per call; MPI_Bcast from rank 0 after an
 * MPI_Barrier, timed per call on every rank, each rank's median, p90 and p99
 * averaged over the ranks (the OSU osu_bcast figure). Prints
 * "barrier 0 <median> <p90> <p99>" and "bcast <bytes> <median> <p90> <p99>" in
 * microseconds. Usage: mpi_coll BARRIERS SMALL MEDIUM LARGE (iterations at 8 B,
 * 16 KiB and 1 MiB). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void pct(double *v, int n, double out[3]) {
    qsort(v, n, sizeof *v, cmp);
    out[0] = v[n / 2];
    out[1] = v[n * 90 / 100];
    out[2] = v[n * 99 / 100];
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters[4];
    for (int k = 0; k < 4; k++) iters[k] = argc > 1 + k ? atoi(argv[1 + k]) : 0;
    if (argc != 5 || iters[0] < 1 || iters[1] < 1 || iters[2] < 1 || iters[3] < 1) {
        if (rank == 0) fprintf(stderr, "mpi_coll: BARRIERS SMALL MEDIUM LARGE, each >= 1\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int most = iters[0];
    for (int k = 1; k < 4; k++) most = iters[k] > most ? iters[k] : most;
    double *t = malloc(sizeof(double) * (most + most / 10 + 1));
    int warm = iters[0] / 10;
    for (int i = 0; i < warm + iters[0]; i++) {
        double t0 = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        if (i >= warm) t[i - warm] = (MPI_Wtime() - t0) * 1e6;
    }
    double p[3], sum[3];
    if (rank == 0) {
        pct(t, iters[0], p);
        printf("barrier 0 %.4f %.4f %.4f\n", p[0], p[1], p[2]);
    }
    const int sizes[3] = {8, 16 << 10, 1 << 20};
    char *buf = malloc(1 << 20);
    memset(buf, 0xA5, 1 << 20);
    for (int s = 0; s < 3; s++) {
        int n = iters[1 + s];
        warm = n / 10;
        for (int i = 0; i < warm + n; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            MPI_Bcast(buf, sizes[s], MPI_CHAR, 0, MPI_COMM_WORLD);
            if (i >= warm) t[i - warm] = (MPI_Wtime() - t0) * 1e6;
        }
        pct(t, n, p);
        MPI_Reduce(p, sum, 3, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0)
            printf("bcast %d %.4f %.4f %.4f\n", sizes[s], sum[0] / size, sum[1] / size, sum[2] / size);
    }
    free(t);
    free(buf);
    MPI_Finalize();
    return 0;
}
