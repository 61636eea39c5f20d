/* shim.h: what the C layer of libnccl.so.2 and its Go side share. */
#ifndef GOCCL_CAPI_SHIM_H
#define GOCCL_CAPI_SHIM_H

#include <stddef.h>
#include <stdint.h>

/* The library's own name and version, in ncclGetLastError's texts and the
 * INFO log. */
#define GOCCL_LIB_NAME "goccl"
#define GOCCL_LIB_VERSION "0.9.0"
#define GOCCL_API_NAME "NCCL 2.28 API"

/* What goccl_call issues. The values only travel between the two layers. */
enum {
  GOCCL_CALL_ALLREDUCE = 0,
  GOCCL_CALL_BROADCAST = 1,
  GOCCL_CALL_REDUCE = 2,
  GOCCL_CALL_ALLGATHER = 3,
  GOCCL_CALL_REDUCESCATTER = 4,
  GOCCL_CALL_ALLTOALL = 5,
  GOCCL_CALL_GATHER = 6,
  GOCCL_CALL_SCATTER = 7,
  GOCCL_CALL_SEND = 8,
  GOCCL_CALL_RECV = 9
};

/* What goccl_comm_query answers. */
enum { GOCCL_QUERY_COUNT = 0, GOCCL_QUERY_DEVICE = 1, GOCCL_QUERY_RANK = 2 };

/* Leaves text as the calling thread's (and the process's) last error. */
void goccl_set_last_error(const char* text);

/* The calling thread's group: depth 0 outside ncclGroupStart/End. */
int goccl_group_depth(void);

#endif
