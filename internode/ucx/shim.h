#ifndef GOCCL_UCX_SHIM_H
#define GOCCL_UCX_SHIM_H
#include <stddef.h>
#include <stdint.h>
int g_load(const char *path, char *err, size_t errlen);
void g_version(unsigned *maj, unsigned *min, unsigned *rel);
const char *g_status_string(int s);
int g_init(unsigned maj, unsigned min, void **ctx);
void g_cleanup(void *ctx);
int g_worker(void *ctx, void **w);
void g_worker_destroy(void *w);
int g_address(void *w, void **addr, size_t *len);
void g_release_address(void *w, void *addr);
unsigned g_progress(void *w);
int g_ep(void *w, const void *addr, int8_t *state, void **ep);
void *g_ep_close(void *ep, int force);
void *g_send(void *ep, uintptr_t buf, size_t n, uint64_t tag);
void *g_recv(void *w, uintptr_t buf, size_t n, uint64_t tag);
int g_recv_test(void *req, size_t *len);
int g_check(void *req);
void g_cancel(void *w, void *req);
void g_free(void *req);
int g_ptr_status(void *p);
#endif
