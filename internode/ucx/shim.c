// The C side of the ucx package: libucp resolved by dlopen, and the
// parameter structs filled in C so that no UCX header is needed.

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

// ucs_status_t is a packed enum: one signed byte.
typedef int8_t gst;

// The parameter structs goccl fills, declared from UCX 1.13's public ABI
// (ucp.h); only the leading fields named by a field mask are read.
typedef struct {
	uint64_t field_mask;
	uint64_t features;
	size_t request_size;
	void *request_init;
	void *request_cleanup;
	uint64_t tag_sender_mask;
	int mt_workers_shared;
	size_t estimated_num_eps;
	size_t estimated_num_ppn;
	const char *name;
	char reserve[128];
} gparams;

typedef void (*gerr_cb)(void *arg, void *ep, gst status);

typedef struct {
	uint64_t field_mask;
	const void *address;
	int err_mode;
	gerr_cb err_cb;
	void *err_arg;
	void *user_data;
	unsigned flags;
	const void *sockaddr;
	uint32_t sockaddr_len;
	void *conn_request;
	const char *name;
	const void *local_sockaddr;
	uint32_t local_sockaddr_len;
	char reserve[128];
} gep_params;

typedef struct {
	uint64_t sender_tag;
	size_t length;
} gtag_info;

typedef struct {
	uint32_t op_attr_mask;
	uint32_t flags;
	void *request;
	void *cb;
	uint64_t datatype;
	void *user_data;
	void *reply_buffer;
	int memory_type;
	gtag_info *tag_info; // the recv_info union, as ucp_tag_recv_nbx reads it
	void *memh;
	char reserve[192];
} greq_param;

typedef struct {
	void *h;
	gst (*init_version)(unsigned, unsigned, const void *, const void *, void **);
	void (*cleanup)(void *);
	void (*get_version)(unsigned *, unsigned *, unsigned *);
	gst (*worker_create)(void *, const void *, void **);
	void (*worker_destroy)(void *);
	gst (*worker_get_address)(void *, void **, size_t *);
	void (*worker_release_address)(void *, void *);
	unsigned (*worker_progress)(void *);
	gst (*ep_create)(void *, const void *, void **);
	void *(*ep_close_nbx)(void *, const void *);
	void *(*tag_send_nbx)(void *, const void *, size_t, uint64_t, const void *);
	void *(*tag_recv_nbx)(void *, void *, size_t, uint64_t, uint64_t, const void *);
	gst (*request_check_status)(void *);
	gst (*tag_recv_request_test)(void *, gtag_info *);
	void (*request_cancel)(void *, void *);
	void (*request_free)(void *);
	const char *(*status_string)(gst);
} glib;

// Where UCX 1.13 reads what goccl sets (LP64).
_Static_assert(offsetof(gparams, features) == 8, "ucp_params_t.features");
_Static_assert(offsetof(gep_params, err_mode) == 16, "ucp_ep_params_t.err_mode");
_Static_assert(offsetof(gep_params, err_cb) == 24, "ucp_ep_params_t.err_handler.cb");
_Static_assert(offsetof(gep_params, err_arg) == 32, "ucp_ep_params_t.err_handler.arg");
_Static_assert(offsetof(greq_param, flags) == 4, "ucp_request_param_t.flags");
_Static_assert(offsetof(greq_param, tag_info) == 56, "ucp_request_param_t.recv_info");

static glib L;

#define SYM(field, name) do { *(void **)(&L.field) = dlsym(h, name); if (!L.field) { snprintf(err, errlen, "symbol %s missing", name); dlclose(h); return -1; } } while (0)

int g_load(const char *path, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	SYM(init_version, "ucp_init_version");
	SYM(cleanup, "ucp_cleanup");
	SYM(get_version, "ucp_get_version");
	SYM(worker_create, "ucp_worker_create");
	SYM(worker_destroy, "ucp_worker_destroy");
	SYM(worker_get_address, "ucp_worker_get_address");
	SYM(worker_release_address, "ucp_worker_release_address");
	SYM(worker_progress, "ucp_worker_progress");
	SYM(ep_create, "ucp_ep_create");
	SYM(ep_close_nbx, "ucp_ep_close_nbx");
	SYM(tag_send_nbx, "ucp_tag_send_nbx");
	SYM(tag_recv_nbx, "ucp_tag_recv_nbx");
	SYM(request_check_status, "ucp_request_check_status");
	SYM(tag_recv_request_test, "ucp_tag_recv_request_test");
	SYM(request_cancel, "ucp_request_cancel");
	SYM(request_free, "ucp_request_free");
	SYM(status_string, "ucs_status_string");
	L.h = h;
	return 0;
}

void g_version(unsigned *maj, unsigned *min, unsigned *rel) { L.get_version(maj, min, rel); }

const char *g_status_string(int s) { return L.status_string((gst)s); }

// UCP_PARAM_FIELD_FEATURES, UCP_FEATURE_TAG.
int g_init(unsigned maj, unsigned min, void **ctx) {
	gparams p;
	memset(&p, 0, sizeof p);
	p.field_mask = 1;
	p.features = 1;
	return L.init_version(maj, min, &p, NULL, ctx);
}

void g_cleanup(void *ctx) { L.cleanup(ctx); }

int g_worker(void *ctx, void **w) {
	char p[512];
	memset(p, 0, sizeof p); // field_mask 0: defaults (single-threaded)
	return L.worker_create(ctx, p, w);
}

void g_worker_destroy(void *w) { L.worker_destroy(w); }

int g_address(void *w, void **addr, size_t *len) { return L.worker_get_address(w, addr, len); }

void g_release_address(void *w, void *addr) { L.worker_release_address(w, addr); }

unsigned g_progress(void *w) { return L.worker_progress(w); }

// The error callback records an endpoint's failure where the waits look.
static void g_on_error(void *arg, void *ep, gst status) {
	(void)ep;
	*(volatile int8_t *)arg = status;
}

// REMOTE_ADDRESS | ERR_HANDLING_MODE | ERR_HANDLER; UCP_ERR_HANDLING_MODE_PEER.
int g_ep(void *w, const void *addr, int8_t *state, void **ep) {
	gep_params p;
	memset(&p, 0, sizeof p);
	p.field_mask = 1 | 2 | 4;
	p.address = addr;
	p.err_mode = 1;
	p.err_cb = g_on_error;
	p.err_arg = state;
	return L.ep_create(w, &p, ep);
}

// force: UCP_OP_ATTR_FIELD_FLAGS with UCP_EP_CLOSE_FLAG_FORCE.
void *g_ep_close(void *ep, int force) {
	greq_param p;
	memset(&p, 0, sizeof p);
	if (force) {
		p.op_attr_mask = 1u << 4;
		p.flags = 1;
	}
	return L.ep_close_nbx(ep, &p);
}

void *g_send(void *ep, uintptr_t buf, size_t n, uint64_t tag) {
	greq_param p;
	memset(&p, 0, sizeof p);
	return L.tag_send_nbx(ep, (const void *)buf, n, tag, &p);
}

// UCP_OP_ATTR_FLAG_NO_IMM_CMPL: a request even when the message is there
// already, since only the request tells the received length
// (g_recv_test).
void *g_recv(void *w, uintptr_t buf, size_t n, uint64_t tag) {
	greq_param p;
	memset(&p, 0, sizeof p);
	p.op_attr_mask = 1u << 16;
	return L.tag_recv_nbx(w, (void *)buf, n, tag, ~(uint64_t)0, &p);
}

int g_recv_test(void *req, size_t *len) {
	gtag_info info;
	memset(&info, 0, sizeof info);
	gst s = L.tag_recv_request_test(req, &info);
	*len = info.length;
	return s;
}

int g_check(void *req) { return L.request_check_status(req); }
void g_cancel(void *w, void *req) { L.request_cancel(w, req); }
void g_free(void *req) { L.request_free(req); }

// UCS_PTR_IS_ERR / UCS_PTR_STATUS: error codes live in the top 100
// values of the address space.
int g_ptr_status(void *p) {
	if ((uintptr_t)p >= (uintptr_t)(intptr_t)-100) return (int)(intptr_t)p;
	return 0;
}
