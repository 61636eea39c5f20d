#ifndef GOCCL_NCCL_SHIM_H
#define GOCCL_NCCL_SHIM_H
#include <stddef.h>
#include <stdint.h>
int gn_load(const char *path, char *err, size_t errlen, int *version, char *probe, size_t probelen);
const char *gn_error_string(int r);
const char *gn_last_error(void *comm);
int gn_unique_id(unsigned char *id);
int gn_init_rank(uintptr_t cuctx, void **comm, int nranks, const unsigned char *id, int rank);
int gn_all_reduce(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int op, void *comm, uintptr_t stream);
int gn_reduce_scatter(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int op, void *comm, uintptr_t stream);
int gn_all_gather(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, void *comm, uintptr_t stream);
int gn_broadcast(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int root, void *comm, uintptr_t stream);
int gn_reduce(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int op, int root, void *comm, uintptr_t stream);
int gn_send(uintptr_t cuctx, uintptr_t buf, size_t count, int dt, int peer, void *comm, uintptr_t stream);
int gn_recv(uintptr_t cuctx, uintptr_t buf, size_t count, int dt, int peer, void *comm, uintptr_t stream);
int gn_group_start(void);
int gn_group_end(uintptr_t cuctx);
int gn_async_error(void *comm, int *res);
int gn_abort(void *comm);
int gn_destroy(void *comm);
#endif
