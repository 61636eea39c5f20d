// prims_emu.h: the CPU twin of prims.cuh, used when kernels are compiled
// with -DGOCCL_EMU (see emu_runtime.cc). common.cuh includes it inside
// namespace goccl; the system headers it needs come from cuda_emu.h.
// Data moves with plain memcpy; flags use C++ atomics with the same
// ordering the PTX gives (release stores, acquire loads, seq_cst fence).
// Every access checks the alignment the PTX instruction would require,
// because a misaligned vector access traps on a GPU.
#pragma once

struct alignas(16) V16 { u32 x, y, z, w; };

template <int W>
__forceinline__ void emu_check_align(const void* p) {
  if (((uintptr_t)p & (W - 1)) != 0) ::emu_misaligned(p, W);
}
// emu_load_hook runs before every load of 4 bytes or more: it slows down
// the rank a scenario marks as a slow reader.
__forceinline__ void emu_load_hook() {
  if (::emu_slow_us) ::emu_slow();
}

__forceinline__ V16 ld16(const void* p) {
  emu_check_align<16>(p);
  emu_load_hook();
  V16 v;
  memcpy(&v, p, 16);
  return v;
}
__forceinline__ void st16(void* p, V16 v) {
  emu_check_align<16>(p);
  memcpy(p, &v, 16);
}
__forceinline__ u64 ld8(const void* p) {
  emu_check_align<8>(p);
  emu_load_hook();
  u64 v;
  memcpy(&v, p, 8);
  return v;
}
__forceinline__ void st8(void* p, u64 v) {
  emu_check_align<8>(p);
  memcpy(p, &v, 8);
}
__forceinline__ u32 ld4(const void* p) {
  emu_check_align<4>(p);
  emu_load_hook();
  u32 v;
  memcpy(&v, p, 4);
  return v;
}
__forceinline__ void st4(void* p, u32 v) {
  emu_check_align<4>(p);
  memcpy(p, &v, 4);
}
__forceinline__ u16 ld2(const void* p) {
  emu_check_align<2>(p);
  u16 v;
  memcpy(&v, p, 2);
  return v;
}
__forceinline__ void st2(void* p, u16 v) {
  emu_check_align<2>(p);
  memcpy(p, &v, 2);
}
__forceinline__ u8 ld1(const void* p) { return *(const u8*)p; }
__forceinline__ void st1(void* p, u8 v) { *(u8*)p = v; }

// Low-latency lines (ll.cu): a reader that sees both flags of a line must
// see the data stored with them, so the 16 bytes move in one instruction
// (aligned 16-byte SSE accesses are single-copy atomic on x86-64 CPUs with
// AVX). Repeated polls of one line yield, as the flag loads do.
__forceinline__ void st_volatile16(void* p, V16 v) {
  emu_check_align<16>(p);
#if defined(__x86_64__)
  __m128i x;
  memcpy(&x, &v, 16);
  asm volatile("movdqa %1, %0" : "=m"(*(__m128i*)p) : "x"(x) : "memory");
#else
#error "prims_emu.h: st_volatile16 needs a single-copy-atomic 16-byte store on this architecture"
#endif
}
__forceinline__ V16 ld_volatile16(const void* p) {
  emu_check_align<16>(p);
  emu_load_hook();
  ::emu_poll_pause(p);
  V16 v;
#if defined(__x86_64__)
  __m128i x;
  asm volatile("movdqa %1, %0" : "=x"(x) : "m"(*(const __m128i*)p) : "memory");
  memcpy(&v, &x, 16);
#else
#error "prims_emu.h: ld_volatile16 needs a single-copy-atomic 16-byte load on this architecture"
#endif
  return v;
}

// The launch's dynamic shared memory: one buffer per block process, which
// emu_set_dyn_smem sizes and poisons before the launch.
__forceinline__ V16* dyn_smem() { return (V16*)::emu_dyn_smem; }
__forceinline__ u32 dyn_smem_bytes() { return ::emu_dyn_smem_bytes; }

// bar_sync: every thread of the block (a pthread barrier of blockDim.x).
__forceinline__ void bar_sync() { ::emu_bar_sync(); }
// grid_dep_sync: the emulator runs one launch at a time.
__forceinline__ void grid_dep_sync() {}
// globaltimer: the host's wall clock, as the GPU's follows it.
__forceinline__ u64 globaltimer() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (u64)ts.tv_sec * 1000000000ull + (u64)ts.tv_nsec;
}
__forceinline__ void fence_sys() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
__forceinline__ void st_release_sys(u32* p, u32 v) {
  emu_check_align<4>(p);
  ::emu_jitter();  // perturb the interleaving of ranks a little
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
// The kernels call the two flag loads only inside spin loops; repeated
// polls of one address yield the CPU so that a 2-core machine makes progress.
__forceinline__ u32 ld_acquire_sys(const u32* p) {
  emu_check_align<4>(p);
  emu_load_hook();
  ::emu_poll_pause(p);
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
__forceinline__ u32 ld_volatile_sys(const u32* p) {
  emu_check_align<4>(p);
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
__forceinline__ u32 atom_add_acq_rel_gpu(u32* p, u32 v) {
  emu_check_align<4>(p);
  emu_load_hook();  // (a slow block is late to count itself too)
  ::emu_jitter();
  return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
}

// ---- 16-bit floats (IEEE binary16 and bfloat16), round to nearest even ----

__forceinline__ float emu_f32_from_bits(u32 b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}
__forceinline__ u32 emu_bits_of_f32(float f) {
  u32 b;
  memcpy(&b, &f, 4);
  return b;
}

__forceinline__ float f16_to_f32(u16 h) {
  const u32 sign = (u32)(h & 0x8000) << 16;
  u32 exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return emu_f32_from_bits(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return emu_f32_from_bits(sign);
    int e = 1;  // subnormal: normalize
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      e--;
    }
    mant &= 0x3ff;
    return emu_f32_from_bits(sign | ((u32)(e + 112) << 23) | (mant << 13));
  }
  return emu_f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

__forceinline__ u16 f32_to_f16(float a) {
  const u32 x = emu_bits_of_f32(a);
  const u16 sign = (u16)((x >> 16) & 0x8000);
  const u32 ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return sign | 0x7e00 | (u16)((ax >> 13) & 0x3ff);  // NaN stays NaN
  if (ax >= 0x477ff000) return sign | 0x7c00;  // rounds to infinity
  if (ax < 0x38800000) {                       // below 2^-14: subnormal or zero
    if (ax <= 0x33000000) return sign;         // at most 2^-25: ties to +-0
    const u32 e = ax >> 23, mant = (ax & 0x7fffff) | 0x800000;
    const u32 s = 126 - e;
    u32 q = mant >> s;
    const u32 rem = mant & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return sign | (u16)q;
  }
  u32 q = (ax >> 13) - (112u << 10);
  const u32 rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
  return sign | (u16)q;
}

__forceinline__ u16 f32_to_bf16(float a) {
  const u32 x = emu_bits_of_f32(a);
  if ((x & 0x7fffffff) > 0x7f800000) return (u16)((x >> 16) | 0x40);  // quiet NaN
  return (u16)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

// The packed 16-bit sums: each lane widened, added and rounded back, which
// gives the correctly rounded sum (float32 holds more than twice their
// precision).
__forceinline__ float bf16_to_f32(u16 b) { return emu_f32_from_bits((u32)b << 16); }
template <float (*Widen)(u16), u16 (*Narrow)(float)>
__forceinline__ u32 emu_add16x2(u32 a, u32 b) {
  u32 r = 0;
  for (int s = 0; s < 32; s += 16) r |= (u32)Narrow(Widen((u16)(a >> s)) + Widen((u16)(b >> s))) << s;
  return r;
}
__forceinline__ u32 add_bf16x2(u32 a, u32 b) { return emu_add16x2<bf16_to_f32, f32_to_bf16>(a, b); }
__forceinline__ u32 add_f16x2(u32 a, u32 b) { return emu_add16x2<f16_to_f32, f32_to_f16>(a, b); }
