//go:build ignore

// allreduce_mpi times MPI_Allreduce (float32 sum) call by call, for the
// side-by-side comparison with goccl's host backend (bench/mpi/compare).
// Usage: mpirun -np N allreduce_mpi MINBYTES MAXBYTES ITERS WARMUP FIRST
// (FIRST: extra warm-up calls of the smallest size, as gocclar -W).
// Rank 0 prints one line per size: "bytes median_us"; every rank checks
// the result of the last call and exits 1 if it is wrong.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc != 6) {
		if (rank == 0) fprintf(stderr, "usage: allreduce_mpi MINBYTES MAXBYTES ITERS WARMUP FIRST\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	long minb = atol(argv[1]), maxb = atol(argv[2]);
	int iters = atoi(argv[3]), warmup = atoi(argv[4]), first = atoi(argv[5]);
	size_t maxn = (size_t)maxb / sizeof(float);
	float *send = malloc(maxn * sizeof(float) + 64), *recv = malloc(maxn * sizeof(float) + 64);
	double *t = malloc(sizeof(double) * (size_t)iters);
	if (!send || !recv || !t) MPI_Abort(MPI_COMM_WORLD, 1);
	for (size_t i = 0; i < maxn; i++) send[i] = (float)((rank + 1) * (int)(i % 1000));
	memset(recv, 0, maxn * sizeof(float));
	int bad = 0;
	for (long bytes = minb; bytes <= maxb; bytes *= 2) {
		int n = (int)(bytes / (long)sizeof(float));
		for (int i = 0; i < warmup + (bytes == minb ? first : 0); i++) MPI_Allreduce(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		for (int i = 0; i < iters; i++) {
			double t0 = MPI_Wtime();
			MPI_Allreduce(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			t[i] = MPI_Wtime() - t0;
		}
		float ranks = (float)(size * (size + 1) / 2);
		for (int i = 0; i < n; i++)
			if (recv[i] != ranks * (float)(i % 1000)) bad = 1;
		qsort(t, (size_t)iters, sizeof(double), cmp);
		if (rank == 0) printf("%ld %.3f\n", bytes, t[iters / 2] * 1e6);
		fflush(stdout);
	}
	MPI_Finalize();
	return bad;
}
