// cuda_emu.h: the CUDA builtins goccl's kernels use, for compiling
// kernels/*.cu with g++ (-DGOCCL_EMU -include emu/cuda_emu.h -x c++).
// A block runs as one process whose blockDim.x std::threads are the CUDA
// threads, so `__shared__` becomes `static`: exactly one copy per block.
// The system headers prims_emu.h needs are included here, because
// common.cuh includes prims_emu.h inside namespace goccl.
#pragma once

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmath>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#ifndef GOCCL_EMU
#error "cuda_emu.h is for GOCCL_EMU builds"
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ static

struct EmuDim3 {
  unsigned x, y, z;
};

// threadIdx is per thread; the others are per block process.
extern thread_local EmuDim3 threadIdx;
extern EmuDim3 blockIdx, blockDim, gridDim;

// Runtime hooks used by prims_emu.h (defined in emu_runtime.cc).
void emu_bar_sync();
void emu_poll_pause(const void* p);
void emu_jitter();
// emu_slow_us > 0 makes this block's loads slow (a slow reader): see emu_slow.
extern int emu_slow_us;
void emu_slow();
// The next launches' dynamic shared memory (prims_emu.h's dyn_smem).
extern void* emu_dyn_smem;
extern unsigned emu_dyn_smem_bytes;
void emu_set_dyn_smem(unsigned bytes);
[[noreturn]] void emu_misaligned(const void* p, int width);
