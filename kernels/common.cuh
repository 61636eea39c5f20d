// common.cuh: types, the launch parameter block, memory access primitives,
// reduction operators and the inter-GPU barrier shared by every goccl
// kernel. It needs no CUDA header: nvcc provides the builtins, and
// clang_prelude.h provides them for clang syntax checks.
#pragma once

namespace goccl {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef signed char i8;
typedef int i32;
typedef long long i64;

// Raw 16- and 8-bit floating-point types; arithmetic happens in float32.
struct f16 { u16 bits; };
struct bf16 { u16 bits; };
struct f8e4m3 { u8 bits; };  // OCP E4M3: bias 7, no infinity, 0x7f NaN, 448 the largest
struct f8e5m2 { u8 bits; };  // OCP E5M2: bias 15, IEEE-like, 57344 the largest finite

// Limits of the workspace layout; the Go side (collectives/gpu) uses the
// same numbers. kMaxBlocks bounds a launch's grid through the signal area's
// per-block slots and epochs; the staging has slots for the grid the
// communicator was laid out for (Params.blockSlots), which may be less.
// kThreads bounds a block (the launch bound); a launch may use fewer.
constexpr int kMaxRanks = 8;
constexpr int kMaxBlocks = 512;
constexpr int kThreads = 512;
// Signal area: incoming slots [kMaxBlocks][kMaxRanks] u32, then the
// per-block epoch counters [kMaxBlocks] u32.
constexpr u64 kEpochOffset = (u64)kMaxBlocks * kMaxRanks * 4;
// The copy-engine flag area (collectives/gpu/ce.go) at kCEFlagOffset of the
// signal area, in bytes from there: ready[kMaxRanks] @0 and done @128 (stream
// memory operations only), then the copy-engine reduction's flags: data[src]
// @256 (written by src's copy stream after each chunk it copied here; only
// streams wait on it), landed @384 (written by this rank's own stream once
// every source's chunk is here: the kernel polls this one),
// reduced[kCESlots] @512 (a chunk of this rank's output is final) and
// free[src][kCESlots] @1024 (src's kernel is done with our chunk in its
// staging). Counters used only by the kernel follow the flag area.
constexpr u64 kCEFlagOffset = 32 << 10;
constexpr u64 kCEDataOff = 256;
constexpr u64 kCELandedOff = 384;
constexpr u64 kCEReducedOff = 512;
constexpr u64 kCEFreeOff = 1024;
constexpr u64 kCEFlagBytes = 4096;
constexpr u32 kCESlots = 64;  // flag slots per source, used cyclically by chunk index
constexpr u64 kCECountOffset = kCEFlagOffset + kCEFlagBytes;  // [kCESlots] u32
// Call numbers: block 0's barrier at epoch e writes the low 32 bits of
// Params.seq into every peer's kSeqOffset[e & 1][rank] before its flag,
// and compares the peer's after its wait (Ctx::barrier); the LL kernel
// has its own numbers and flags at kLLSeqOffset (ll.cu).
constexpr u64 kSeqOffset = 18 << 10;  // [2][kMaxRanks] u32
// The error record the host reads (collectives/gpu/p2p.go kernelError):
// kErrOffset bytes past the abort flag, in host-pinned memory, a word
// (1 | code << 1 | peer << 8), this rank's value at +8 and the peer's at
// +16; the first error of a rank claims it through kErrClaimOffset (a u32
// of the signal area), and every error raises the abort flag.
constexpr u64 kErrOffset = 32;
constexpr u64 kErrClaimOffset = 48 << 10;
// kErrSendTimeout, kErrRecvTimeout: a point-to-point wait on the peer
// outlasted the timeout (p2p.cu): this rank's value is the op's number
// (the k-th Send to, or Recv from, the peer), the peer's the ns waited.
enum ErrCode : u32 { kErrSendBytes = 0, kErrRecvBytes = 1, kErrCall = 2, kErrSendTimeout = 3, kErrRecvTimeout = 4 };

// Params is the single kernel parameter, passed by value. Keep it in sync
// with collectives/gpu/params.go (offsets are checked by its tests).
struct Params {
  u64 send;              //   0: this rank's input
  u64 recv;              //   8: this rank's output
  u64 count;             //  16: elements (see each collective)
  u64 abortFlag;         //  24: u32 in host-pinned mapped memory
  u64 signals;           //  32: this rank's signal area
  u64 peerSignals[kMaxRanks];  //  40: every rank's signal area, by rank
  u64 peerStaging[kMaxRanks];  // 104: every rank's staging, by rank
  u32 blockSlots;        // 168: staging slots per (half, source): the grid the staging was laid out for
  u32 shareBytes;        // 172: a block's share of a round is cut to a multiple of this (a power of 2, >= 16)
  u64 seq;               // 176: the call's number on the communicator (Args.Seq); 0: not checked
  u64 reserved[6];       // 184: [0] the call's Stamp (host-mapped; 0: none); [1] (192) PreMulSum's scalar (see premul_scalar); [2..3] the fused group's descriptors (fused.cu); [4] (216) the point-to-point launch's stamp flags (p2p.cu)
  u64 slotBytes;         // 232: staging bytes per (half, source, block)
  i32 rank;              // 240
  i32 nranks;            // 244
  i32 root;              // 248
  u32 flags;             // 252
  u32 elemSize;          // 256: bytes per element for the copy kernels
  u32 ceChunks;          // 260: chunks of a copy-engine reduction, the same on every rank (cereduce.cu)
  u64 llOffset;          // 264: the low-latency lines' offset in each staging (ll.cu)
  u64 ceChunk;           // 272: elements per chunk (cereduce.cu)
  u32 ceSeq;             // 280: chunk 0's flag value (cereduce.cu)
  u32 ceDepth;           // 284: staging chunk slots per source (cereduce.cu)
};                       // 288 bytes

// The offsets collectives/gpu/params.go writes (its tests read these lines).
#define GOCCL_PARAM_AT(field, off) \
  static_assert(__builtin_offsetof(Params, field) == off, "Params." #field " moved: update collectives/gpu/params.go");
GOCCL_PARAM_AT(send, 0)
GOCCL_PARAM_AT(recv, 8)
GOCCL_PARAM_AT(count, 16)
GOCCL_PARAM_AT(abortFlag, 24)
GOCCL_PARAM_AT(signals, 32)
GOCCL_PARAM_AT(peerSignals, 40)
GOCCL_PARAM_AT(peerStaging, 104)
GOCCL_PARAM_AT(blockSlots, 168)
GOCCL_PARAM_AT(shareBytes, 172)
GOCCL_PARAM_AT(seq, 176)
GOCCL_PARAM_AT(reserved, 184)
GOCCL_PARAM_AT(slotBytes, 232)
GOCCL_PARAM_AT(rank, 240)
GOCCL_PARAM_AT(nranks, 244)
GOCCL_PARAM_AT(root, 248)
GOCCL_PARAM_AT(flags, 252)
GOCCL_PARAM_AT(elemSize, 256)
GOCCL_PARAM_AT(ceChunks, 260)
GOCCL_PARAM_AT(llOffset, 264)
GOCCL_PARAM_AT(ceChunk, 272)
GOCCL_PARAM_AT(ceSeq, 280)
GOCCL_PARAM_AT(ceDepth, 284)
#undef GOCCL_PARAM_AT
static_assert(sizeof(Params) == 288, "Params changed size: update collectives/gpu/params.go");

constexpr u32 kFlagCEDirect = 2;  // cereduce.cu: the peer's chunks land in recv itself
// PreMulSum: Params.reserved[1] is the address of the scalar (device
// memory, read when the kernel runs) instead of the scalar's raw bits.
constexpr u32 kFlagScalarDevice = 1u << 8;
static_assert(__builtin_offsetof(Params, reserved) + 8 == 192, "PreMulSum's scalar moved: update collectives/gpu/params.go");

// ---- memory access and synchronization primitives ------------------------------

// The PTX primitives live in prims.cuh; kernels/emu replaces them with C++
// so that the same kernel code runs, and is tested, on a CPU.
#ifdef GOCCL_EMU
#include "emu/prims_emu.h"
#else
#include "prims.cuh"
#endif

// ---- element types ---------------------------------------------------------

template <int N> struct RawOf;
template <> struct RawOf<1> { typedef u8 T; };
template <> struct RawOf<2> { typedef u16 T; };
template <> struct RawOf<4> { typedef u32 T; };
template <> struct RawOf<8> { typedef u64 T; };

__device__ __forceinline__ u8 ldraw(const u8* p) { return ld1(p); }
__device__ __forceinline__ u16 ldraw(const u16* p) { return ld2(p); }
__device__ __forceinline__ u32 ldraw(const u32* p) { return ld4(p); }
__device__ __forceinline__ u64 ldraw(const u64* p) { return ld8(p); }
__device__ __forceinline__ void straw(u8* p, u8 v) { st1(p, v); }
__device__ __forceinline__ void straw(u16* p, u16 v) { st2(p, v); }
__device__ __forceinline__ void straw(u32* p, u32 v) { st4(p, v); }
__device__ __forceinline__ void straw(u64* p, u64 v) { st8(p, v); }

template <typename To, typename From>
__device__ __forceinline__ To bitcast(From f) {
  static_assert(sizeof(To) == sizeof(From), "bitcast size");
  union { From f; To t; } u;
  u.f = f;
  return u.t;
}

// Elem<T>: Acc is the accumulation type; Raw the same-size unsigned type.
template <typename T> struct Elem {
  typedef T Acc;
  typedef typename RawOf<sizeof(T)>::T Raw;
  static constexpr bool kInt = true;
  __device__ __forceinline__ static Acc load(Raw r) { return bitcast<T>(r); }
  __device__ __forceinline__ static Raw store(Acc a) { return bitcast<Raw>(a); }
};
template <> struct Elem<float> {
  typedef float Acc;
  typedef u32 Raw;
  static constexpr bool kInt = false;
  __device__ __forceinline__ static Acc load(Raw r) { return bitcast<float>(r); }
  __device__ __forceinline__ static Raw store(Acc a) { return bitcast<Raw>(a); }
};
template <> struct Elem<double> {
  typedef double Acc;
  typedef u64 Raw;
  static constexpr bool kInt = false;
  __device__ __forceinline__ static Acc load(Raw r) { return bitcast<double>(r); }
  __device__ __forceinline__ static Raw store(Acc a) { return bitcast<Raw>(a); }
};
template <> struct Elem<f16> {
  typedef float Acc;
  typedef u16 Raw;
  static constexpr bool kInt = false;
  __device__ __forceinline__ static Acc load(Raw r) { return f16_to_f32(r); }
  __device__ __forceinline__ static Raw store(Acc a) { return f32_to_f16(a); }
};
template <> struct Elem<bf16> {
  typedef float Acc;
  typedef u16 Raw;
  static constexpr bool kInt = false;
  __device__ __forceinline__ static Acc load(Raw r) { return bitcast<float>((u32)r << 16); }
  __device__ __forceinline__ static Raw store(Acc a) { return f32_to_bf16(a); }
};

// The 8-bit floats, in plain integer code (no fp8 instructions on sm_80):
// widening is exact; narrowing rounds to nearest even and saturates to the
// largest finite value, infinities included, NaN staying NaN (the GPU's
// satfinite conversions, which NCCL's fp8 reductions use). Both are written
// without branches (every case computed, the right one selected): the
// reduction loops unroll them 16 to a vector, and branchy code there made
// the kernels several times slower to compile.
__device__ __forceinline__ float f8e4m3_to_f32(u32 b) {
  const u32 s = (b & 0x80) << 24, em = b & 0x7f;
  const u32 sub = bitcast<u32>((float)em * (1.0f / 512));  // em * 2^-9: the subnormals (exact)
  u32 bits = em >= 8 ? (em + (120u << 3)) << 20 : sub;     // rebias 7 -> 127
  bits = em == 0x7f ? 0x7fc00000u : bits;
  return bitcast<float>(s | bits);
}
__device__ __forceinline__ float f8e5m2_to_f32(u32 b) {
  const u32 s = (b & 0x80) << 24, em = b & 0x7f;
  const u32 sub = bitcast<u32>((float)em * (1.0f / 65536));  // em * 2^-16
  u32 bits = em >= 4 ? (em + (112u << 2)) << 21 : sub;       // rebias 15 -> 127
  bits = em == 0x7c ? 0x7f800000u : bits;                     // infinity
  bits = em > 0x7c ? 0x7fc00000u : bits;                      // NaN
  return bitcast<float>(s | bits);
}
// rne_shift is x >> s rounded to nearest, ties to even (1 <= s <= 31).
__device__ __forceinline__ u32 rne_shift(u32 x, u32 s) {
  const u32 q = x >> s, rem = x & ((1u << s) - 1), half = 1u << (s - 1);
  return q + (rem > half || (rem == half && (q & 1)) ? 1u : 0u);
}
// f32_to_f8 narrows to M mantissa bits with exponent bias B; Top is the
// largest finite magnitude's code.
template <u32 M, u32 B, u32 Top>
__device__ __forceinline__ u8 f32_to_f8(float f) {
  const u32 u = bitcast<u32>(f), sign = (u >> 24) & 0x80, a = u & 0x7fffffffu;
  // Normal: rebias in place and round the mantissa; a carry steps the
  // exponent. (Computed for every input; used only where it applies.)
  const u32 rn = rne_shift(a - ((127 - B) << 23), 23 - M);
  // Below the smallest normal: count steps of 2^(1-B-M) in the float's
  // significand (a float subnormal, e == 0, is far below half a step).
  const int e = (int)(a >> 23), sh = 151 - (int)B - (int)M - e;
  const u32 rs = e == 0 || sh > 25 ? 0u : rne_shift((a & 0x7fffffu) | 0x800000u, (u32)(sh < 1 ? 1 : sh));
  u32 r = a < (128 - B) << 23 ? rs : rn;
  r = r > Top ? Top : r;
  r = a > 0x7f800000u ? 0x7fu : r;  // NaN
  return (u8)(sign | r);
}
template <> struct Elem<f8e4m3> {
  typedef float Acc;
  typedef u8 Raw;
  static constexpr bool kInt = false;
  __device__ __forceinline__ static Acc load(Raw r) { return f8e4m3_to_f32(r); }
  __device__ __forceinline__ static Raw store(Acc a) { return f32_to_f8<3, 7, 0x7e>(a); }
};
template <> struct Elem<f8e5m2> {
  typedef float Acc;
  typedef u8 Raw;
  static constexpr bool kInt = false;
  __device__ __forceinline__ static Acc load(Raw r) { return f8e5m2_to_f32(r); }
  __device__ __forceinline__ static Raw store(Acc a) { return f32_to_f8<2, 15, 0x7b>(a); }
};

// ---- reduction operators -----------------------------------------------------

// Integer sums and products wrap (computed in the unsigned type, as NCCL's
// results do), floats follow IEEE.
template <typename A> struct Unsigned { typedef A T; };
template <> struct Unsigned<i8> { typedef u8 T; };
template <> struct Unsigned<i32> { typedef u32 T; };
template <> struct Unsigned<i64> { typedef u64 T; };

struct OpSum {
  template <typename A> __device__ __forceinline__ static A apply(A a, A b) {
    typedef typename Unsigned<A>::T U;
    return (A)(U)((U)a + (U)b);
  }
  template <typename A> __device__ __forceinline__ static A finish(A a, int) { return a; }
};
struct OpProd {
  template <typename A> __device__ __forceinline__ static A apply(A a, A b) {
    typedef typename Unsigned<A>::T U;
    return (A)(U)((U)a * (U)b);
  }
  template <typename A> __device__ __forceinline__ static A finish(A a, int) { return a; }
};
struct OpMin {
  template <typename A> __device__ __forceinline__ static A apply(A a, A b) { return b < a ? b : a; }
  template <typename A> __device__ __forceinline__ static A finish(A a, int) { return a; }
};
struct OpMax {
  template <typename A> __device__ __forceinline__ static A apply(A a, A b) { return a < b ? b : a; }
  template <typename A> __device__ __forceinline__ static A finish(A a, int) { return a; }
};
// Avg: wrapping sum, then one division by nranks (integers truncate).
struct OpAvg {
  template <typename A> __device__ __forceinline__ static A apply(A a, A b) { return OpSum::apply(a, b); }
  template <typename A> __device__ __forceinline__ static A finish(A a, int n) { return (A)(a / (A)n); }
};

// PreMulSum (NCCL's): each rank multiplies its own input by its own scalar
// (in the accumulation type, float32 for the narrow floats, the wrapping
// product for integers), rounds the products to the element type and
// pushes those; the products are then summed like any Sum. A rank's own
// products go to its own staging slot (unused otherwise), which is the
// reduction's input for that rank, so the reduction loops stay as they are.
struct OpPreMulSum {
  template <typename A> __device__ __forceinline__ static A apply(A a, A b) { return OpSum::apply(a, b); }
  template <typename A> __device__ __forceinline__ static A finish(A a, int) { return a; }
};
template <typename Op> struct IsPreMul { static constexpr bool value = false; };
template <> struct IsPreMul<OpPreMulSum> { static constexpr bool value = true; };

// premul_scalar is this rank's PreMulSum scalar, widened: Params.reserved[1]
// holds its raw bits, or its address under kFlagScalarDevice.
template <typename T>
__device__ __forceinline__ typename Elem<T>::Acc premul_scalar(const Params& p) {
  typedef typename Elem<T>::Raw R;
  const R r = (p.flags & kFlagScalarDevice) ? ldraw((const R*)p.reserved[1]) : (R)p.reserved[1];
  return Elem<T>::load(r);
}
template <typename T>
__device__ __forceinline__ typename Elem<T>::Raw premul_one(typename Elem<T>::Raw x, typename Elem<T>::Acc s) {
  return Elem<T>::store(OpProd::apply(Elem<T>::load(x), s));
}

// ---- block-cooperative copy and reduce ---------------------------------------

// copy_multi copies n bytes from src to each of dst[0..ndst), with 16-byte
// accesses where every pointer allows and narrower ones otherwise.
__device__ __forceinline__ void copy_multi(char* const* dst, int ndst, const char* src, u64 n) {
  const u64 tid = threadIdx.x, nt = blockDim.x;
  u64 bits = (u64)src;
  for (int d = 0; d < ndst; d++) bits |= (u64)dst[d];
  u64 done = 0;
  if ((bits & 15) == 0) {
    const u64 nv = n >> 4;
    u64 i = tid;
    for (; i + 3 * nt < nv; i += 4 * nt) {
      V16 a = ld16(src + 16 * i), b = ld16(src + 16 * (i + nt));
      V16 c = ld16(src + 16 * (i + 2 * nt)), e = ld16(src + 16 * (i + 3 * nt));
      for (int d = 0; d < ndst; d++) {
        st16(dst[d] + 16 * i, a);
        st16(dst[d] + 16 * (i + nt), b);
        st16(dst[d] + 16 * (i + 2 * nt), c);
        st16(dst[d] + 16 * (i + 3 * nt), e);
      }
    }
    for (; i < nv; i += nt) {
      V16 a = ld16(src + 16 * i);
      for (int d = 0; d < ndst; d++) st16(dst[d] + 16 * i, a);
    }
    done = nv << 4;
  } else if ((bits & 7) == 0) {
    const u64 nw = n >> 3;
    for (u64 i = tid; i < nw; i += nt) {
      u64 a = ld8(src + 8 * i);
      for (int d = 0; d < ndst; d++) st8(dst[d] + 8 * i, a);
    }
    done = nw << 3;
  } else if ((bits & 3) == 0) {
    const u64 nw = n >> 2;
    for (u64 i = tid; i < nw; i += nt) {
      u32 a = ld4(src + 4 * i);
      for (int d = 0; d < ndst; d++) st4(dst[d] + 4 * i, a);
    }
    done = nw << 2;
  } else if ((bits & 1) == 0) {
    const u64 nw = n >> 1;
    for (u64 i = tid; i < nw; i += nt) {
      u16 a = ld2(src + 2 * i);
      for (int d = 0; d < ndst; d++) st2(dst[d] + 2 * i, a);
    }
    done = nw << 1;
  }
  for (u64 i = done + tid; i < n; i += nt) {
    u8 a = ld1(src + i);
    for (int d = 0; d < ndst; d++) st1(dst[d] + i, a);
  }
}

__device__ __forceinline__ void copy1(char* dst, const char* src, u64 n) {
  char* d[1] = {dst};
  copy_multi(d, 1, src, n);
}

// scale_multi writes src[i] * s (premul_one) to each of dst[0..ndst) for
// n elements, with 16-byte accesses where every pointer allows.
template <typename T>
__device__ __forceinline__ void scale_multi(char* const* dst, int ndst, const char* src, u64 n,
                                            typename Elem<T>::Acc s) {
  typedef typename Elem<T>::Raw R;
  constexpr int V = 16 / sizeof(T);
  const u64 tid = threadIdx.x, nt = blockDim.x;
  u64 bits = (u64)src;
  for (int d = 0; d < ndst; d++) bits |= (u64)dst[d];
  u64 done = 0;
  if ((bits & 15) == 0) {
    const u64 nv = n / V;
    for (u64 i = tid; i < nv; i += nt) {
      union U { V16 v; R r[V]; };
      U x;
      x.v = ld16(src + 16 * i);
#pragma unroll
      for (int j = 0; j < V; j++) x.r[j] = premul_one<T>(x.r[j], s);
      for (int d = 0; d < ndst; d++) st16(dst[d] + 16 * i, x.v);
    }
    done = nv * V;
  }
  for (u64 i = done + tid; i < n; i += nt) {
    const R r = premul_one<T>(ldraw((const R*)src + i), s);
    for (int d = 0; d < ndst; d++) straw((R*)dst[d] + i, r);
  }
}

// push_multi is the push of a rank's own elements to staging: a copy, or
// for PreMulSum the scaled copy.
template <typename T, typename Op>
__device__ __forceinline__ void push_multi(char* const* dst, int ndst, const char* src, u64 n,
                                           typename Elem<T>::Acc s) {
  if (IsPreMul<Op>::value)
    scale_multi<T>(dst, ndst, src, n, s);
  else
    copy_multi(dst, ndst, src, n * sizeof(T));
}

// reduce_vec combines the 16-byte vectors v[0..nin) element by element, in
// rank order, and finishes the result.
template <typename T, typename Op>
__device__ __forceinline__ V16 reduce_vec(const V16* v, int nin, int nranks) {
  typedef Elem<T> E;
  typedef typename E::Acc A;
  typedef typename E::Raw R;
  constexpr int V = 16 / sizeof(T);
  union U { V16 v; R r[V]; };
  U x;
  x.v = v[0];
  A acc[V];
#pragma unroll
  for (int j = 0; j < V; j++) acc[j] = E::load(x.r[j]);
#pragma unroll
  for (int k = 1; k < kMaxRanks; k++) {
    if (k < nin) {
      x.v = v[k];
#pragma unroll
      for (int j = 0; j < V; j++) acc[j] = Op::apply(acc[j], E::load(x.r[j]));
    }
  }
#pragma unroll
  for (int j = 0; j < V; j++) x.r[j] = E::store(Op::finish(acc[j], nranks));
  return x.v;
}

// Pair<T, Op>::apply(a, b, nranks) is reduce_vec of {a, b}. Sums of 16-bit
// floats are added packed, two lanes an instruction, instead of widened to
// float32, added and rounded back: the bits are the same, as float32 holds
// more than twice their precision plus two bits (so rounding twice never
// differs from rounding once), and a 16-byte vector takes 4 instructions
// instead of about 30.
template <typename T, typename Op> struct Pair {
  __device__ __forceinline__ static V16 apply(V16 a, V16 b, int nranks) {
    const V16 v[2] = {a, b};
    return reduce_vec<T, Op>(v, 2, nranks);
  }
};
template <u32 (*Add)(u32, u32)> struct PackedSum {
  __device__ __forceinline__ static V16 apply(V16 a, V16 b, int) {
    return V16{Add(a.x, b.x), Add(a.y, b.y), Add(a.z, b.z), Add(a.w, b.w)};
  }
};
template <> struct Pair<bf16, OpSum> : PackedSum<add_bf16x2> {};
template <> struct Pair<f16, OpSum> : PackedSum<add_f16x2> {};

// reduce_multi: out[k][i] = finish(in[0][i] op in[1][i] op ... op in[nin-1][i])
// for each k < nout. Inputs are given in rank order so that every rank
// computes bitwise identical results. An output may be one of the inputs
// (each element is read before it is written). With two inputs, each
// thread issues the loads of four vectors before it combines any, so that
// enough loads are in flight to keep HBM, or NVLink for a peer's input, busy.
template <typename T, typename Op>
__device__ __forceinline__ void reduce_multi(char* const* out, int nout, const char* const* in, int nin,
                                             u64 n, int nranks) {
  typedef Elem<T> E;
  typedef typename E::Acc A;
  typedef typename E::Raw R;
  constexpr int V = 16 / sizeof(T);
  const u64 tid = threadIdx.x, nt = blockDim.x;
  u64 bits = 0;
  for (int k = 0; k < nin; k++) bits |= (u64)in[k];
  for (int k = 0; k < nout; k++) bits |= (u64)out[k];
  u64 done = 0;
  if ((bits & 15) == 0) {
    const u64 nv = n / V;
    u64 i = tid;
    if (nin == 2) {
      for (; i + 3 * nt < nv; i += 4 * nt) {
        V16 v[4][2];
#pragma unroll
        for (int u = 0; u < 4; u++) {
          v[u][0] = ld16(in[0] + 16 * (i + u * nt));
          v[u][1] = ld16(in[1] + 16 * (i + u * nt));
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const V16 r = Pair<T, Op>::apply(v[u][0], v[u][1], nranks);
          for (int k = 0; k < nout; k++) st16(out[k] + 16 * (i + u * nt), r);
        }
      }
    }
    for (; i < nv; i += nt) {
      V16 v[kMaxRanks];
#pragma unroll
      for (int k = 0; k < kMaxRanks; k++)
        if (k < nin) v[k] = ld16(in[k] + 16 * i);
      const V16 r = reduce_vec<T, Op>(v, nin, nranks);
      for (int k = 0; k < nout; k++) st16(out[k] + 16 * i, r);
    }
    done = nv * V;
  }
  for (u64 i = done + tid; i < n; i += nt) {
    A acc = E::load(ldraw((const R*)in[0] + i));
    for (int k = 1; k < nin; k++) acc = Op::apply(acc, E::load(ldraw((const R*)in[k] + i)));
    R r = E::store(Op::finish(acc, nranks));
    for (int k = 0; k < nout; k++) straw((R*)out[k] + i, r);
  }
}

// ---- synchronization -----------------------------------------------------------

// wait_flag spins until *flag reaches v (a cyclic >=, as flag values grow
// for the communicator's life and may wrap), with acquire semantics at
// system scope. Every 1024 polls it reads the abort flag; it returns false
// when the communicator was aborted meanwhile.
__device__ __forceinline__ bool wait_flag(const u32* flag, u32 v, const u32* abortp) {
  for (u32 spins = 0; (i32)(ld_acquire_sys(flag) - v) < 0;)
    if ((++spins & 1023) == 0 && ld_volatile_sys(abortp) != 0) return false;
  return true;
}

// report_error records this rank's first error (see kErrOffset) and aborts
// its kernels. One thread.
__device__ __forceinline__ void report_error(const Params& p, u32 code, int peer, u64 mine, u64 theirs) {
  if (atom_add_acq_rel_gpu((u32*)(p.signals + kErrClaimOffset), 1) == 0) {
    char* e = (char*)p.abortFlag + kErrOffset;
    st8(e + 8, mine);
    st8(e + 16, theirs);
    st_release_sys((u32*)e, 1u | code << 1 | (u32)peer << 8);
  }
  st_release_sys((u32*)p.abortFlag, 1);
}

// check_call compares the low 32 bits a peer published of its call number
// with this launch's (Params.seq, 0: unchecked); a difference is reported
// with the peer's full number taken as the nearest to ours. One thread.
__device__ __forceinline__ bool check_call(const Params& p, int peer, u32 theirs) {
  if (p.seq == 0 || theirs == (u32)p.seq) return true;
  report_error(p, kErrCall, peer, p.seq, p.seq - (u64)(i64)(i32)((u32)p.seq - theirs));
  return false;
}

// Ctx is a block's view of the communicator during one launch. The epoch is
// per block, lives in device memory and is advanced by the kernel itself, so
// launches need no host bookkeeping and replay correctly from CUDA graphs.
struct Ctx {
  const Params& p;
  u32 epoch;
  __device__ Ctx(const Params& prm) : p(prm) {
    epoch = *(volatile const u32*)(p.signals + kEpochOffset + 4 * blockIdx.x);
  }
  // Staging half written before the next barrier: alternating halves means a
  // writer reuses a half only after every reader has arrived at the barrier
  // that follows its reads.
  __device__ __forceinline__ int next_half() const { return (epoch + 1) & 1; }
  // stage returns rank r's staging slot for (half, source rank src) of this block.
  __device__ __forceinline__ char* stage(int r, int half, int src) const {
    const u64 halfBytes = (u64)p.nranks * p.blockSlots * p.slotBytes;
    return (char*)p.peerStaging[r] + (u64)half * halfBytes + ((u64)src * p.blockSlots + blockIdx.x) * p.slotBytes;
  }
  // barrier: every rank's same block has arrived. Returns false when the
  // communicator was aborted while waiting. The release store alone
  // publishes the whole block's writes: it is cumulative over what bar.sync
  // ordered before it (the C++ mapping of release stores onto PTX is proven
  // sound), and a fence.sc.sys before it cost 1.4 us per barrier on H200
  // (docs/perf/2xH200-2026-11-30/probes/probe-fence.txt).
  __device__ bool barrier() {
    __shared__ int s_abort;
    if (threadIdx.x == 0) s_abort = 0;
    bar_sync();
    epoch++;
    const int t = threadIdx.x;
    if (t < p.nranks && t != p.rank) {
      // Block 0 publishes the call number beside its flag (ordered by the
      // release) and compares the peer's after the wait: ranks that meet
      // in calls of different numbers fail instead of pairing wrongly. A
      // slot of parity e is rewritten only at e + 2, after our e + 1.
      const u64 seqAt = kSeqOffset + 4 * ((epoch & 1) * kMaxRanks);
      if (blockIdx.x == 0) st4((char*)p.peerSignals[t] + seqAt + 4 * p.rank, (u32)p.seq);
      st_release_sys((u32*)p.peerSignals[t] + blockIdx.x * kMaxRanks + p.rank, epoch);
      const u32* mine = (const u32*)p.signals + blockIdx.x * kMaxRanks + t;
      if (!wait_flag(mine, epoch, (const u32*)p.abortFlag))
        s_abort = 1;
      else if (blockIdx.x == 0 && !check_call(p, t, ld4((const char*)p.signals + seqAt + 4 * t)))
        s_abort = 1;
    }
    bar_sync();
    return s_abort == 0;
  }
  // finish stores the epoch for the next launch on this stream.
  __device__ void finish() {
    if (threadIdx.x == 0) *(volatile u32*)(p.signals + kEpochOffset + 4 * blockIdx.x) = epoch;
  }
};

// ---- GPU timestamps (the flight recorder) -------------------------------

// Stamp is one call's slot in the host-mapped table collectives/gpu
// (stamps.go) reads: %globaltimer when the kernel started and when its last
// block finished, then the call's number, written last, which says the two
// belong to that call. Params.reserved[0] points at it; 0 stores nothing.
struct Stamp {
  u64 start;  //  0
  u64 end;    //  8
  u64 seq;    // 16: 0 while the call runs
  u64 unused; // 24
};
// kStampCountOffset: a u32 in the signal area counting the blocks of the
// running launch that are done; the last one resets it for the next.
constexpr u64 kStampCountOffset = 30 << 10;

// stamp_begin: one thread of block 0, before any work (after grid_dep_sync:
// a launch that got onto the SMs early has not started until then).
__device__ __forceinline__ void stamp_begin(const Params& p) {
  if (p.reserved[0] == 0 || blockIdx.x != 0 || threadIdx.x != 0) return;
  Stamp* s = (Stamp*)p.reserved[0];
  st8(&s->seq, 0);
  st8(&s->start, globaltimer());
}
// stamp_end: the last block to finish stores the end, so that the end is
// the kernel's even where blocks finish at different times (block 0 after
// a final barrier would miss the work its peers' blocks do after theirs).
// Costs every block one barrier and one L2 atomic, and only when stamping.
__device__ __forceinline__ void stamp_end(const Params& p) {
  if (p.reserved[0] == 0) return;
  bar_sync();  // every thread of the block is done
  if (threadIdx.x != 0) return;
  u32* n = (u32*)(p.signals + kStampCountOffset);
  if (atom_add_acq_rel_gpu(n, 1) != gridDim.x - 1) return;
  *(volatile u32*)n = 0;
  Stamp* s = (Stamp*)p.reserved[0];
  st8(&s->end, globaltimer());
  st8(&s->seq, p.seq);
}

__device__ __forceinline__ u64 min64(u64 a, u64 b) { return a < b ? a : b; }
__device__ __forceinline__ u64 ceil_div(u64 a, u64 b) { return (a + b - 1) / b; }
__device__ __forceinline__ u64 round_up(u64 a, u64 b) { return ceil_div(a, b) * b; }

// chunk_elems is the per-block, per-round element count of total elements
// of elem bytes: the slot capacity, or less so that small messages spread
// over every block of the grid, cut to a multiple of p.shareBytes (at least
// 16, which the 16-byte loops need) so that each block's share starts on
// the same boundary as the message. shareBytes is a power of 2, so the cut
// is a mask: a 64-bit division would cost every launch a long routine.
__device__ __forceinline__ u64 chunk_elems(const Params& p, u64 total, u64 elem) {
  const u64 cap = p.slotBytes / elem;
  const u64 share = (p.shareBytes > 16 ? p.shareBytes : 16) / elem;
  const u64 c = (ceil_div(total, gridDim.x) + share - 1) & ~(share - 1);
  return c < cap ? c : cap;
}

}  // namespace goccl

// Instantiation lists: (name, C type) and (name, op functor).
#define GOCCL_TYPES(X, ...)                                                     \
  X(__VA_ARGS__, i8, goccl::i8) X(__VA_ARGS__, u8, goccl::u8)                   \
  X(__VA_ARGS__, i32, goccl::i32) X(__VA_ARGS__, u32, goccl::u32)               \
  X(__VA_ARGS__, i64, goccl::i64) X(__VA_ARGS__, u64, goccl::u64)               \
  X(__VA_ARGS__, f16, goccl::f16) X(__VA_ARGS__, bf16, goccl::bf16)             \
  X(__VA_ARGS__, f32, float) X(__VA_ARGS__, f64, double)                       \
  X(__VA_ARGS__, f8e4m3, goccl::f8e4m3) X(__VA_ARGS__, f8e5m2, goccl::f8e5m2)

// GOCCL_KERNEL defines the exported kernel goccl_<fn>_<tname>_<opname>,
// which runs goccl::fn<T, Op>. Its first act is grid_dep_sync (prims.cuh):
// the backend launches kernels that may start while the previous one on
// the stream is still running. stamp_begin and stamp_end time it for the
// flight recorder.
#define GOCCL_KERNEL(fn, opname, Op, tname, T)                                      \
  extern "C" __global__ void __launch_bounds__(goccl::kThreads)                     \
      goccl_##fn##_##tname##_##opname(goccl::Params p) {                            \
    goccl::grid_dep_sync();                                                         \
    goccl::stamp_begin(p);                                                          \
    goccl::fn<T, goccl::Op>(p);                                                     \
    goccl::stamp_end(p);                                                            \
  }
// GOCCL_KERNELS defines goccl_<fn>_<type>_<op> for every type and op.
#define GOCCL_KERNELS(fn)                        \
  GOCCL_TYPES(GOCCL_KERNEL, fn, sum, OpSum)      \
  GOCCL_TYPES(GOCCL_KERNEL, fn, prod, OpProd)    \
  GOCCL_TYPES(GOCCL_KERNEL, fn, min, OpMin)      \
  GOCCL_TYPES(GOCCL_KERNEL, fn, max, OpMax)      \
  GOCCL_TYPES(GOCCL_KERNEL, fn, avg, OpAvg)      \
  GOCCL_TYPES(GOCCL_KERNEL, fn, premulsum, OpPreMulSum)
// GOCCL_KERNELS_BUILTIN leaves PreMulSum out, for a family whose inputs
// move by copy engine and so cannot be scaled on the way.
#define GOCCL_KERNELS_BUILTIN(fn)                \
  GOCCL_TYPES(GOCCL_KERNEL, fn, sum, OpSum)      \
  GOCCL_TYPES(GOCCL_KERNEL, fn, prod, OpProd)    \
  GOCCL_TYPES(GOCCL_KERNEL, fn, min, OpMin)      \
  GOCCL_TYPES(GOCCL_KERNEL, fn, max, OpMax)      \
  GOCCL_TYPES(GOCCL_KERNEL, fn, avg, OpAvg)
