/*
 * shim.c: the C side of libnccl.so.2. Every NCCL entry point is defined
 * here with NCCL's exact signature and hands its work to the Go side
 * (goccl_* in _cgo_export.h). What C does better stays here: the
 * thread-local group depth, reading the versioned ncclConfig_t, the static
 * strings ncclGetErrorString returns, the thread-local last error, the
 * CUDA calls that must run in the caller's current context (device query,
 * ncclMemAlloc), and the functions goccl does not implement.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"
#include "shim.h"
#include "_cgo_export.h"

#define EXPORT __attribute__((visibility("default")))
/* pnccl* are the same functions under a second name. */
#define PALIAS(ret, name, args) EXPORT ret p##name args __attribute__((alias(#name)));

/* ---- last error ---- */

#define ERR_MAX 2048
static __thread char tl_err[ERR_MAX];
static char g_err[ERR_MAX];
static pthread_mutex_t g_err_mu = PTHREAD_MUTEX_INITIALIZER;

void goccl_set_last_error(const char* text) {
  snprintf(tl_err, ERR_MAX, "%s", text);
  pthread_mutex_lock(&g_err_mu);
  snprintf(g_err, ERR_MAX, "%s", text);
  pthread_mutex_unlock(&g_err_mu);
}

static ncclResult_t fail(ncclResult_t code, const char* fn, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ncclResult_t fail(ncclResult_t code, const char* fn, const char* fmt, ...) {
  char msg[ERR_MAX - 128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char text[ERR_MAX];
  snprintf(text, sizeof text, GOCCL_LIB_NAME " " GOCCL_LIB_VERSION " (" GOCCL_API_NAME "): %s: %s", fn, msg);
  goccl_set_last_error(text);
  return code;
}

static ncclResult_t unimplemented(const char* fn) {
  return fail(ncclInvalidUsage, fn, "%s is not implemented by goccl (the device API, revoke and one-sided calls are not part of it)", fn);
}

EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm; /* NCCL's last error is not per communicator either */
  if (tl_err[0]) return tl_err;
  static __thread char copy[ERR_MAX];
  pthread_mutex_lock(&g_err_mu);
  memcpy(copy, g_err, ERR_MAX);
  pthread_mutex_unlock(&g_err_mu);
  return copy;
}
PALIAS(const char*, ncclGetLastError, (ncclComm_t comm))

EXPORT const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with GOCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with GOCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the goccl developers";
    case ncclInvalidArgument: return "invalid argument (run with GOCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with GOCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "operation in progress";
    default: return "unknown result code";
  }
}
PALIAS(const char*, ncclGetErrorString, (ncclResult_t r))

EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
PALIAS(ncclResult_t, ncclGetVersion, (int* version))

/* Logging is goccl's (GOCCL_DEBUG), read at each communicator's init. */
EXPORT void ncclResetDebugInit(void) {}
PALIAS(void, ncclResetDebugInit, (void))

/* ---- groups ---- */

static __thread int tl_depth;
static __thread uint64_t tl_gid; /* this thread's group on the Go side; 0 until first used */

int goccl_group_depth(void) { return tl_depth; }

/* The group a call joins: 0 outside a group (issue now). */
static inline uint64_t cur_group(void) {
  if (tl_depth == 0) return 0;
  if (tl_gid == 0) tl_gid = goccl_group_new();
  return tl_gid;
}

/* A failed init, split, shrink or window registration inside a group also
 * fails the group's end. */
static ncclResult_t in_group(ncclResult_t r) {
  if (r != ncclSuccess && r != ncclInProgress && tl_depth > 0) goccl_group_failed(cur_group(), r);
  return r;
}

EXPORT ncclResult_t ncclGroupStart(void) {
  tl_depth++;
  return ncclSuccess;
}
PALIAS(ncclResult_t, ncclGroupStart, (void))

EXPORT ncclResult_t ncclGroupEnd(void) {
  if (tl_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd", "no group is open on this thread (ncclGroupEnd without ncclGroupStart)");
  if (--tl_depth > 0) return ncclSuccess;
  if (tl_gid == 0) return ncclSuccess; /* nothing was recorded */
  return (ncclResult_t)goccl_group_end(tl_gid, 0);
}
PALIAS(ncclResult_t, ncclGroupEnd, (void))

EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  if (!info) return fail(ncclInvalidArgument, "ncclGroupSimulateEnd", "simInfo is NULL");
  if (info->magic != NCCL_SIM_INFO_MAGIC || info->size < sizeof(size_t) + 2 * sizeof(unsigned)) {
    return fail(ncclInvalidArgument, "ncclGroupSimulateEnd",
                "simInfo was not initialized with NCCL_SIM_INFO_INITIALIZER (magic 0x%x, size %zu)", info->magic, info->size);
  }
  if (tl_depth == 0) return fail(ncclInvalidUsage, "ncclGroupSimulateEnd", "no group is open on this thread");
  if (--tl_depth > 0) return ncclSuccess;
  /* The group's calls are dropped, not issued: that is the simulation.
   * goccl has no cost model to estimate their time, so estimatedTime stays
   * NCCL_UNDEF_FLOAT (unknown). */
  if (info->size >= offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float)) info->estimatedTime = NCCL_UNDEF_FLOAT;
  if (tl_gid == 0) return ncclSuccess;
  return (ncclResult_t)goccl_group_end(tl_gid, 1);
}
PALIAS(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * info))

/* ---- configuration ---- */

static int env_blocking(void) {
  const char* v = getenv("NCCL_COMM_BLOCKING");
  return v && v[0] == '0' && v[1] == 0 ? 0 : 1;
}

/* Reads the fields goccl uses from a config of any version: a config is
 * recognized by its magic, and a field is read only when the struct the
 * caller compiled (size) holds it. */
static ncclResult_t read_config(const char* fn, const ncclConfig_t* cfg, int* blocking) {
  *blocking = env_blocking();
  if (!cfg) return ncclSuccess;
  if (cfg->magic != NCCL_CONFIG_MAGIC) {
    return fail(ncclInvalidArgument, fn,
                "config: magic 0x%x is not NCCL_CONFIG_MAGIC 0x%x (initialize ncclConfig_t with NCCL_CONFIG_INITIALIZER)",
                cfg->magic, NCCL_CONFIG_MAGIC);
  }
  if (cfg->version < NCCL_VERSION(2, 14, 0)) {
    return fail(ncclInvalidArgument, fn, "config: version %u is older than the first ncclConfig_t (2.14)", cfg->version);
  }
  if (cfg->size < offsetof(ncclConfig_t, blocking) + sizeof(int)) {
    return fail(ncclInvalidArgument, fn, "config: size %zu is too small to hold the blocking field", cfg->size);
  }
  if (cfg->blocking != NCCL_CONFIG_UNDEF_INT) {
    if (cfg->blocking != 0 && cfg->blocking != 1) {
      return fail(ncclInvalidArgument, fn, "config: blocking = %d, want 0 or 1", cfg->blocking);
    }
    *blocking = cfg->blocking;
  }
  return ncclSuccess;
}

/* ---- CUDA in the caller's context ---- */

typedef int (*cu_int_fn)(int*);
typedef int (*cu_alloc_fn)(unsigned long long*, size_t);
typedef int (*cu_free_fn)(unsigned long long);
typedef int (*cu_ctx_fn)(void**);
typedef int (*cu_rt_alloc_fn)(void**, size_t);

/* libcuda only when the program already loaded it: a program that never
 * touched CUDA has no current device and gets host memory. */
static void* cuda_sym(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return NULL;
  void* f = dlsym(lib, name);
  dlclose(lib);
  return f;
}

static int host_backend_forced(void) {
  const char* b = getenv("GOCCL_BACKEND");
  return b && strcmp(b, "host") == 0;
}

/* The CUDA device current on this thread, as NCCL's init uses it; -1 when
 * the program has none (host backend). */
static int current_device(void) {
  if (host_backend_forced()) return -1;
  int d = -1;
  cu_int_fn ctxdev = (cu_int_fn)cuda_sym("cuCtxGetDevice");
  if (ctxdev && ctxdev(&d) == 0) return d;
  cu_int_fn rtdev = (cu_int_fn)dlsym(RTLD_DEFAULT, "cudaGetDevice");
  if (rtdev && rtdev(&d) == 0) return d;
  return -1;
}

/* Host allocations of ncclMemAlloc, so that ncclMemFree knows which free. */
struct host_alloc {
  void* p;
  struct host_alloc* next;
};
static struct host_alloc* host_allocs;
static pthread_mutex_t host_mu = PTHREAD_MUTEX_INITIALIZER;

EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (!ptr) return fail(ncclInvalidArgument, "ncclMemAlloc", "ptr is NULL");
  if (size == 0) return fail(ncclInvalidArgument, "ncclMemAlloc", "size is 0");
  *ptr = NULL;
  if (!host_backend_forced()) {
    void* cur = NULL;
    cu_ctx_fn getctx = (cu_ctx_fn)cuda_sym("cuCtxGetCurrent");
    if (getctx && getctx(&cur) == 0 && cur) {
      cu_alloc_fn alloc = (cu_alloc_fn)cuda_sym("cuMemAlloc_v2");
      unsigned long long dp = 0;
      int r = alloc ? alloc(&dp, size) : -1;
      if (r != 0) return fail(ncclUnhandledCudaError, "ncclMemAlloc", "cuMemAlloc of %zu bytes failed: CUDA error %d", size, r);
      *ptr = (void*)(uintptr_t)dp;
      return ncclSuccess;
    }
    /* A CUDA program with no context current yet: the runtime makes the
     * device's primary context, as its own cudaMalloc would. */
    cu_rt_alloc_fn rtalloc = (cu_rt_alloc_fn)dlsym(RTLD_DEFAULT, "cudaMalloc");
    if (rtalloc) {
      int r = rtalloc(ptr, size);
      if (r != 0) return fail(ncclUnhandledCudaError, "ncclMemAlloc", "cudaMalloc of %zu bytes failed: CUDA error %d", size, r);
      return ncclSuccess;
    }
  }
  struct host_alloc* a = malloc(sizeof *a);
  void* p = NULL;
  if (!a || posix_memalign(&p, NCCL_WIN_REQUIRED_ALIGNMENT, size) != 0) {
    free(a);
    return fail(ncclSystemError, "ncclMemAlloc", "cannot allocate %zu bytes of host memory", size);
  }
  a->p = p;
  pthread_mutex_lock(&host_mu);
  a->next = host_allocs;
  host_allocs = a;
  pthread_mutex_unlock(&host_mu);
  *ptr = p;
  return ncclSuccess;
}
PALIAS(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))

EXPORT ncclResult_t ncclMemFree(void* ptr) {
  if (!ptr) return ncclSuccess;
  pthread_mutex_lock(&host_mu);
  for (struct host_alloc** pp = &host_allocs; *pp; pp = &(*pp)->next) {
    if ((*pp)->p == ptr) {
      struct host_alloc* a = *pp;
      *pp = a->next;
      pthread_mutex_unlock(&host_mu);
      free(a->p);
      free(a);
      return ncclSuccess;
    }
  }
  pthread_mutex_unlock(&host_mu);
  cu_free_fn fr = (cu_free_fn)cuda_sym("cuMemFree_v2");
  if (!fr) return fail(ncclInvalidArgument, "ncclMemFree", "%p was not allocated by ncclMemAlloc", ptr);
  int r = fr((unsigned long long)(uintptr_t)ptr);
  if (r != 0) return fail(ncclUnhandledCudaError, "ncclMemFree", "cuMemFree(%p) failed: CUDA error %d", ptr, r);
  return ncclSuccess;
}
PALIAS(ncclResult_t, ncclMemFree, (void* ptr))

/* ---- ids and communicators ---- */

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return fail(ncclInvalidArgument, "ncclGetUniqueId", "uniqueId is NULL");
  return (ncclResult_t)goccl_get_unique_id(id->internal);
}
PALIAS(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * id))

static ncclResult_t init_rank(const char* fn, ncclComm_t* comm, int nranks, ncclUniqueId* ids, int nid, int rank,
                              ncclConfig_t* config) {
  if (!comm) return fail(ncclInvalidArgument, fn, "comm is NULL");
  *comm = NULL;
  int blocking;
  ncclResult_t r = read_config(fn, config, &blocking);
  if (r != ncclSuccess) return r;
  uintptr_t h = 0;
  r = (ncclResult_t)goccl_comm_init((char*)fn, &h, nranks, ids ? ids->internal : NULL, nid, rank, current_device(),
                                    blocking, cur_group());
  *comm = (ncclComm_t)h;
  return r;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return in_group(init_rank("ncclCommInitRank", comm, nranks, &id, 1, rank, NULL));
}
PALIAS(ncclResult_t, ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank))

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  return in_group(init_rank("ncclCommInitRankConfig", comm, nranks, &id, 1, rank, config));
}
PALIAS(ncclResult_t, ncclCommInitRankConfig, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config))

EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nid, ncclUniqueId* ids,
                                             ncclConfig_t* config) {
  if (nid < 1 || !ids) return fail(ncclInvalidArgument, "ncclCommInitRankScalable", "nId = %d with commIds %p: want at least one id", nid, (void*)ids);
  return in_group(init_rank("ncclCommInitRankScalable", comm, nranks, ids, nid, rank, config));
}
PALIAS(ncclResult_t, ncclCommInitRankScalable, (ncclComm_t * comm, int nranks, int rank, int nid, ncclUniqueId* ids, ncclConfig_t* config))

EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms) return fail(ncclInvalidArgument, "ncclCommInitAll", "comm is NULL");
  if (ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll", "ndev = %d, want at least 1", ndev);
  for (int i = 0; i < ndev; i++) comms[i] = NULL;
  return (ncclResult_t)goccl_comm_init_all((uintptr_t*)comms, ndev, (int*)devlist);
}
PALIAS(ncclResult_t, ncclCommInitAll, (ncclComm_t * comms, int ndev, const int* devlist))

EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (!newcomm) return fail(ncclInvalidArgument, "ncclCommSplit", "newcomm is NULL");
  *newcomm = NULL;
  int blocking;
  ncclResult_t r = read_config("ncclCommSplit", config, &blocking);
  if (r != ncclSuccess) return r;
  uintptr_t h = 0;
  r = (ncclResult_t)goccl_comm_split((uintptr_t)comm, color, key, &h, config ? blocking : -1, cur_group());
  *newcomm = (ncclComm_t)h;
  return in_group(r);
}
PALIAS(ncclResult_t, ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))

EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int nexclude, ncclComm_t* newcomm, ncclConfig_t* config,
                                   int flags) {
  if (!newcomm) return fail(ncclInvalidArgument, "ncclCommShrink", "newcomm is NULL");
  *newcomm = NULL;
  if (nexclude < 0 || (nexclude > 0 && !exclude)) {
    return fail(ncclInvalidArgument, "ncclCommShrink", "excludeRanksList %p with excludeRanksCount %d", (void*)exclude, nexclude);
  }
  if (flags != NCCL_SHRINK_DEFAULT && flags != NCCL_SHRINK_ABORT) {
    return fail(ncclInvalidArgument, "ncclCommShrink", "shrinkFlags = %d, want NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT", flags);
  }
  int blocking;
  ncclResult_t r = read_config("ncclCommShrink", config, &blocking);
  if (r != ncclSuccess) return r;
  uintptr_t h = 0;
  r = (ncclResult_t)goccl_comm_shrink((uintptr_t)comm, exclude, nexclude, &h, config ? blocking : -1, flags, cur_group());
  *newcomm = (ncclComm_t)h;
  return in_group(r);
}
PALIAS(ncclResult_t, ncclCommShrink, (ncclComm_t comm, int* exclude, int nexclude, ncclComm_t* newcomm, ncclConfig_t* config, int flags))

EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) { return (ncclResult_t)goccl_comm_finalize((uintptr_t)comm); }
PALIAS(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess; /* as NCCL: destroying NULL is a no-op */
  return (ncclResult_t)goccl_comm_destroy((uintptr_t)comm, 0);
}
PALIAS(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  return (ncclResult_t)goccl_comm_destroy((uintptr_t)comm, 1);
}
PALIAS(ncclResult_t, ncclCommAbort, (ncclComm_t comm))

EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags) {
  (void)comm;
  (void)flags;
  return unimplemented("ncclCommRevoke");
}
PALIAS(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int flags))

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
  if (!err) return fail(ncclInvalidArgument, "ncclCommGetAsyncError", "asyncError is NULL");
  int e = 0;
  ncclResult_t r = (ncclResult_t)goccl_comm_async_error((uintptr_t)comm, &e);
  if (r == ncclSuccess) *err = (ncclResult_t)e;
  return r;
}
PALIAS(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* err))

static ncclResult_t query(const char* fn, ncclComm_t comm, int what, int* out) {
  if (!out) return fail(ncclInvalidArgument, fn, "output pointer is NULL");
  return (ncclResult_t)goccl_comm_query((char*)fn, (uintptr_t)comm, what, out);
}

EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) { return query("ncclCommCount", comm, GOCCL_QUERY_COUNT, count); }
PALIAS(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count))
EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* dev) { return query("ncclCommCuDevice", comm, GOCCL_QUERY_DEVICE, dev); }
PALIAS(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* dev))
EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) { return query("ncclCommUserRank", comm, GOCCL_QUERY_RANK, rank); }
PALIAS(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank))

/* ---- registration ---- */

EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (!handle) return fail(ncclInvalidArgument, "ncclCommRegister", "handle is NULL");
  *handle = NULL;
  uintptr_t h = 0;
  ncclResult_t r = (ncclResult_t)goccl_register((uintptr_t)comm, (uintptr_t)buff, size, &h);
  *handle = (void*)h;
  return r;
}
PALIAS(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle))

EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return (ncclResult_t)goccl_deregister((uintptr_t)comm, (uintptr_t)handle);
}
PALIAS(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle))

EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int flags) {
  if (!win) return fail(ncclInvalidArgument, "ncclCommWindowRegister", "win is NULL");
  *win = NULL;
  if (flags & ~NCCL_WIN_COLL_SYMMETRIC) return fail(ncclInvalidArgument, "ncclCommWindowRegister", "winFlags = 0x%x: unknown flags", flags);
  uintptr_t h = 0;
  ncclResult_t r = (ncclResult_t)goccl_window_register((uintptr_t)comm, (uintptr_t)buff, size, &h, cur_group());
  *win = (ncclWindow_t)h;
  return in_group(r);
}
PALIAS(ncclResult_t, ncclCommWindowRegister, (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int flags))

EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return (ncclResult_t)goccl_window_deregister((uintptr_t)comm, (uintptr_t)win);
}
PALIAS(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))

/* ---- custom operators ---- */

/* Pre-multiplied sums: per-communicator op handles (redop.go). */
EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t dt, ncclScalarResidence_t residence,
                                             ncclComm_t comm) {
  if (!op) return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum", "op is NULL");
  int out = 0;
  ncclResult_t r = (ncclResult_t)goccl_redop_create((uintptr_t)comm, scalar, (int)dt, (int)residence, &out);
  if (r == ncclSuccess) *op = (ncclRedOp_t)out;
  return r;
}
PALIAS(ncclResult_t, ncclRedOpCreatePreMulSum, (ncclRedOp_t * op, void* scalar, ncclDataType_t dt, ncclScalarResidence_t residence, ncclComm_t comm))

EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return (ncclResult_t)goccl_redop_destroy((uintptr_t)comm, (int)op);
}
PALIAS(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))

/* ---- collectives and point to point ---- */

static inline ncclResult_t call(int kind, const void* send, void* recv, size_t count, ncclDataType_t dt, int op, int root,
                                ncclComm_t comm, cudaStream_t stream) {
  return (ncclResult_t)goccl_call(cur_group(), kind, (uintptr_t)send, (uintptr_t)recv, count, (int)dt, op, root,
                                  (uintptr_t)comm, (uintptr_t)stream);
}

EXPORT ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
  return call(GOCCL_CALL_ALLREDUCE, s, r, n, dt, (int)op, 0, c, st);
}
PALIAS(ncclResult_t, ncclAllReduce, (const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c, cudaStream_t st))

EXPORT ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
  return call(GOCCL_CALL_BROADCAST, s, r, n, dt, 0, root, c, st);
}
PALIAS(ncclResult_t, ncclBroadcast, (const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st))

EXPORT ncclResult_t ncclBcast(void* b, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
  return call(GOCCL_CALL_BROADCAST, b, b, n, dt, 0, root, c, st);
}
PALIAS(ncclResult_t, ncclBcast, (void* b, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st))

EXPORT ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c,
                               cudaStream_t st) {
  return call(GOCCL_CALL_REDUCE, s, r, n, dt, (int)op, root, c, st);
}
PALIAS(ncclResult_t, ncclReduce, (const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t st))

EXPORT ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
  return call(GOCCL_CALL_ALLGATHER, s, r, n, dt, 0, 0, c, st);
}
PALIAS(ncclResult_t, ncclAllGather, (const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st))

EXPORT ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                                      cudaStream_t st) {
  return call(GOCCL_CALL_REDUCESCATTER, s, r, n, dt, (int)op, 0, c, st);
}
PALIAS(ncclResult_t, ncclReduceScatter, (const void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c, cudaStream_t st))

EXPORT ncclResult_t ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st) {
  return call(GOCCL_CALL_ALLTOALL, s, r, n, dt, 0, 0, c, st);
}
PALIAS(ncclResult_t, ncclAlltoAll, (const void* s, void* r, size_t n, ncclDataType_t dt, ncclComm_t c, cudaStream_t st))

EXPORT ncclResult_t ncclGather(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
  return call(GOCCL_CALL_GATHER, s, r, n, dt, 0, root, c, st);
}
PALIAS(ncclResult_t, ncclGather, (const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st))

EXPORT ncclResult_t ncclScatter(const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st) {
  return call(GOCCL_CALL_SCATTER, s, r, n, dt, 0, root, c, st);
}
PALIAS(ncclResult_t, ncclScatter, (const void* s, void* r, size_t n, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t st))

EXPORT ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  return call(GOCCL_CALL_SEND, s, NULL, n, dt, 0, peer, c, st);
}
PALIAS(ncclResult_t, ncclSend, (const void* s, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st))

EXPORT ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  return call(GOCCL_CALL_RECV, NULL, r, n, dt, 0, peer, c, st);
}
PALIAS(ncclResult_t, ncclRecv, (void* r, size_t n, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st))
