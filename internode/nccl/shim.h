#ifndef GOCCL_NCCL_SHIM_H
#define GOCCL_NCCL_SHIM_H
#include <stddef.h>
#include <stdint.h>
int gnccl_load(const char *path, char *err, size_t errlen, int *version, char *probe, size_t probelen);
const char *gnccl_error_string(int r);
const char *gnccl_last_error(void *comm);
int gnccl_unique_id(unsigned char *id);
int gnccl_init_rank(uintptr_t cuctx, void **comm, int nranks, const unsigned char *id, int rank);
int gnccl_all_reduce(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int op, void *comm, uintptr_t stream);
int gnccl_reduce_scatter(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int op, void *comm, uintptr_t stream);
int gnccl_all_gather(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, void *comm, uintptr_t stream);
int gnccl_broadcast(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int root, void *comm, uintptr_t stream);
int gnccl_reduce(uintptr_t cuctx, uintptr_t send, uintptr_t recv, size_t count, int dt, int op, int root, void *comm, uintptr_t stream);
int gnccl_send(uintptr_t cuctx, uintptr_t buf, size_t count, int dt, int peer, void *comm, uintptr_t stream);
int gnccl_recv(uintptr_t cuctx, uintptr_t buf, size_t count, int dt, int peer, void *comm, uintptr_t stream);
int gnccl_group_start(void);
int gnccl_group_end(uintptr_t cuctx);
int gnccl_async_error(void *comm, int *res);
int gnccl_abort(void *comm);
int gnccl_destroy(void *comm);
int gnccl_premulsum_create(int *op, uint64_t bits, uintptr_t devptr, int dt, void *comm);
int gnccl_premulsum_destroy(int op, void *comm);
#endif
