// nvls.cu: NVLS (NVSwitch multicast) kernels. They address a multicast
// team built by transport/nvls: a multimem.st to the multicast address
// writes every rank's copy, a multimem.ld_reduce there returns the
// reduction of every rank's copy, computed in the switch.
//
// SAFETY (DESIGN §8): these kernels are compiled and their SASS inspected on
// the project's GPU machines, never run there. Nothing here creates a
// multicast object; the Go side only launches them on a team that
// transport/nvls built, which it does only behind the GOCCL_NVLS_ENABLE gate.
//
// Exported names: goccl_nvls_allreduce_<type>_<op>,
// goccl_nvls_reducescatter_<type>_<op>, goccl_nvls_allgather,
// goccl_nvls_broadcast, goccl_nvls_barrier. Types and ops are those
// multimem reduces: sum for f32, f16 and bf16 (accumulated in f32), i32,
// u32, i64 and u64; min and max for the four integer types.
//
// multimem needs sm_90 and PTX ISA 8.1 (CUDA 12.1). Built for an older
// architecture the kernels exist but do nothing: a GPU without multicast can
// never hold a team, so they cannot be reached there.
//
// No CUDA header is used (nvcc supplies the builtins; kernels/clang_prelude.h
// does for the local clang check), and everything lives in namespace
// goccl_nvls because build.sh compiles all kernels/*.cu as one unit.

namespace goccl_nvls {

typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;

[[maybe_unused]] constexpr int kThreads = 512;   // block size the Go side launches with
[[maybe_unused]] constexpr int kMaxBlocks = 128;  // barrier flags (u32 each) in the team buffer

// Params is the kernels' one parameter, passed by value. The Go mirror is
// transport/nvls.KernelParams; its test checks these offsets.
struct Params {
  u64 mc;         //  0: multicast address of the data area of the team buffer
  u64 src;        //  8: local input (allgather, broadcast root)
  u64 dst;        // 16: local output (reducescatter)
  u64 bytes;      // 24: allreduce/broadcast: total; reducescatter/allgather: per rank
  u64 stride;     // 32: bytes between ranks' blocks in the data area, multiple of 16
  u64 mcFlags;    // 40: multicast address of the barrier flags, kMaxBlocks u32
  u64 ucFlags;    // 48: this rank's unicast address of the same flags
  u64 epochs;     // 56: this rank's barrier epochs, kMaxBlocks u32, local memory
  u64 abortFlag;  // 64: u32 in host-pinned mapped memory, nonzero = give up; 0 = none
  i32 rank;       // 72
  i32 nranks;     // 76
  i32 root;       // 80: broadcast
  u32 pad;        // 84
};                // 88 bytes

// StampTail is the reducing kernels' second parameter (at byte 88 of the
// buffer): the flight recorder's timestamps, stored as common.cuh's
// stamp_begin and stamp_end do (collectives/gpu/nvls.go writes it). A call
// of several launches times itself from its first launch's start to its
// last launch's end (flags).
struct StampTail {
  u64 slot;     //  0: the call's Stamp (common.cuh; host-mapped); 0 stores nothing
  u64 seq;      //  8: the call's number, stored after the end
  u64 counter;  // 16: a u32 counting the launch's blocks done (the signal area's kStampCountOffset)
  u32 flags;    // 24: kTailClaim | kTailStart | kTailEnd
  u32 pad;      // 28
};              // 32 bytes
[[maybe_unused]] constexpr u32 kTailClaim = 1, kTailStart = 2, kTailEnd = 4;

struct alignas(16) Vec {
  u32 x, y, z, w;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GOCCL_NVLS_SM90 1
#endif

#ifdef GOCCL_NVLS_SM90

// ---- multimem primitives (sm_90) -----------------------------------------

// Stores 16 bytes to every rank's copy. The .f32 form moves bits only.
__device__ __forceinline__ void mm_st16(u64 a, Vec v) {
  asm volatile(
      "{ .reg .f32 a, b, c, d;\n\t"
      "mov.b32 a, %1; mov.b32 b, %2; mov.b32 c, %3; mov.b32 d, %4;\n\t"
      "multimem.st.relaxed.sys.global.v4.f32 [%0], {a, b, c, d}; }"
      :
      : "l"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
      : "memory");
}

// Arrival at a barrier: adds 1 to the flag on every rank, releasing this
// block's earlier writes (made visible to the block by __syncthreads).
__device__ __forceinline__ void mm_red_release_add(u64 a, u32 v) {
  asm volatile("multimem.red.release.sys.global.add.u32 [%0], %1;" : : "l"(a), "r"(v) : "memory");
}

__device__ __forceinline__ void fence_proxy_alias() {
  asm volatile("fence.proxy.alias;" : : : "memory");
}

__device__ __forceinline__ u32 ld_acquire_sys(u64 a) {
  u32 v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(a) : "memory");
  return v;
}

__device__ __forceinline__ u32 ld_volatile(u64 a) {
  u32 v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(a) : "memory");
  return v;
}

__device__ __forceinline__ u64 globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void st_volatile64(u64 a, u64 v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" : : "l"(a), "l"(v) : "memory");
}

// stamp_begin: one thread of block 0 claims the Stamp (number 0) and
// stores the start, as the launch's flags say.
__device__ __forceinline__ void stamp_begin(const StampTail& s) {
  if (s.slot == 0 || blockIdx.x != 0 || threadIdx.x != 0) return;
  if (s.flags & kTailClaim) st_volatile64(s.slot + 16, 0);
  if (s.flags & kTailStart) st_volatile64(s.slot, globaltimer());
}
// stamp_end: the launch's last block to finish stores the end, then the
// number (every block passes here, extra blocks too).
__device__ __forceinline__ void stamp_end(const StampTail& s) {
  if (s.slot == 0 || !(s.flags & kTailEnd)) return;
  __syncthreads();
  if (threadIdx.x != 0) return;
  u32 old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(s.counter) : "memory");
  if (old != gridDim.x - 1) return;
  asm volatile("st.volatile.global.u32 [%0], 0;" : : "l"(s.counter) : "memory");
  st_volatile64(s.slot + 8, globaltimer());
  st_volatile64(s.slot + 16, s.seq);
}

// One reducer per (type, op): ld16 returns the reduction over every rank of
// the 16 bytes at multicast address a (16-byte aligned).
struct SumF32 {
  static __device__ __forceinline__ Vec ld16(u64 a) {
    Vec v;
    asm volatile(
        "{ .reg .f32 a, b, c, d;\n\t"
        "multimem.ld_reduce.relaxed.sys.global.add.v4.f32 {a, b, c, d}, [%4];\n\t"
        "mov.b32 %0, a; mov.b32 %1, b; mov.b32 %2, c; mov.b32 %3, d; }"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(a)
        : "memory");
    return v;
  }
};

// Half types: the switch accumulates in f32 (.acc::f32) and rounds once.
#ifndef GOCCL_NVLS_NO_ACC_F32
#define GOCCL_NVLS_ACC ".acc::f32"
#else
#define GOCCL_NVLS_ACC ""
#endif

struct SumF16 {
  static __device__ __forceinline__ Vec ld16(u64 a) {
    Vec v;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add" GOCCL_NVLS_ACC
                 ".v4.f16x2 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(a)
                 : "memory");
    return v;
  }
};

struct SumBF16 {
  static __device__ __forceinline__ Vec ld16(u64 a) {
    Vec v;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add" GOCCL_NVLS_ACC
                 ".v4.bf16x2 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(a)
                 : "memory");
    return v;
  }
};

// 32-bit integers have no vector form: four scalar reductions.
#define GOCCL_NVLS_INT32(Name, opty)                                         \
  struct Name {                                                              \
    static __device__ __forceinline__ Vec ld16(u64 a) {                      \
      Vec v;                                                                 \
      asm volatile(                                                          \
          "multimem.ld_reduce.relaxed.sys.global." opty " %0, [%4];\n\t"     \
          "multimem.ld_reduce.relaxed.sys.global." opty " %1, [%4+4];\n\t"   \
          "multimem.ld_reduce.relaxed.sys.global." opty " %2, [%4+8];\n\t"   \
          "multimem.ld_reduce.relaxed.sys.global." opty " %3, [%4+12];"      \
          : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                       \
          : "l"(a)                                                           \
          : "memory");                                                       \
      return v;                                                              \
    }                                                                        \
  };

// 64-bit integers: two scalar reductions. Two's complement makes the u64
// add right for i64 too.
#define GOCCL_NVLS_INT64(Name, opty)                                         \
  struct Name {                                                              \
    static __device__ __forceinline__ Vec ld16(u64 a) {                      \
      u64 lo, hi;                                                            \
      asm volatile(                                                          \
          "multimem.ld_reduce.relaxed.sys.global." opty " %0, [%2];\n\t"     \
          "multimem.ld_reduce.relaxed.sys.global." opty " %1, [%2+8];"       \
          : "=l"(lo), "=l"(hi)                                               \
          : "l"(a)                                                           \
          : "memory");                                                       \
      Vec v;                                                                 \
      v.x = (u32)lo;                                                         \
      v.y = (u32)(lo >> 32);                                                 \
      v.z = (u32)hi;                                                         \
      v.w = (u32)(hi >> 32);                                                 \
      return v;                                                              \
    }                                                                        \
  };

GOCCL_NVLS_INT32(SumI32, "add.s32")
GOCCL_NVLS_INT32(SumU32, "add.u32")
GOCCL_NVLS_INT32(MinI32, "min.s32")
GOCCL_NVLS_INT32(MinU32, "min.u32")
GOCCL_NVLS_INT32(MaxI32, "max.s32")
GOCCL_NVLS_INT32(MaxU32, "max.u32")
GOCCL_NVLS_INT64(SumI64, "add.u64")
GOCCL_NVLS_INT64(SumU64, "add.u64")
GOCCL_NVLS_INT64(MinI64, "min.s64")
GOCCL_NVLS_INT64(MinU64, "min.u64")
GOCCL_NVLS_INT64(MaxI64, "max.s64")
GOCCL_NVLS_INT64(MaxU64, "max.u64")

// ---- ordinary local memory ------------------------------------------------

__device__ __forceinline__ void st16(u64 a, Vec v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};"
               :
               : "l"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ __forceinline__ Vec ld16(u64 a) {
  Vec v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(a)
               : "memory");
  return v;
}

// Loads the 16 bytes at offset off of a local buffer of n bytes: one vector
// load where aligned and whole, else byte by byte with zeros past the end.
__device__ __forceinline__ Vec load_part(u64 base, u64 off, u64 n) {
  if ((base & 15) == 0 && off + 16 <= n) return ld16(base + off);
  u32 w[4] = {0, 0, 0, 0};
  for (int k = 0; k < 16 && off + k < n; k++) {
    u32 b = *reinterpret_cast<const volatile unsigned char*>(base + off + k);
    w[k >> 2] |= b << (8 * (k & 3));
  }
  Vec v;
  v.x = w[0];
  v.y = w[1];
  v.z = w[2];
  v.w = w[3];
  return v;
}

// Stores the part of v that falls inside a local buffer of n bytes.
__device__ __forceinline__ void store_part(u64 base, u64 off, u64 n, Vec v) {
  if ((base & 15) == 0 && off + 16 <= n) {
    st16(base + off, v);
    return;
  }
  u32 w[4] = {v.x, v.y, v.z, v.w};
  for (int k = 0; k < 16 && off + k < n; k++) {
    *reinterpret_cast<unsigned char*>(base + off + k) = (unsigned char)(w[k >> 2] >> (8 * (k & 3)));
  }
}

// ---- barrier --------------------------------------------------------------

// barrier makes block b of this rank wait for block b of every rank. Each
// arrival adds 1 to flag b on every rank through the multicast address; a
// block's e-th barrier is complete when its own copy reaches e*nranks. The
// epoch lives in device memory and is advanced by the kernel itself, so
// the same launch works under CUDA-graph replay. It returns false when the
// abort flag was raised while waiting; the kernel then stops.
__device__ bool barrier(const Params& p) {
  __shared__ int aborted;
  __syncthreads();
  if (threadIdx.x == 0) {
    int ab = 0;
    u32* epochs = reinterpret_cast<u32*>(p.epochs);
    u32 e = epochs[blockIdx.x] + 1;
    epochs[blockIdx.x] = e;
    u32 target = e * (u32)p.nranks;
    mm_red_release_add(p.mcFlags + 4ull * blockIdx.x, 1u);
    // The flag is written through the multicast alias and read through the
    // unicast one: order the two proxies (CUDA guide, multicast objects).
    fence_proxy_alias();
    u64 mine = p.ucFlags + 4ull * blockIdx.x;
    for (u32 spin = 1;; spin++) {
      // Wrap-safe: counters may pass 2^32 in a long job.
      if ((i32)(ld_acquire_sys(mine) - target) >= 0) break;
      // The abort flag is in host memory: poll it rarely.
      if ((spin & 1023) == 0 && p.abortFlag != 0 && ld_volatile(p.abortFlag) != 0) {
        ab = 1;
        break;
      }
    }
    // Peers' data is next read through the multicast alias.
    fence_proxy_alias();
    aborted = ab;
  }
  __syncthreads();
  return !aborted;
}

// The part [lo, hi) of n 16-byte vectors that rank r of nr handles.
__device__ __forceinline__ void share(u64 n, int r, int nr, u64* lo, u64* hi) {
  u64 per = n / (u64)nr, rem = n % (u64)nr;
  u64 ur = (u64)r;
  *lo = ur * per + (ur < rem ? ur : rem);
  *hi = *lo + per + (ur < rem ? 1 : 0);
}

// Blocks past kMaxBlocks have no barrier flag: they leave at once and the
// others cover their work (the grid stride counts only flagged blocks).
__device__ __forceinline__ bool extra_block() { return blockIdx.x >= (u32)kMaxBlocks; }
__device__ __forceinline__ u64 grid_step() {
  u32 nb = gridDim.x < (u32)kMaxBlocks ? gridDim.x : (u32)kMaxBlocks;
  return (u64)nb * blockDim.x;
}

// ---- collectives ----------------------------------------------------------

// allreduce: in place on the team buffer. Every rank ld_reduces its share
// of the vectors and multimem-stores the result to all ranks. It touches up
// to bytes rounded up to 16 (padding the buffer always has).
template <class R>
__device__ void allreduce(const Params& p) {
  if (extra_block() || !barrier(p)) return;  // every rank's input is in place
  u64 lo, hi;
  share((p.bytes + 15) / 16, p.rank, p.nranks, &lo, &hi);
  const u64 step = grid_step();
  u64 i = lo + (u64)blockIdx.x * blockDim.x + threadIdx.x;
  // Four loads in flight per thread before their stores.
  for (; i + 3 * step < hi; i += 4 * step) {
    Vec v0 = R::ld16(p.mc + 16 * i);
    Vec v1 = R::ld16(p.mc + 16 * (i + step));
    Vec v2 = R::ld16(p.mc + 16 * (i + 2 * step));
    Vec v3 = R::ld16(p.mc + 16 * (i + 3 * step));
    mm_st16(p.mc + 16 * i, v0);
    mm_st16(p.mc + 16 * (i + step), v1);
    mm_st16(p.mc + 16 * (i + 2 * step), v2);
    mm_st16(p.mc + 16 * (i + 3 * step), v3);
  }
  for (; i < hi; i += step) mm_st16(p.mc + 16 * i, R::ld16(p.mc + 16 * i));
  barrier(p);  // every rank's results have landed everywhere
}

// reducescatter: rank r reduces block r (at r*stride in the team buffer)
// of every rank into its local dst (bytes).
template <class R>
__device__ void reducescatter(const Params& p) {
  if (extra_block() || !barrier(p)) return;
  const u64 base = p.mc + (u64)p.rank * p.stride;
  const u64 n = (p.bytes + 15) / 16;
  const u64 step = grid_step();
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    store_part(p.dst, 16 * i, p.bytes, R::ld16(base + 16 * i));
  }
  barrier(p);  // nobody refills the team buffer while a peer still reads it
}

#endif  // GOCCL_NVLS_SM90

// allgather: rank r stores its src (bytes) into block r of every rank's
// team buffer; afterwards each rank's unicast copy holds all blocks.
__device__ void allgather(const Params& p) {
#ifdef GOCCL_NVLS_SM90
  if (extra_block() || !barrier(p)) return;  // every rank is done with the previous contents
  const u64 base = p.mc + (u64)p.rank * p.stride;
  const u64 n = (p.bytes + 15) / 16;
  const u64 step = grid_step();
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    mm_st16(base + 16 * i, load_part(p.src, 16 * i, p.bytes));
  }
  barrier(p);
#endif
}

// broadcast: the root stores its src into every rank's team buffer.
__device__ void broadcast(const Params& p) {
#ifdef GOCCL_NVLS_SM90
  if (extra_block() || !barrier(p)) return;
  if (p.rank == p.root) {
    const u64 n = (p.bytes + 15) / 16;
    const u64 step = grid_step();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
      mm_st16(p.mc + 16 * i, load_part(p.src, 16 * i, p.bytes));
    }
  }
  barrier(p);
#endif
}

}  // namespace goccl_nvls

#ifdef GOCCL_NVLS_SM90
#define GOCCL_NVLS_REDUCE_KERNELS(tname, opname, R)                                        \
  extern "C" __global__ void __launch_bounds__(goccl_nvls::kThreads)                       \
      goccl_nvls_allreduce_##tname##_##opname(goccl_nvls::Params p, goccl_nvls::StampTail s) { \
    goccl_nvls::stamp_begin(s);                                                            \
    goccl_nvls::allreduce<goccl_nvls::R>(p);                                               \
    goccl_nvls::stamp_end(s);                                                              \
  }                                                                                        \
  extern "C" __global__ void __launch_bounds__(goccl_nvls::kThreads)                       \
      goccl_nvls_reducescatter_##tname##_##opname(goccl_nvls::Params p, goccl_nvls::StampTail s) { \
    goccl_nvls::stamp_begin(s);                                                            \
    goccl_nvls::reducescatter<goccl_nvls::R>(p);                                           \
    goccl_nvls::stamp_end(s);                                                              \
  }
#else
// Below sm_90 the entry points exist (the fatbin has the same names for
// every architecture) but do nothing.
#define GOCCL_NVLS_REDUCE_KERNELS(tname, opname, R)                                            \
  extern "C" __global__ void __launch_bounds__(goccl_nvls::kThreads)                           \
      goccl_nvls_allreduce_##tname##_##opname(goccl_nvls::Params p, goccl_nvls::StampTail s) {}     \
  extern "C" __global__ void __launch_bounds__(goccl_nvls::kThreads)                           \
      goccl_nvls_reducescatter_##tname##_##opname(goccl_nvls::Params p, goccl_nvls::StampTail s) {}
#endif

GOCCL_NVLS_REDUCE_KERNELS(f32, sum, SumF32)
GOCCL_NVLS_REDUCE_KERNELS(f16, sum, SumF16)
GOCCL_NVLS_REDUCE_KERNELS(bf16, sum, SumBF16)
GOCCL_NVLS_REDUCE_KERNELS(i32, sum, SumI32)
GOCCL_NVLS_REDUCE_KERNELS(u32, sum, SumU32)
GOCCL_NVLS_REDUCE_KERNELS(i64, sum, SumI64)
GOCCL_NVLS_REDUCE_KERNELS(u64, sum, SumU64)
GOCCL_NVLS_REDUCE_KERNELS(i32, min, MinI32)
GOCCL_NVLS_REDUCE_KERNELS(u32, min, MinU32)
GOCCL_NVLS_REDUCE_KERNELS(i64, min, MinI64)
GOCCL_NVLS_REDUCE_KERNELS(u64, min, MinU64)
GOCCL_NVLS_REDUCE_KERNELS(i32, max, MaxI32)
GOCCL_NVLS_REDUCE_KERNELS(u32, max, MaxU32)
GOCCL_NVLS_REDUCE_KERNELS(i64, max, MaxI64)
GOCCL_NVLS_REDUCE_KERNELS(u64, max, MaxU64)

extern "C" __global__ void __launch_bounds__(goccl_nvls::kThreads)
    goccl_nvls_allgather(goccl_nvls::Params p) {
  goccl_nvls::allgather(p);
}

extern "C" __global__ void __launch_bounds__(goccl_nvls::kThreads)
    goccl_nvls_broadcast(goccl_nvls::Params p) {
  goccl_nvls::broadcast(p);
}

// One barrier across the team, per block: launch with the grid the next
// kernels use.
extern "C" __global__ void __launch_bounds__(goccl_nvls::kThreads)
    goccl_nvls_barrier(goccl_nvls::Params p) {
#ifdef GOCCL_NVLS_SM90
  if (!goccl_nvls::extra_block()) goccl_nvls::barrier(p);
#endif
}
