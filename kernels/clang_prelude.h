// clang_prelude.h lets clang compile kernels/*.cu without the CUDA toolkit,
// as a fast syntax check on machines without nvcc:
//   clang++-16 -x cuda --cuda-device-only --cuda-gpu-arch=sm_90 -nocudainc \
//     -nocudalib -include kernels/clang_prelude.h -S -o /tmp/x.ptx kernels/allreduce.cu
// nvcc supplies all of this itself; build.sh never includes this file.
#pragma once
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#include <__clang_cuda_builtin_vars.h>
