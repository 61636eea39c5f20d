/*
 * nccl.h: the NCCL 2.28 C API as goccl's libnccl.so.2 implements it.
 *
 * The names, values, struct layouts and version macros are those of the
 * NCCL 2.28 API, so that a program compiled against NCCL's header runs on
 * goccl's library and one compiled against this header runs on NCCL's.
 * The function declarations below are the ABI; what goccl does behind each
 * one is described in docs (capi) and, for the functions it does not
 * implement, in the text ncclGetLastError leaves.
 */
#ifndef NCCL_H_
#define NCCL_H_

/* CUDA's headers when the compiler has them; otherwise the one CUDA type
 * the API needs, declared as CUDA declares it (an identical typedef may be
 * repeated, so a later #include <cuda_runtime.h> still compiles). */
#if defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define GOCCL_NCCL_H_HAS_CUDA 1
#endif
#endif
#ifdef GOCCL_NCCL_H_HAS_CUDA
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#else
typedef struct CUstream_st* cudaStream_t;
#endif

#include <limits.h>
#include <stddef.h>

/* The API level: NCCL 2.28 (see ncclGetVersion). */
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 22800
/* Version codes below 2.9 had two decimal digits for the minor number. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

/* The library behind this header. */
#define GOCCL_NCCL 1

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* ncclCommWindowRegister flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy values. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink flags. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

/* ncclCommRevoke flags. */
#define NCCL_REVOKE_DEFAULT 0x00

/* Communicator configuration, versioned: the library reads the fields that
 * fit in .size and that .version says exist. */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_MAGIC 0xcafebeef

#define NCCL_CONFIG_INITIALIZER                                                        \
  {                                                                                    \
    sizeof(ncclConfig_t), NCCL_CONFIG_MAGIC, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                   \
  }

/* What ncclGroupSimulateEnd reports. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_MAGIC 0x74685283

#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), NCCL_SIM_INFO_MAGIC, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT }

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  /* Built-in operators are below ncclNumOps; ncclRedOpCreate* hands out
   * values from ncclNumOps up to ncclMaxRedOp. */
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
  ncclScalarDevice = 0,        /* read from device memory while the call runs */
  ncclScalarHostImmediate = 1  /* read from host memory before the create returns */
} ncclScalarResidence_t;

/* Each function also exists with a "p" prefix (pncclAllReduce, ...), the
 * profiling entry points; both names reach the same code. */
#define GOCCL_NCCL_DECL(ret, name, args) ret name args; ret p##name args;

/* Memory. */
GOCCL_NCCL_DECL(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size))
GOCCL_NCCL_DECL(ncclResult_t, ncclMemFree, (void* ptr))

/* Version, ids, communicators. */
GOCCL_NCCL_DECL(ncclResult_t, ncclGetVersion, (int* version))
GOCCL_NCCL_DECL(ncclResult_t, ncclGetUniqueId, (ncclUniqueId* uniqueId))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommInitRankConfig,
                (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommInitAll, (ncclComm_t* comm, int ndev, const int* devlist))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommAbort, (ncclComm_t comm))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommSplit,
                (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommShrink,
                (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                 ncclConfig_t* config, int shrinkFlags))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommInitRankScalable,
                (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                 ncclConfig_t* config))

/* Errors. */
GOCCL_NCCL_DECL(const char*, ncclGetErrorString, (ncclResult_t result))
GOCCL_NCCL_DECL(const char*, ncclGetLastError, (ncclComm_t comm))
GOCCL_NCCL_DECL(void, ncclResetDebugInit, (void))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))

/* Queries. */
GOCCL_NCCL_DECL(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank))

/* Registration. */
GOCCL_NCCL_DECL(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommWindowRegister,
                (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags))
GOCCL_NCCL_DECL(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))

/* Custom reduction operators. */
GOCCL_NCCL_DECL(ncclResult_t, ncclRedOpCreatePreMulSum,
                (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
                 ncclComm_t comm))
GOCCL_NCCL_DECL(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))

/* Collectives: enqueued on stream; in place when the buffers coincide as
 * NCCL defines it. */
GOCCL_NCCL_DECL(ncclResult_t, ncclReduce,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                 int root, ncclComm_t comm, cudaStream_t stream))
GOCCL_NCCL_DECL(ncclResult_t, ncclBcast,
                (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream))
GOCCL_NCCL_DECL(ncclResult_t, ncclBroadcast,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                 ncclComm_t comm, cudaStream_t stream))
GOCCL_NCCL_DECL(ncclResult_t, ncclAllReduce,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                 ncclComm_t comm, cudaStream_t stream))
GOCCL_NCCL_DECL(ncclResult_t, ncclReduceScatter,
                (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))
GOCCL_NCCL_DECL(ncclResult_t, ncclAllGather,
                (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                 ncclComm_t comm, cudaStream_t stream))
GOCCL_NCCL_DECL(ncclResult_t, ncclAlltoAll,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                 cudaStream_t stream))
GOCCL_NCCL_DECL(ncclResult_t, ncclGather,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                 ncclComm_t comm, cudaStream_t stream))
GOCCL_NCCL_DECL(ncclResult_t, ncclScatter,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                 ncclComm_t comm, cudaStream_t stream))

/* Point to point. */
GOCCL_NCCL_DECL(ncclResult_t, ncclSend,
                (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                 cudaStream_t stream))
GOCCL_NCCL_DECL(ncclResult_t, ncclRecv,
                (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                 cudaStream_t stream))

/* Groups: calls between ncclGroupStart and the matching ncclGroupEnd of one
 * thread are issued together at the outermost ncclGroupEnd. */
GOCCL_NCCL_DECL(ncclResult_t, ncclGroupStart, (void))
GOCCL_NCCL_DECL(ncclResult_t, ncclGroupEnd, (void))
GOCCL_NCCL_DECL(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))

#undef GOCCL_NCCL_DECL

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
