// check.cuh: no measurement; checked CUDA calls for the probes: CK for the runtime API,
// CKD for the driver API; either prints the call and exits on failure.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

#define CKD(x)                                                        \
  do {                                                                \
    CUresult r_ = (x);                                                \
    if (r_ != CUDA_SUCCESS) {                                         \
      const char* s_ = nullptr;                                       \
      cuGetErrorString(r_, &s_);                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_); \
      exit(1);                                                        \
    }                                                                 \
  } while (0)
