// The C side of the nccl package: libnccl.so.2 resolved by dlopen. The
// few types its calls take are declared here from NCCL's public ABI
// (stable since 2.0): results, data types and operators are ints, a
// communicator is a pointer, a unique id is 128 bytes passed by value.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct { unsigned char internal[128]; } gnccl_uid;
typedef void *gnccl_comm;

typedef struct {
	void *h;
	int (*get_version)(int *);
	const char *(*error_string)(int);
	const char *(*last_error)(gnccl_comm);
	int (*get_unique_id)(gnccl_uid *);
	int (*init_rank)(gnccl_comm *, int, gnccl_uid, int);
	int (*all_reduce)(const void *, void *, size_t, int, int, gnccl_comm, void *);
	int (*reduce_scatter)(const void *, void *, size_t, int, int, gnccl_comm, void *);
	int (*all_gather)(const void *, void *, size_t, int, gnccl_comm, void *);
	int (*broadcast)(const void *, void *, size_t, int, int, gnccl_comm, void *);
	int (*reduce)(const void *, void *, size_t, int, int, int, gnccl_comm, void *);
	int (*send)(const void *, size_t, int, int, gnccl_comm, void *);
	int (*recv)(void *, size_t, int, int, gnccl_comm, void *);
	int (*group_start)(void);
	int (*group_end)(void);
	int (*async_error)(gnccl_comm, int *);
	int (*abort)(gnccl_comm);
	int (*destroy)(gnccl_comm);
	int (*redop_create)(int *, void *, int, int, gnccl_comm); // ncclRedOpCreatePreMulSum
	int (*redop_destroy)(int, gnccl_comm);
} gnccl_lib;

static gnccl_lib L;

// The context goccl drives is made current on the calling thread before
// each call that launches or initializes, as NCCL works on the current
// device; libcuda is already loaded by goccl, so this dlopen only finds it.
static int (*p_ctx_set_current)(void *);

static void set_ctx(uintptr_t ctx) {
	if (ctx && p_ctx_set_current) p_ctx_set_current((void *)ctx);
}

#define SYM(field, name) do { *(void **)(&l.field) = dlsym(h, name); if (!l.field) { snprintf(err, errlen, "symbol %s missing", name); dlclose(h); return -1; } } while (0)

// gnccl_load opens path and resolves every symbol. The library is kept only
// when it is not goccl's own NCCL-API library (whose error text names
// goccl): probe then receives that text and the call returns 1.
// goccl_in_process reports whether goccl's own NCCL-API library is in the
// process's global scope (a program linked against it, or preloaded).
static int goccl_in_process(void) {
	const char *(*es)(int);
	*(void **)(&es) = dlsym(RTLD_DEFAULT, "ncclGetErrorString");
	if (!es) return 0;
	const char *s = es(3);
	return s && strstr(s, "goccl") != NULL;
}

int gnccl_load(const char *path, char *err, size_t errlen, int *version, char *probe, size_t probelen) {
	gnccl_lib l;
	int flags = RTLD_NOW | RTLD_LOCAL;
	// Where goccl's library already defines the nccl* symbols globally,
	// NCCL's calls to its own entry points must bind to NCCL's.
	if (goccl_in_process()) flags |= RTLD_DEEPBIND;
	void *h = dlopen(path, flags);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	memset(&l, 0, sizeof l);
	SYM(get_version, "ncclGetVersion");
	SYM(error_string, "ncclGetErrorString");
	SYM(get_unique_id, "ncclGetUniqueId");
	SYM(init_rank, "ncclCommInitRank");
	SYM(all_reduce, "ncclAllReduce");
	SYM(reduce_scatter, "ncclReduceScatter");
	SYM(all_gather, "ncclAllGather");
	SYM(broadcast, "ncclBroadcast");
	SYM(reduce, "ncclReduce");
	SYM(send, "ncclSend");
	SYM(recv, "ncclRecv");
	SYM(group_start, "ncclGroupStart");
	SYM(group_end, "ncclGroupEnd");
	SYM(async_error, "ncclCommGetAsyncError");
	SYM(abort, "ncclCommAbort");
	SYM(destroy, "ncclCommDestroy");
	*(void **)(&l.last_error) = dlsym(h, "ncclGetLastError"); // 2.13 and later
	*(void **)(&l.redop_create) = dlsym(h, "ncclRedOpCreatePreMulSum"); // 2.11 and later
	*(void **)(&l.redop_destroy) = dlsym(h, "ncclRedOpDestroy");
	// ncclInternalError's text: goccl's library names goccl in it.
	const char *s = l.error_string(3);
	snprintf(probe, probelen, "%s", s ? s : "");
	if (s && strstr(s, "goccl")) {
		dlclose(h);
		return 1;
	}
	*version = 0;
	if (l.get_version(version) != 0) {
		snprintf(err, errlen, "ncclGetVersion failed");
		dlclose(h);
		return -1;
	}
	l.h = h;
	L = l;
	void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!cu) cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (cu) *(void **)(&p_ctx_set_current) = dlsym(cu, "cuCtxSetCurrent");
	return 0;
}

const char *gnccl_error_string(int r) { return L.error_string(r); }

const char *gnccl_last_error(void *comm) { return L.last_error ? L.last_error(comm) : ""; }

int gnccl_unique_id(unsigned char *id) {
	gnccl_uid u;
	int r = L.get_unique_id(&u);
	memcpy(id, u.internal, sizeof u.internal);
	return r;
}

int gnccl_init_rank(uintptr_t cuctx, void **comm, int nranks, const unsigned char *id, int rank) {
	gnccl_uid u;
	memcpy(u.internal, id, sizeof u.internal);
	set_ctx(cuctx);
	return L.init_rank(comm, nranks, u, rank);
}

#define P(x) ((void *)(x))

int gnccl_all_reduce(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int op, void *comm, uintptr_t stream) {
	set_ctx(cuctx);
	return L.all_reduce(P(send), P(recv), count, dt, op, comm, P(stream));
}

int gnccl_reduce_scatter(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int op, void *comm, uintptr_t stream) {
	set_ctx(cuctx);
	return L.reduce_scatter(P(send), P(recv), count, dt, op, comm, P(stream));
}

int gnccl_all_gather(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, void *comm, uintptr_t stream) {
	set_ctx(cuctx);
	return L.all_gather(P(send), P(recv), count, dt, comm, P(stream));
}

int gnccl_broadcast(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int root, void *comm, uintptr_t stream) {
	set_ctx(cuctx);
	return L.broadcast(P(send), P(recv), count, dt, root, comm, P(stream));
}

int gnccl_reduce(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int op, int root, void *comm, uintptr_t stream) {
	set_ctx(cuctx);
	return L.reduce(P(send), P(recv), count, dt, op, root, comm, P(stream));
}

int gnccl_send(uintptr_t cuctx, uintptr_t buf, size_t count, int dt, int peer, void *comm, uintptr_t stream) {
	set_ctx(cuctx);
	return L.send(P(buf), count, dt, peer, comm, P(stream));
}

int gnccl_recv(uintptr_t cuctx, uintptr_t buf, size_t count, int dt, int peer, void *comm, uintptr_t stream) {
	set_ctx(cuctx);
	return L.recv(P(buf), count, dt, peer, comm, P(stream));
}

int gnccl_group_start(void) { return L.group_start(); }

int gnccl_group_end(uintptr_t cuctx) {
	set_ctx(cuctx);
	return L.group_end();
}

int gnccl_async_error(void *comm, int *res) { return L.async_error(comm, res); }
int gnccl_abort(void *comm) { return L.abort(comm); }
int gnccl_destroy(void *comm) { return L.destroy(comm); }

// gnccl_premulsum_create makes a scaled-sum operator on comm whose scalar
// is bits (the type's little-endian bytes, read now: NCCL's
// ncclScalarHostImmediate) or, when devptr is not 0, the element there in
// device memory, read when each collective runs (ncclScalarDevice). -1:
// the library has no such function.
int gnccl_premulsum_create(int *op, uint64_t bits, uintptr_t devptr, int dt, void *comm) {
	if (!L.redop_create || !L.redop_destroy) return -1;
	if (devptr) return L.redop_create(op, P(devptr), dt, 0, comm);
	return L.redop_create(op, &bits, dt, 1, comm);
}

int gnccl_premulsum_destroy(int op, void *comm) { return L.redop_destroy(op, comm); }
