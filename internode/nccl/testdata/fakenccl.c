// A stand-in for libnccl.so.2 that the loader tests build with the C
// compiler: FAKE_VERSION is what ncclGetVersion reports, FAKE_GOCCL makes
// its error text name goccl (as goccl's own NCCL-API library does). Calls
// record what they were given in last_* for the tests to read back.
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned char internal[128]; } uid;

int last_nranks = -1, last_rank = -1, last_count = -1, last_dt = -1, last_op = -1, last_peer = -1;
char last_hostid[256];
static int fake_comm;

const char *ncclGetErrorString(int r) {
#ifdef FAKE_GOCCL
	if (r == 3) return "internal error - please report this issue to the goccl developers";
#endif
	switch (r) {
	case 0: return "no error";
	case 3: return "internal error";
	case 6: return "remote process exited or there was a network error";
	}
	return "some error";
}
const char *ncclGetLastError(void *c) { (void)c; return "fake last error"; }
int ncclGetVersion(int *v) { *v = FAKE_VERSION; return 0; }
int ncclGetUniqueId(uid *u) { for (int i = 0; i < 128; i++) u->internal[i] = (unsigned char)(i ^ 0x5a); return 0; }
int ncclCommInitRank(void **c, int nranks, uid u, int rank) {
	const char *h = getenv("NCCL_HOSTID");
	strncpy(last_hostid, h ? h : "", sizeof last_hostid - 1);
	last_nranks = nranks;
	last_rank = rank;
	if (u.internal[0] != (0 ^ 0x5a)) return 4; // an id this library did not make
	*c = &fake_comm;
	return 0;
}
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, void *c, void *st) {
	(void)c; (void)st;
	if (s != r) memcpy(r, s, n * (dt == 7 ? 4 : 1));
	last_count = (int)n; last_dt = dt; last_op = op;
	return 0;
}
int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, void *c, void *st) { (void)s; (void)r; (void)c; (void)st; last_count = (int)n; last_dt = dt; last_op = op; return 0; }
int ncclAllGather(const void *s, void *r, size_t n, int dt, void *c, void *st) { (void)s; (void)r; (void)c; (void)st; last_count = (int)n; last_dt = dt; return 0; }
int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, void *c, void *st) { (void)s; (void)r; (void)c; (void)st; last_count = (int)n; last_dt = dt; last_peer = root; return 0; }
int ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root, void *c, void *st) { (void)s; (void)r; (void)c; (void)st; last_count = (int)n; last_dt = dt; last_op = op; last_peer = root; return 0; }
int ncclSend(const void *b, size_t n, int dt, int peer, void *c, void *st) { (void)b; (void)c; (void)st; last_count = (int)n; last_dt = dt; last_peer = peer; return 0; }
int ncclRecv(void *b, size_t n, int dt, int peer, void *c, void *st) { (void)b; (void)c; (void)st; last_count = (int)n; last_dt = dt; last_peer = peer; return 6; }
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
int ncclCommGetAsyncError(void *c, int *r) { (void)c; *r = 6; return 0; }
int ncclCommAbort(void *c) { (void)c; return 0; }
int ncclCommDestroy(void *c) { (void)c; return 0; }
#ifndef FAKE_NO_PREMUL
// The operator's number says what it was made of: 1000, plus 100 for a
// scalar read now (then plus its value, an int32), plus 0 for one in device
// memory.
int ncclRedOpCreatePreMulSum(int *op, void *scalar, int dt, int residence, void *c) {
	(void)c;
	if (dt != 2) return 4;
	*op = 1000 + (residence == 1 ? 100 + *(int *)scalar : 0);
	return 0;
}
int ncclRedOpDestroy(int op, void *c) { (void)c; return op >= 1000 ? 0 : 4; }
#endif
