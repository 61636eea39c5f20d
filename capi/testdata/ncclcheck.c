/*
 * ncclcheck: a C program written against include/nccl.h and linked with
 * libnccl.so.2, run as several ranks (RANK, WORLD_SIZE from the launcher)
 * over goccl's host backend with host buffers. Each mode checks results
 * against a reference every rank computes by regenerating every rank's
 * input, with poisoned outputs; it prints "ok NAME", "skip NAME: why" or
 * "FAIL NAME: why" per check and exits 1 when a check failed.
 *
 *   ncclcheck basic | nonblocking | abort | abortthread | initall | cycles N | bench N
 *
 * Rank 0's unique id reaches the others through a file in $NCCLCHECK_DIR.
 * ncclcheck_premul.c holds the checks of the scaled sums and 8-bit floats.
 */
#include "ncclcheck.h"

/* Not in nccl.h: the device API's host entry points, exported anyway. */
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* out);

int rank, nranks, failures;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- id exchange ---- */

static void id_path(char* buf, size_t n, const char* tag) {
  const char* dir = getenv("NCCLCHECK_DIR");
  snprintf(buf, n, "%s/id.%s", dir ? dir : "/tmp", tag);
}

static ncclUniqueId share_id(const char* tag) {
  ncclUniqueId id;
  char path[512], tmp[600];
  id_path(path, sizeof path, tag);
  if (rank == 0) {
    MUST(ncclGetUniqueId(&id));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
      printf("FAIL writing %s: %s\n", path, strerror(errno));
      exit(1);
    }
    return id;
  }
  for (int i = 0; i < 60000; i++) {
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t got = fread(&id, sizeof id, 1, f);
      fclose(f);
      if (got == 1) return id;
    }
    sleep_ms(5);
  }
  printf("FAIL no id at %s\n", path);
  exit(1);
}

static ncclComm_t init_comm(const char* tag) {
  ncclUniqueId id = share_id(tag);
  ncclComm_t c = NULL;
  MUST(ncclCommInitRank(&c, nranks, id, rank));
  return c;
}

/* ---- data ---- */

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Small integers, so that every type holds them and every sum is exact;
 * products use {-1, 1, 2} (unsigned: {1, 2}). */
double value(int seed, int r, size_t i, int prod, int isunsigned) {
  uint64_t h = mix(((uint64_t)seed << 40) ^ ((uint64_t)r << 32) ^ i);
  if (prod) {
    static const double p[] = {-1, 1, 2};
    return isunsigned ? (double)(1 + h % 2) : p[h % 3];
  }
  return isunsigned ? (double)(h % 9) : (double)((int)(h % 17) - 8);
}


const dtype dtypes[] = {
    {ncclInt8, "int8", 1, 0, 0},     {ncclUint8, "uint8", 1, 0, 1},   {ncclInt32, "int32", 4, 0, 0},
    {ncclUint32, "uint32", 4, 0, 1}, {ncclInt64, "int64", 8, 0, 0},   {ncclUint64, "uint64", 8, 0, 1},
    {ncclFloat32, "float", 4, 1, 0}, {ncclFloat64, "double", 8, 1, 0},
};
const size_t ndtypes = sizeof dtypes / sizeof dtypes[0];

void put(const dtype* d, void* buf, size_t i, double v) {
  switch (d->t) {
    case ncclInt8: ((int8_t*)buf)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t*)buf)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t*)buf)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t*)buf)[i] = (uint32_t)v; break;
    case ncclInt64: ((int64_t*)buf)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t*)buf)[i] = (uint64_t)v; break;
    case ncclFloat32: ((float*)buf)[i] = (float)v; break;
    case ncclFloat64: ((double*)buf)[i] = v; break;
    default: break;
  }
}

double get(const dtype* d, const void* buf, size_t i) {
  switch (d->t) {
    case ncclInt8: return ((const int8_t*)buf)[i];
    case ncclUint8: return ((const uint8_t*)buf)[i];
    case ncclInt32: return ((const int32_t*)buf)[i];
    case ncclUint32: return ((const uint32_t*)buf)[i];
    case ncclInt64: return (double)((const int64_t*)buf)[i];
    case ncclUint64: return (double)((const uint64_t*)buf)[i];
    case ncclFloat32: return ((const float*)buf)[i];
    case ncclFloat64: return ((const double*)buf)[i];
    default: return NAN;
  }
}

/* The reduction of every rank's element i of input seed, as the element
 * type computes it (integer average truncates). */
static double reduce_ref(const dtype* d, ncclRedOp_t op, int seed, size_t i) {
  int prod = op == ncclProd;
  double acc = value(seed, 0, i, prod, d->isunsigned);
  for (int r = 1; r < nranks; r++) {
    double v = value(seed, r, i, prod, d->isunsigned);
    switch (op) {
      case ncclSum: case ncclAvg: acc += v; break;
      case ncclProd: acc *= v; break;
      case ncclMax: acc = v > acc ? v : acc; break;
      case ncclMin: acc = v < acc ? v : acc; break;
      default: break;
    }
  }
  if (op == ncclAvg) {
    if (d->t == ncclFloat32) return (double)((float)acc / (float)nranks);
    if (d->isfloat) return acc / nranks;
    return trunc(acc / nranks);
  }
  return acc;
}

void* poisoned(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  memset(p, 0xA5, bytes);
  return p;
}

void fill(const dtype* d, void* buf, int seed, int r, size_t n, int prod) {
  for (size_t i = 0; i < n; i++) put(d, buf, i, value(seed, r, i, prod, d->isunsigned));
}

/* ---- collectives ---- */

static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
static const char* opnames[] = {"sum", "prod", "max", "min", "avg"};

static void check_collectives(ncclComm_t comm) {
  const size_t n = 1031; /* odd, so that tails are exercised */
  int seed = 1;
  char name[128];
  for (size_t di = 0; di < ndtypes; di++) {
    const dtype* d = &dtypes[di];
    for (int oi = 0; oi < 5; oi++, seed++) {
      ncclRedOp_t op = ops[oi];
      int prod = op == ncclProd;
      void* send = poisoned(n * d->size);
      void* recv = poisoned(n * d->size);
      fill(d, send, seed, rank, n, prod);
      MUST(ncclAllReduce(send, recv, n, d->t, op, comm, NULL));
      size_t bad = 0, first = 0;
      for (size_t i = 0; i < n; i++) {
        if (get(d, recv, i) != reduce_ref(d, op, seed, i) && bad++ == 0) first = i;
      }
      snprintf(name, sizeof name, "allreduce/%s/%s", d->name, opnames[oi]);
      CHECK(name, bad == 0, "%zu wrong, first at %zu: %g want %g", bad, first, get(d, recv, first), reduce_ref(d, op, seed, first));

      /* In place. */
      fill(d, recv, seed, rank, n, prod);
      MUST(ncclAllReduce(recv, recv, n, d->t, op, comm, NULL));
      bad = 0;
      for (size_t i = 0; i < n; i++) bad += get(d, recv, i) != reduce_ref(d, op, seed, i);
      snprintf(name, sizeof name, "allreduce-inplace/%s/%s", d->name, opnames[oi]);
      CHECK(name, bad == 0, "%zu wrong", bad);

      /* Reduce to a root that is not 0 where there is one. */
      int root = (nranks - 1) % nranks;
      memset(recv, 0xA5, n * d->size);
      MUST(ncclReduce(send, recv, n, d->t, op, root, comm, NULL));
      bad = 0;
      if (rank == root) {
        for (size_t i = 0; i < n; i++) bad += get(d, recv, i) != reduce_ref(d, op, seed, i);
      }
      snprintf(name, sizeof name, "reduce/%s/%s", d->name, opnames[oi]);
      CHECK(name, bad == 0, "%zu wrong at root %d", bad, root);

      /* ReduceScatter: block r of the reduction of n*nranks elements. */
      size_t rc = 67;
      void* big = poisoned(rc * nranks * d->size);
      void* part = poisoned(rc * d->size);
      fill(d, big, seed + 1000, rank, rc * nranks, prod);
      MUST(ncclReduceScatter(big, part, rc, d->t, op, comm, NULL));
      bad = 0;
      for (size_t i = 0; i < rc; i++) bad += get(d, part, i) != reduce_ref(d, op, seed + 1000, rank * rc + i);
      snprintf(name, sizeof name, "reducescatter/%s/%s", d->name, opnames[oi]);
      CHECK(name, bad == 0, "%zu wrong", bad);
      free(big);
      free(part);
      free(send);
      free(recv);
    }

    /* Broadcast from the last rank, and the in-place ncclBcast. */
    int root = nranks - 1;
    void* buf = poisoned(n * d->size);
    void* out = poisoned(n * d->size);
    fill(d, buf, seed, rank, n, 0);
    MUST(ncclBroadcast(buf, out, n, d->t, root, comm, NULL));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += get(d, out, i) != value(seed, root, i, 0, d->isunsigned);
    snprintf(name, sizeof name, "broadcast/%s", d->name);
    CHECK(name, bad == 0, "%zu wrong", bad);
    MUST(ncclBcast(buf, n, d->t, 0, comm, NULL));
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += get(d, buf, i) != value(seed, 0, i, 0, d->isunsigned);
    snprintf(name, sizeof name, "bcast/%s", d->name);
    CHECK(name, bad == 0, "%zu wrong", bad);
    free(buf);
    free(out);

    /* AllGather. */
    size_t sc = 129;
    void* mine = poisoned(sc * d->size);
    void* all = poisoned(sc * nranks * d->size);
    fill(d, mine, seed + 7, rank, sc, 0);
    MUST(ncclAllGather(mine, all, sc, d->t, comm, NULL));
    bad = 0;
    for (int r = 0; r < nranks; r++)
      for (size_t i = 0; i < sc; i++) bad += get(d, all, r * sc + i) != value(seed + 7, r, i, 0, d->isunsigned);
    snprintf(name, sizeof name, "allgather/%s", d->name);
    CHECK(name, bad == 0, "%zu wrong", bad);
    free(mine);
    free(all);
  }
}

/* A call the backend cannot make yet (ErrNotSupported) comes back as
 * ncclInvalidUsage naming "not supported": reported as a skip. */
static int unsupported(ncclResult_t r) {
  return r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "not supported") != NULL;
}

static void check_groups(ncclComm_t comm) {
  /* Several collectives in one (nested) group. */
  const size_t n = 257;
  float* a = poisoned(n * 4);
  float* b = poisoned(n * 4);
  int32_t* c = poisoned(n * 4);
  const dtype* f = &dtypes[6];
  const dtype* i32 = &dtypes[2];
  fill(f, a, 50, rank, n, 0);
  fill(i32, c, 51, rank, n, 0);
  MUST(ncclGroupStart());
  MUST(ncclGroupStart());
  MUST(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, NULL));
  MUST(ncclGroupEnd()); /* inner: nothing issued yet */
  MUST(ncclAllReduce(c, c, n, ncclInt32, ncclMax, comm, NULL));
  MUST(ncclGroupEnd());
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    bad += b[i] != reduce_ref(f, ncclSum, 50, i);
    bad += c[i] != reduce_ref(i32, ncclMax, 51, i);
  }
  CHECK("group/two-allreduces-nested", bad == 0, "%zu wrong", bad);

  ncclResult_t r = ncclGroupEnd();
  CHECK("group/end-without-start", r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "ncclGroupEnd"),
        "got %d, last error %s", r, ncclGetLastError(NULL));

  /* A bad call inside a group fails the group, which issues nothing. */
  MUST(ncclGroupStart());
  ncclResult_t r1 = ncclAllReduce(a, b, n, (ncclDataType_t)99, ncclSum, comm, NULL);
  ncclResult_t r2 = ncclGroupEnd();
  CHECK("group/bad-call-fails-group", r1 == ncclInvalidArgument && r2 == ncclInvalidArgument, "call %d, end %d", r1, r2);

  /* Simulated group: nothing issued, estimate unknown. */
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  MUST(ncclGroupStart());
  MUST(ncclAllReduce(a, b, n, ncclFloat, ncclSum, comm, NULL));
  MUST(ncclGroupSimulateEnd(&sim));
  CHECK("group/simulate", sim.estimatedTime == NCCL_UNDEF_FLOAT, "estimatedTime %g", sim.estimatedTime);

  /* Ring of sends and receives in one group, in the order that deadlocks
   * without grouping (everyone receives first). */
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  fill(f, a, 60, rank, n, 0);
  memset(b, 0xA5, n * 4);
  MUST(ncclGroupStart());
  r1 = ncclRecv(b, n, ncclFloat, prev, comm, NULL);
  r2 = ncclSend(a, n, ncclFloat, next, comm, NULL);
  r = ncclGroupEnd();
  if (unsupported(r)) {
    printf("skip group/sendrecv-ring: %s\n", ncclGetLastError(NULL));
  } else {
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += b[i] != value(60, prev, i, 0, 0);
    CHECK("group/sendrecv-ring", r1 == ncclSuccess && r2 == ncclSuccess && r == ncclSuccess && bad == 0,
          "recv %d send %d end %d (%s), %zu wrong", r1, r2, r, ncclGetLastError(NULL), bad);
  }

  /* AlltoAll, Gather, Scatter. */
  size_t k = 33;
  float* s = poisoned(k * nranks * 4);
  float* d = poisoned(k * nranks * 4);
  for (int p = 0; p < nranks; p++)
    for (size_t i = 0; i < k; i++) s[p * k + i] = (float)(rank * 1000 + p * 100 + (int)(i % 50));
  r = ncclAlltoAll(s, d, k, ncclFloat, comm, NULL);
  if (unsupported(r)) {
    printf("skip alltoall: %s\n", ncclGetLastError(NULL));
  } else {
    bad = 0;
    for (int p = 0; p < nranks; p++)
      for (size_t i = 0; i < k; i++) bad += d[p * k + i] != (float)(p * 1000 + rank * 100 + (int)(i % 50));
    CHECK("alltoall", r == ncclSuccess && bad == 0, "result %d (%s), %zu wrong", r, ncclGetLastError(NULL), bad);
  }
  int root = nranks > 1 ? 1 : 0;
  memset(d, 0xA5, k * nranks * 4);
  r = ncclGather(s, d, k, ncclFloat, root, comm, NULL);
  if (unsupported(r)) {
    printf("skip gather: %s\n", ncclGetLastError(NULL));
  } else {
    bad = 0;
    if (rank == root)
      for (int p = 0; p < nranks; p++)
        for (size_t i = 0; i < k; i++) bad += d[p * k + i] != (float)(p * 1000 + (int)(i % 50));
    CHECK("gather", r == ncclSuccess && bad == 0, "result %d (%s), %zu wrong", r, ncclGetLastError(NULL), bad);
  }
  memset(d, 0xA5, k * 4);
  r = ncclScatter(s, d, k, ncclFloat, root, comm, NULL);
  if (unsupported(r)) {
    printf("skip scatter: %s\n", ncclGetLastError(NULL));
  } else {
    bad = 0;
    for (size_t i = 0; i < k; i++) bad += d[i] != (float)(root * 1000 + rank * 100 + (int)(i % 50));
    CHECK("scatter", r == ncclSuccess && bad == 0, "result %d (%s), %zu wrong", r, ncclGetLastError(NULL), bad);
  }
  free(s);
  free(d);
  free(a);
  free(b);
  free(c);
}

static int has(const char* text, const char* want) { return strstr(text, want) != NULL; }

static void check_errors(ncclComm_t comm) {
  float x[8] = {0}, y[8];
  ncclResult_t r;
  const char* e;

  r = ncclAllReduce(x, y, 8, ncclFloat, ncclSum, NULL, NULL);
  e = ncclGetLastError(NULL);
  CHECK("errors/null-comm", r == ncclInvalidArgument && has(e, "ncclAllReduce") && has(e, "comm is NULL") && has(e, "goccl"),
        "got %d, %s", r, e);
  r = ncclAllReduce(x, y, 8, (ncclDataType_t)ncclNumTypes, ncclSum, comm, NULL);
  e = ncclGetLastError(comm);
  CHECK("errors/bad-datatype", r == ncclInvalidArgument && has(e, "datatype"), "got %d, %s", r, e);
  r = ncclAllReduce(x, y, 8, ncclFloat, (ncclRedOp_t)42, comm, NULL);
  e = ncclGetLastError(comm);
  CHECK("errors/bad-op", r == ncclInvalidArgument && has(e, "op"), "got %d, %s", r, e);
  r = ncclBroadcast(x, y, 8, ncclFloat, nranks, comm, NULL);
  e = ncclGetLastError(comm);
  CHECK("errors/bad-root", r == ncclInvalidArgument && has(e, "root"), "got %d, %s", r, e);
  r = ncclAllReduce(NULL, y, 8, ncclFloat, ncclSum, comm, NULL);
  e = ncclGetLastError(comm);
  CHECK("errors/null-buffer", r == ncclInvalidArgument && has(e, "nil"), "got %d, %s", r, e);
  r = ncclSend(x, 8, ncclFloat, nranks + 3, comm, NULL);
  e = ncclGetLastError(comm);
  CHECK("errors/bad-peer", r == ncclInvalidArgument && has(e, "peer"), "got %d, %s", r, e);
  r = ncclAllReduce(x, y, 8, ncclFloat, ncclSum, (ncclComm_t)(uintptr_t)0x1234, NULL);
  e = ncclGetLastError(NULL);
  CHECK("errors/garbage-comm", r == ncclInvalidArgument && has(e, "not a live communicator"), "got %d, %s", r, e);

  ncclUniqueId bad;
  memset(&bad, 0, sizeof bad);
  ncclComm_t nc = (ncclComm_t)(uintptr_t)1;
  r = ncclCommInitRank(&nc, nranks, bad, rank);
  e = ncclGetLastError(NULL);
  CHECK("errors/bad-unique-id", r == ncclInvalidArgument && nc == NULL && has(e, "unique id"), "got %d, %s", r, e);
  ncclUniqueId id;
  MUST(ncclGetUniqueId(&id));
  r = ncclCommInitRank(&nc, 2, id, 5);
  e = ncclGetLastError(NULL);
  CHECK("errors/bad-rank", r == ncclInvalidArgument && has(e, "rank = 5"), "got %d, %s", r, e);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0;
  r = ncclCommInitRankConfig(&nc, 1, id, 0, &cfg);
  e = ncclGetLastError(NULL);
  CHECK("errors/bad-config-magic", r == ncclInvalidArgument && has(e, "magic"), "got %d, %s", r, e);
  cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 7;
  r = ncclCommInitRankConfig(&nc, 1, id, 0, &cfg);
  e = ncclGetLastError(NULL);
  CHECK("errors/bad-config-blocking", r == ncclInvalidArgument && has(e, "blocking = 7"), "got %d, %s", r, e);

  /* What goccl does not implement says so and names the function. */
  r = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
  e = ncclGetLastError(comm);
  CHECK("errors/revoke-unimplemented", r == ncclInvalidUsage && has(e, "ncclCommRevoke") && has(e, "not implemented"),
        "got %d, %s", r, e);
  ncclRedOp_t op;
  float scalar = 0.5f;
  r = ncclRedOpCreatePreMulSum(&op, &scalar, (ncclDataType_t)12, ncclScalarHostImmediate, comm);
  e = ncclGetLastError(comm);
  CHECK("errors/premulsum-bad-type", r == ncclInvalidArgument && has(e, "datatype = 12"), "got %d, %s", r, e);
  r = ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, (ncclScalarResidence_t)5, comm);
  e = ncclGetLastError(comm);
  CHECK("errors/premulsum-bad-residence", r == ncclInvalidArgument && has(e, "residence = 5"), "got %d, %s", r, e);
  MUST(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, comm));
  CHECK("errors/premulsum-handle", (int)op >= ncclNumOps, "got %d", (int)op);
  /* An op is bound to its datatype. */
  r = ncclAllReduce(x, y, 8, ncclInt32, op, comm, NULL);
  e = ncclGetLastError(comm);
  CHECK("errors/premulsum-wrong-type", r == ncclInvalidArgument && has(e, "created for float"), "got %d, %s", r, e);
  MUST(ncclRedOpDestroy(op, comm));
  r = ncclAllReduce(x, y, 8, ncclFloat, op, comm, NULL);
  CHECK("errors/premulsum-destroyed", r == ncclInvalidArgument, "got %d", r);
  r = ncclRedOpDestroy(op, comm);
  CHECK("errors/premulsum-destroy-twice", r == ncclInvalidArgument, "got %d", r);
  r = ncclRedOpDestroy(ncclSum, comm);
  CHECK("errors/redop-destroy-builtin", r == ncclInvalidArgument, "got %d", r);
  r = ncclDevCommCreate(comm, NULL, NULL);
  e = ncclGetLastError(comm);
  CHECK("errors/device-api", r == ncclInvalidUsage && has(e, "ncclDevCommCreate"), "got %d, %s", r, e);
  /* Every result code has its own text. */
  int distinct = 1;
  for (int a = 0; a < ncclNumResults; a++)
    for (int b = a + 1; b < ncclNumResults; b++)
      distinct &= strcmp(ncclGetErrorString((ncclResult_t)a), ncclGetErrorString((ncclResult_t)b)) != 0;
  CHECK("errors/error-strings", distinct && has(ncclGetErrorString(ncclRemoteError), "remote"), "not distinct");

  /* The communicator is still sound after every rejected call. */
  for (int i = 0; i < 8; i++) x[i] = (float)(rank + i);
  MUST(ncclAllReduce(x, y, 8, ncclFloat, ncclSum, comm, NULL));
  int ok = 1;
  for (int i = 0; i < 8; i++) ok &= y[i] == (float)(nranks * (nranks - 1) / 2 + nranks * i);
  CHECK("errors/comm-sound-after", ok, "wrong sums");
}

static void check_memory(ncclComm_t comm) {
  void* p = NULL;
  MUST(ncclMemAlloc(&p, 1 << 20));
  CHECK("mem/alloc-aligned", p && ((uintptr_t)p % NCCL_WIN_REQUIRED_ALIGNMENT) == 0, "%p", p);
  void* h = NULL;
  MUST(ncclCommRegister(comm, p, 1 << 20, &h));
  CHECK("mem/register", h != NULL, "no handle");
  ncclWindow_t w = NULL;
  MUST(ncclCommWindowRegister(comm, p, 1 << 20, &w, NCCL_WIN_COLL_SYMMETRIC));
  float* f = p;
  for (int i = 0; i < 64; i++) f[i] = (float)rank;
  MUST(ncclAllReduce(f, f + 64, 64, ncclFloat, ncclSum, comm, NULL));
  CHECK("mem/collective-on-registered", f[64] == (float)(nranks * (nranks - 1) / 2), "got %g", f[64]);
  MUST(ncclCommWindowDeregister(comm, w));
  MUST(ncclCommDeregister(comm, h));
  ncclResult_t r = ncclCommDeregister(comm, h);
  CHECK("mem/deregister-twice", r == ncclInvalidArgument, "got %d", r);
  MUST(ncclMemFree(p));
}

static void check_split(ncclComm_t comm) {
  /* Two colors, ranks reversed by key; the last rank of an odd-sized job
   * stays out. */
  int color = rank % 2;
  if (nranks % 2 == 1 && rank == nranks - 1 && nranks > 1) color = NCCL_SPLIT_NOCOLOR;
  ncclComm_t sub = (ncclComm_t)(uintptr_t)1;
  ncclResult_t r = ncclCommSplit(comm, color, -rank, &sub, NULL);
  if (unsupported(r)) {
    printf("skip split: %s\n", ncclGetLastError(NULL));
    return;
  }
  if (r != ncclSuccess) {
    CHECK("split", 0, "got %d: %s", r, ncclGetLastError(NULL));
    return;
  }
  if (color == NCCL_SPLIT_NOCOLOR) {
    CHECK("split/nocolor", sub == NULL, "newcomm %p", (void*)sub);
    return;
  }
  int members = 0, myidx = 0;
  for (int q = 0; q < nranks; q++) {
    int qc = q % 2;
    if (nranks % 2 == 1 && q == nranks - 1 && nranks > 1) qc = NCCL_SPLIT_NOCOLOR;
    if (qc != color) continue;
    members++;
    if (q > rank) myidx++; /* key -q orders by descending parent rank */
  }
  int cnt = -1, ur = -1;
  MUST(ncclCommCount(sub, &cnt));
  MUST(ncclCommUserRank(sub, &ur));
  CHECK("split/count-rank", cnt == members && ur == myidx, "count %d rank %d, want %d %d", cnt, ur, members, myidx);
  int32_t v = rank, s = -1;
  MUST(ncclAllReduce(&v, &s, 1, ncclInt32, ncclSum, sub, NULL));
  int want = 0;
  for (int q = 0; q < nranks; q++) {
    int qc = q % 2;
    if (nranks % 2 == 1 && q == nranks - 1 && nranks > 1) qc = NCCL_SPLIT_NOCOLOR;
    if (qc == color) want += q;
  }
  CHECK("split/allreduce", s == want, "got %d want %d", s, want);
  MUST(ncclCommDestroy(sub));
}

/* The structs' layouts on x86-64 as NCCL 2.28 lays them out. */
static void check_layout(void) {
  int ok = sizeof(ncclUniqueId) == 128 && sizeof(ncclConfig_t) == 80 && offsetof(ncclConfig_t, magic) == 8 &&
           offsetof(ncclConfig_t, version) == 12 && offsetof(ncclConfig_t, blocking) == 16 &&
           offsetof(ncclConfig_t, netName) == 32 && offsetof(ncclConfig_t, splitShare) == 40 &&
           offsetof(ncclConfig_t, commName) == 48 && offsetof(ncclConfig_t, CTAPolicy) == 60 &&
           offsetof(ncclConfig_t, nvlinkCentricSched) == 76 && sizeof(ncclSimInfo_t) == 24 &&
           offsetof(ncclSimInfo_t, estimatedTime) == 16 && sizeof(ncclRedOp_t) == 4 && sizeof(ncclDataType_t) == 4;
  CHECK("layout", ok, "a struct or enum differs from NCCL 2.28's layout");
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  CHECK("config-initializer", c.size == sizeof c && c.magic == 0xcafebeef && c.version == 22800 &&
        c.blocking == NCCL_CONFIG_UNDEF_INT && c.netName == NULL && c.nvlinkCentricSched == NCCL_CONFIG_UNDEF_INT,
        "size %zu magic %x version %u", c.size, c.magic, c.version);
}

static int mode_basic(void) {
  check_layout();
  int v = 0;
  MUST(ncclGetVersion(&v));
  CHECK("version", v == NCCL_VERSION_CODE && v == NCCL_VERSION(2, 28, 0), "got %d", v);
  ncclComm_t comm = init_comm("basic");
  int cnt = -1, ur = -1, dev = -7;
  MUST(ncclCommCount(comm, &cnt));
  MUST(ncclCommUserRank(comm, &ur));
  MUST(ncclCommCuDevice(comm, &dev));
  CHECK("query", cnt == nranks && ur == rank && dev == -1, "count %d rank %d device %d", cnt, ur, dev);
  ncclResult_t ae = ncclInternalError;
  MUST(ncclCommGetAsyncError(comm, &ae));
  CHECK("async-error-healthy", ae == ncclSuccess, "got %d", ae);
  check_collectives(comm);
  check_premulsum(comm);
  check_groups(comm);
  check_errors(comm);
  check_memory(comm);
  check_split(comm);
  MUST(ncclCommFinalize(comm));
  MUST(ncclCommDestroy(comm));
  ncclResult_t r = ncclCommDestroy(comm);
  CHECK("destroy-twice", r == ncclInvalidArgument, "got %d", r);
  return failures;
}

static int mode_nonblocking(void) {
  ncclUniqueId id = share_id("nonblocking");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, id, rank, &cfg);
  CHECK("nonblocking/init-returns", (r == ncclInProgress || r == ncclSuccess) && comm != NULL, "got %d", r);
  ncclResult_t st = ncclInProgress;
  int polls = 0;
  while (st == ncclInProgress) {
    MUST(ncclCommGetAsyncError(comm, &st));
    polls++;
    if (st == ncclInProgress) sleep_ms(1);
  }
  CHECK("nonblocking/ready", st == ncclSuccess, "async error %d after %d polls: %s", st, polls, ncclGetLastError(NULL));
  double x = rank + 0.5, y = 0;
  MUST(ncclAllReduce(&x, &y, 1, ncclDouble, ncclSum, comm, NULL));
  CHECK("nonblocking/allreduce", y == nranks * (nranks - 1) / 2.0 + 0.5 * nranks, "got %g", y);

  /* An older struct (2.14's fields only) is read by its size. */
  struct {
    size_t size;
    unsigned magic, version;
    int blocking, cga, minc, maxc;
    const char* net;
  } old = {sizeof old, NCCL_CONFIG_MAGIC, NCCL_VERSION(2, 14, 0), 1, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,
           NCCL_CONFIG_UNDEF_INT, NULL};
  ncclUniqueId id2 = share_id("nonblocking-old");
  ncclComm_t c2 = NULL;
  r = ncclCommInitRankConfig(&c2, nranks, id2, rank, (ncclConfig_t*)&old);
  CHECK("config/old-version", r == ncclSuccess && c2 != NULL, "got %d: %s", r, ncclGetLastError(NULL));
  if (c2) MUST(ncclCommDestroy(c2));
  MUST(ncclCommDestroy(comm));
  return failures;
}

/* Rank 1 aborts; the others' next calls fail with ncclRemoteError naming
 * the abort. */
static int mode_abort(void) {
  ncclComm_t comm = init_comm("abort");
  float x = 1, y = 0;
  MUST(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
  if (rank == 1) {
    MUST(ncclCommAbort(comm));
    printf("ok abort/aborted\n");
    return failures;
  }
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < 100000 && r == ncclSuccess; i++) r = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL);
  const char* e = ncclGetLastError(comm);
  CHECK("abort/peer-sees-remote-error", r == ncclRemoteError && has(e, "abort"), "got %d: %s", r, e);
  ncclResult_t ae = ncclSuccess;
  MUST(ncclCommGetAsyncError(comm, &ae));
  CHECK("abort/async-error", ae == ncclRemoteError, "got %d", ae);
  MUST(ncclCommAbort(comm));
  return failures;
}

struct blocked {
  ncclComm_t comm;
  ncclResult_t r;
};

static void* blocked_call(void* arg) {
  struct blocked* b = arg;
  float x[4] = {1, 2, 3, 4}, y[4];
  b->r = ncclAllReduce(x, y, 4, ncclFloat, ncclSum, b->comm, NULL);
  return NULL;
}

/* Rank 0 waits in a collective its peer never joins; another thread
 * aborts the communicator, which ends the wait. */
static int mode_abortthread(void) {
  ncclComm_t comm = init_comm("abortthread");
  char done[600];
  id_path(done, sizeof done, "abortthread.done");
  if (rank != 0) {
    for (int i = 0; i < 60000 && access(done, F_OK) != 0; i++) sleep_ms(5);
    ncclCommAbort(comm);
    printf("ok abortthread/peer-done\n");
    return failures;
  }
  struct blocked b = {comm, ncclSuccess};
  pthread_t t;
  pthread_create(&t, NULL, blocked_call, &b);
  sleep_ms(300);
  MUST(ncclCommAbort(comm));
  pthread_join(t, NULL);
  CHECK("abortthread/blocked-call-ends", b.r != ncclSuccess && b.r != ncclInProgress, "got %d", b.r);
  FILE* f = fopen(done, "w");
  if (f) fclose(f);
  return failures;
}

/* One thread drives every rank of an ncclCommInitAll clique in one group. */
static int mode_initall(void) {
  enum { N = 3, n = 100 };
  ncclComm_t comms[N];
  MUST(ncclCommInitAll(comms, N, NULL));
  float in[N][n], out[N][n];
  for (int r = 0; r < N; r++)
    for (int i = 0; i < n; i++) in[r][i] = (float)(r * 10 + i % 7), out[r][i] = -1;
  MUST(ncclGroupStart());
  for (int r = 0; r < N; r++) MUST(ncclAllReduce(in[r], out[r], n, ncclFloat, ncclSum, comms[r], NULL));
  MUST(ncclGroupEnd());
  int bad = 0;
  for (int r = 0; r < N; r++)
    for (int i = 0; i < n; i++) bad += out[r][i] != (float)(0 + 10 + 20 + 3 * (i % 7));
  CHECK("initall/group-allreduce", bad == 0, "%d wrong", bad);
  for (int r = 0; r < N; r++) {
    int ur = -1;
    MUST(ncclCommUserRank(comms[r], &ur));
    bad += ur != r;
  }
  CHECK("initall/ranks", bad == 0, "wrong ranks");
  /* Inits in a group from one thread: every rank forms at the group's end. */
  ncclUniqueId id;
  ncclComm_t more[N];
  MUST(ncclGetUniqueId(&id));
  MUST(ncclGroupStart());
  for (int r = 0; r < N; r++) MUST(ncclCommInitRank(&more[r], N, id, r));
  MUST(ncclGroupEnd());
  MUST(ncclGroupStart());
  for (int r = 0; r < N; r++) MUST(ncclAllReduce(in[r], out[r], n, ncclFloat, ncclMax, more[r], NULL));
  MUST(ncclGroupEnd());
  bad = 0;
  for (int i = 0; i < n; i++) bad += out[1][i] != (float)(20 + i % 7);
  CHECK("group-init/allreduce", bad == 0, "%d wrong", bad);
  MUST(ncclGroupStart());
  for (int r = 0; r < N; r++) MUST(ncclCommDestroy(more[r]));
  MUST(ncclGroupEnd());
  /* A bad init inside a group fails the call and the group's end. */
  ncclComm_t badc;
  MUST(ncclGroupStart());
  ncclResult_t r1 = ncclCommInitRank(&badc, 2, id, 9);
  ncclResult_t r2 = ncclGroupEnd();
  CHECK("group-init/bad-rank-fails-group", r1 == ncclInvalidArgument && r2 == ncclInvalidArgument, "call %d, end %d", r1, r2);
  for (int r = 0; r < N; r++) MUST(ncclCommDestroy(comms[r]));
  return failures;
}

static int open_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  int n = 0;
  if (!d) return -1;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

static long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* One rank: n communicators made, used and destroyed (every fourth
 * aborted) leave the process's descriptors as they were and its memory
 * about where it was. */
static int mode_cycles(long n) {
  float x[16], y[16];
  for (int i = 0; i < 16; i++) x[i] = (float)i;
  int fds0 = -1;
  long rss0 = 0;
  for (long c = 0; c < n; c++) {
    ncclUniqueId id;
    ncclComm_t comm;
    MUST(ncclGetUniqueId(&id));
    MUST(ncclCommInitRank(&comm, 1, id, 0));
    MUST(ncclAllReduce(x, y, 16, ncclFloat, ncclSum, comm, NULL));
    ncclWindow_t w;
    MUST(ncclCommWindowRegister(comm, y, sizeof y, &w, NCCL_WIN_DEFAULT));
    MUST(ncclCommWindowDeregister(comm, w));
    if (c % 4 == 3) MUST(ncclCommAbort(comm));
    else MUST(ncclCommDestroy(comm));
    if (c == 9) {
      fds0 = open_fds();
      rss0 = rss_kib();
    }
  }
  int fds1 = open_fds();
  long rss1 = rss_kib();
  CHECK("cycles/fds", fds1 == fds0, "%d descriptors after %ld cycles, %d after 10", fds1, n, fds0);
  CHECK("cycles/memory", rss1 - rss0 < 64 * 1024, "RSS grew from %ld to %ld KiB", rss0, rss1);
  return failures;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* One rank: ns per ncclAllReduce of one float through the C API. */
static int mode_bench(long iters) {
  ncclComm_t comm = init_comm("bench");
  float x = 1, y = 0;
  for (int i = 0; i < 1000; i++) MUST(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
  double t0 = now_ns();
  for (long i = 0; i < iters; i++) ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL);
  double t1 = now_ns();
  printf("bench allreduce ns/call %.1f\n", (t1 - t0) / iters);
  MUST(ncclCommDestroy(comm));
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* r = getenv("RANK");
  const char* w = getenv("WORLD_SIZE");
  rank = r ? atoi(r) : 0;
  nranks = w ? atoi(w) : 1;
  const char* mode = argc > 1 ? argv[1] : "basic";
  int fails;
  if (!strcmp(mode, "basic")) fails = mode_basic();
  else if (!strcmp(mode, "nonblocking")) fails = mode_nonblocking();
  else if (!strcmp(mode, "abort")) fails = mode_abort();
  else if (!strcmp(mode, "abortthread")) fails = mode_abortthread();
  else if (!strcmp(mode, "initall")) fails = mode_initall();
  else if (!strcmp(mode, "cycles")) fails = mode_cycles(argc > 2 ? atol(argv[2]) : 1000);
  else if (!strcmp(mode, "bench")) fails = mode_bench(argc > 2 ? atol(argv[2]) : 100000);
  else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  printf("done %s rank %d failures %d\n", mode, rank, fails);
  return fails ? 1 : 0;
}
