// prims.cuh: the PTX primitives every goccl kernel is built on: global
// loads and stores of 1 to 16 bytes, the block barrier, system-scope fences,
// release/acquire flags and the 16-bit float conversions. Included by
// common.cuh inside namespace goccl; kernels/emu/prims_emu.h is its CPU twin.
#pragma once

struct alignas(16) V16 { u32 x, y, z, w; };

// Loads of data written by peers go through L2 (.cg): a block reads the same
// staging slot every other round, and L1 would return stale data.
__device__ __forceinline__ V16 ld16(const void* p) {
  V16 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st16(void* p, V16 v) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ u64 ld8(const void* p) {
  u64 v;
  asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st8(void* p, u64 v) {
  asm volatile("st.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ u32 ld4(const void* p) {
  u32 v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st4(void* p, u32 v) {
  asm volatile("st.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ u16 ld2(const void* p) {
  u16 v;
  asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st2(void* p, u16 v) {
  asm volatile("st.global.u16 [%0], %1;" :: "l"(p), "h"(v) : "memory");
}
__device__ __forceinline__ u8 ld1(const void* p) {
  u32 v;
  asm volatile("ld.global.cg.u8 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return (u8)v;
}
__device__ __forceinline__ void st1(void* p, u8 v) {
  asm volatile("st.global.u8 [%0], %1;" :: "l"(p), "r"((u32)v) : "memory");
}

__device__ __forceinline__ void bar_sync() { asm volatile("bar.sync 0;" ::: "memory"); }

// The launch's dynamic shared memory (cuLaunchKernel's sharedMemBytes):
// its base and its size, 0 when the launch gave none.
extern __shared__ V16 goccl_dyn_smem[];  // V16 is 16-byte aligned
__device__ __forceinline__ V16* dyn_smem() { return goccl_dyn_smem; }
__device__ __forceinline__ u32 dyn_smem_bytes() {
  u32 n;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  return n;
}

// grid_dep_sync: with programmatic dependent launch (sm_90), a kernel may
// get onto the SMs while the previous kernel on its stream still runs;
// griddepcontrol.wait holds it until that kernel is complete and its
// writes are visible, and launch_dependents then lets the next such launch
// do the same. Both are no-ops for an ordinary launch. Every goccl kernel
// calls this first, before it touches memory.
__device__ __forceinline__ void grid_dep_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// globaltimer: the GPU's nanosecond clock, which the driver keeps in step
// with the host's wall clock.
__device__ __forceinline__ u64 globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void fence_sys() { asm volatile("fence.sc.sys;" ::: "memory"); }
__device__ __forceinline__ void st_release_sys(u32* p, u32 v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ u32 ld_acquire_sys(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ u32 ld_volatile_sys(const u32* p) {
  u32 v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// atom_add_acq_rel_gpu returns the old value: blocks of one launch count
// their arrivals with it (release of the block's writes, acquire of theirs).
__device__ __forceinline__ u32 atom_add_acq_rel_gpu(u32* p, u32 v) {
  u32 old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

__device__ __forceinline__ float f16_to_f32(u16 r) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(r));
  return f;
}
__device__ __forceinline__ u16 f32_to_f16(float a) {
  u16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(a));
  return r;
}
__device__ __forceinline__ u16 f32_to_bf16(float a) {
  u16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(a));
  return r;
}

// Two packed 16-bit floats added lane by lane with one rounding each. The
// bfloat16 sum is an fma by 1.0, as sm_80 has no add.bf16x2.
__device__ __forceinline__ u32 add_bf16x2(u32 a, u32 b) {
  u32 r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(0x3f803f80u), "r"(b));
  return r;
}
__device__ __forceinline__ u32 add_f16x2(u32 a, u32 b) {
  u32 r;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// Low-latency lines (ll.cu): 16 bytes holding two (data, flag) pairs of
// u32, stored and loaded whole so that a reader that sees both flags sees
// the data stored with them.
__device__ __forceinline__ void st_volatile16(void* p, V16 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ V16 ld_volatile16(const void* p) {
  V16 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}
