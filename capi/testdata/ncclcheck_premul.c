/*
 * ncclcheck_premul.c: ncclcheck's checks of the scaled sums
 * (ncclRedOpCreatePreMulSum) and the 8-bit floats.
 */
#include "ncclcheck.h"

/* ---- scaled sums and the 8-bit floats ---- */

/* The 8-bit floats' values, by their definitions (OCP E4M3: bias 7, no
 * infinity; E5M2: bias 15). */
static double f8_value(ncclDataType_t t, uint8_t b) {
  const int m3 = t == ncclFloat8e4m3, mb = m3 ? 3 : 2, bias = m3 ? 7 : 15;
  const int e = (b & 0x7f) >> mb, m = b & ((1 << mb) - 1);
  double v = e == 0 ? ldexp(m, 1 - bias - mb) : ldexp((1 << mb) + m, e - bias - mb);
  return b & 0x80 ? -v : v;
}

/* f8_code finds the code of v, which the tests keep exact. */
static uint8_t f8_code(ncclDataType_t t, double v) {
  for (int c = 0; c < 256; c++)
    if (f8_value(t, (uint8_t)c) == v && !(v == 0 && c != 0)) return (uint8_t)c;
  return 0x7f;
}

/* Rank r's scalar (each rank its own, as NCCL allows). */
static double premul_scalar(int r, int isunsigned) { return isunsigned ? 1 + r % 3 : (r % 2 ? -2 : 1 + r); }

void check_premulsum(ncclComm_t comm) {
  const size_t n = 517;
  char name[128];
  int seed = 500;
  for (size_t di = 0; di < ndtypes; di++, seed++) {
    const dtype* d = &dtypes[di];
    for (int byaddr = 0; byaddr < 2; byaddr++) {
      uint64_t cell = 0; /* the scalar as the element type */
      put(d, &cell, 0, byaddr ? 99 : premul_scalar(rank, d->isunsigned));
      ncclRedOp_t op;
      MUST(ncclRedOpCreatePreMulSum(&op, &cell, d->t, byaddr ? ncclScalarDevice : ncclScalarHostImmediate, comm));
      cell = 0; /* by value: too late to matter; by address: read by the call */
      put(d, &cell, 0, byaddr ? premul_scalar(rank, d->isunsigned) : 99);
      void* send = poisoned(n * d->size);
      void* recv = poisoned(n * d->size);
      fill(d, send, seed, rank, n, 0);
      MUST(ncclAllReduce(send, recv, n, d->t, op, comm, NULL));
      size_t bad = 0, first = 0;
      double want0 = 0;
      for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < nranks; r++) want += value(seed, r, i, 0, d->isunsigned) * premul_scalar(r, d->isunsigned);
        if (d->isunsigned) want = (double)(uint64_t)(int64_t)want; /* (never negative here) */
        if (get(d, recv, i) != want && bad++ == 0) first = i, want0 = want;
      }
      snprintf(name, sizeof name, "premulsum/allreduce/%s/%s", d->name, byaddr ? "device" : "immediate");
      CHECK(name, bad == 0, "%zu wrong, first at %zu: %g want %g", bad, first, get(d, recv, first), want0);
      /* ReduceScatter in place. */
      const size_t rc = 33;
      void* big = poisoned(rc * nranks * d->size);
      fill(d, big, seed + 50, rank, rc * nranks, 0);
      char* mine = (char*)big + rank * rc * d->size;
      MUST(ncclReduceScatter(big, mine, rc, d->t, op, comm, NULL));
      bad = 0;
      for (size_t i = 0; i < rc; i++) {
        double want = 0;
        for (int r = 0; r < nranks; r++)
          want += value(seed + 50, r, rank * rc + i, 0, d->isunsigned) * premul_scalar(r, d->isunsigned);
        bad += get(d, mine, i) != want;
      }
      snprintf(name, sizeof name, "premulsum/reducescatter-inplace/%s/%s", d->name, byaddr ? "device" : "immediate");
      CHECK(name, bad == 0, "%zu wrong", bad);
      MUST(ncclRedOpDestroy(op, comm));
      free(big);
      free(send);
      free(recv);
    }
  }

  /* The 8-bit floats: sums of small integers (exact in both), a Reduce
   * and a PreMulSum by 1 or 2. */
  const ncclDataType_t f8[] = {ncclFloat8e4m3, ncclFloat8e5m2};
  const char* f8names[] = {"f8e4m3", "f8e5m2"};
  for (int k = 0; k < 2; k++, seed++) {
    const ncclDataType_t t = f8[k];
    uint8_t* send = poisoned(n);
    uint8_t* recv = poisoned(n);
    for (size_t i = 0; i < n; i++) send[i] = f8_code(t, (double)(mix(seed * 977 + rank * 131 + i) % 5) - 2);
    MUST(ncclAllReduce(send, recv, n, t, ncclSum, comm, NULL));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
      double want = 0;
      for (int r = 0; r < nranks; r++) want += (double)(mix(seed * 977 + r * 131 + i) % 5) - 2;
      bad += f8_value(t, recv[i]) != want;
    }
    snprintf(name, sizeof name, "fp8/allreduce/%s/sum", f8names[k]);
    CHECK(name, bad == 0, "%zu wrong", bad);

    for (size_t i = 0; i < n; i++) send[i] = f8_code(t, (double)(mix(seed * 31 + rank * 7 + i) % 3) - 1);
    uint8_t two = f8_code(t, 1 + rank % 2);
    ncclRedOp_t op;
    MUST(ncclRedOpCreatePreMulSum(&op, &two, t, ncclScalarHostImmediate, comm));
    memset(recv, 0xA5, n);
    MUST(ncclReduce(send, recv, n, t, op, 0, comm, NULL));
    bad = 0;
    if (rank == 0)
      for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < nranks; r++) want += ((double)(mix(seed * 31 + r * 7 + i) % 3) - 1) * (1 + r % 2);
        bad += f8_value(t, recv[i]) != want;
      }
    snprintf(name, sizeof name, "fp8/reduce/%s/premulsum", f8names[k]);
    CHECK(name, bad == 0, "%zu wrong", bad);
    MUST(ncclRedOpDestroy(op, comm));
    free(send);
    free(recv);
  }
}

