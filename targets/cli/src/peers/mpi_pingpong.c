/* The MPI side of `volley bench --peers`: 8-byte and 1 MiB one-way latency (half a
 * blocking ping-pong, per iteration; 1 MiB takes ITERS / 100 iterations, the OSU
 * proportion) and 1 MiB streaming bandwidth (a window of 32 non-blocking sends, then
 * a 4-byte ack, per round), as the OSU benchmarks measure them. Rank 0 prints
 * "lat <bytes> <median> <p90> <p99>" in microseconds and "bw <bytes> <median> <p90>
 * <p99>" in MB/s. Usage: mpi_pingpong ITERS ROUNDS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, int bytes, double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    printf("%s %d %.4f %.4f %.4f\n", what, bytes, v[n / 2], v[n * 90 / 100], v[n * 99 / 100]);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    int rounds = argc > 2 ? atoi(argv[2]) : 20;
    if (size != 2 || iters < 1 || rounds < 1) {
        if (rank == 0) fprintf(stderr, "mpi_pingpong: 2 ranks, ITERS >= 1, ROUNDS >= 1\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int peer = 1 - rank;
    char small[8] = {0};
    enum { WINDOW = 32, LEN = 1 << 20 };
    char *big = malloc((size_t)LEN * WINDOW);
    memset(big, rank + 1, (size_t)LEN * WINDOW);
    double *lat = malloc(sizeof(double) * iters);
    for (int big_msg = 0; big_msg < 2; big_msg++) {
        int len = big_msg ? LEN : 8, n = big_msg ? (iters / 100 > 0 ? iters / 100 : 1) : iters;
        char *buf = big_msg ? big : small;
        int warm = n / 10 + 1;
        for (int i = 0; i < warm + n; i++) {
            double t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(buf, len, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, len, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (i >= warm) lat[i - warm] = (MPI_Wtime() - t0) * 1e6 / 2;
            } else {
                MPI_Recv(buf, len, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, len, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
            }
        }
        if (rank == 0) report("lat", len, lat, n);
    }

    MPI_Request req[WINDOW];
    MPI_Status st[WINDOW];
    double *bw = malloc(sizeof(double) * rounds);
    for (int r = 0; r < rounds + 2; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int w = 0; w < WINDOW; w++) {
            if (rank == 0)
                MPI_Isend(big + (size_t)w * LEN, LEN, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[w]);
            else
                MPI_Irecv(big + (size_t)w * LEN, LEN, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[w]);
        }
        MPI_Waitall(WINDOW, req, st);
        if (rank == 0) {
            MPI_Recv(small, 4, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (r >= 2) bw[r - 2] = (double)LEN * WINDOW / (MPI_Wtime() - t0) / 1e6;
        } else {
            MPI_Send(small, 4, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) report("bw", LEN, bw, rounds);
    free(lat);
    free(big);
    free(bw);
    MPI_Finalize();
    return 0;
}
