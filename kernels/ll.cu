// ll.cu: the low-latency (flag-free) AllReduce for small messages, exported
// as goccl_allreduce_ll_<type>_<op>. Every 8 bytes of input travel in a
// 16-byte line {data lo, flag, data hi, flag} stored whole into each peer's
// line buffer; a reader spins on the line itself until both flags carry this
// launch's epoch. There is no barrier, no fence and no separate flag: one
// NVLink store and one poll per line, at the price of twice the bytes.
//
// Safety of reuse: block b's k-th LL launch writes half k&1 with flag k. A
// writer's k-th launch follows its own (k-1)-th, which read the reader's
// (k-1)-th lines, written after the reader had finished its (k-2)-th launch
// (stream order): so half k&1 is never overwritten while still being read,
// and stale lines carry flags k-2, k-4, ... which never match. Only LL
// kernels write these lines.
//
// fused.cu runs allreduce_ll once per descriptor of a group in one launch,
// so this file is guarded: build.sh's single translation unit includes it
// from both.
#ifndef GOCCL_LL_CU
#define GOCCL_LL_CU
#include "common.cuh"

namespace goccl {

constexpr int kLLMaxBlocks = 128;
constexpr u64 kLLSlot = 8 << 10;  // line bytes per (half, source, block): 4 KiB of data
constexpr u64 kLLEpochOffset = 96 << 10;  // [kLLMaxBlocks] u32 in the signal area
// Call numbers: block 0 writes the low 32 bits of Params.seq into every
// peer's kLLSeqOffset[e & 1][rank], then releases kLLSeqOffset + 64
// [e & 1][rank] = e; after its lines it waits for each peer's and
// compares. The parity e slot is rewritten at the peer's launch e + 2,
// after it read our lines of e + 1, which we write after the compare.
constexpr u64 kLLSeqOffset = 97 << 10;  // [2][kMaxRanks] u32 numbers, then [2][kMaxRanks] u32 flags
static_assert(kLLEpochOffset + 4 * kLLMaxBlocks <= kLLSeqOffset, "LL call numbers overlap the LL epochs");
static_assert(kLLSeqOffset + 128 <= (128 << 10), "LL call numbers outside the signal area");

// load_tail reads n <= 8 bytes at p into the low bytes of a u64 (aligned
// whole words when it can, bytes otherwise).
__device__ __forceinline__ u64 load_tail(const char* p, u64 n) {
  if (n == 8 && ((u64)p & 7) == 0) return ld8(p);
  u64 v = 0;
  for (u64 i = 0; i < n; i++) v |= (u64)ld1(p + i) << (8 * i);
  return v;
}
__device__ __forceinline__ void store_tail(char* p, u64 v, u64 n) {
  if (n == 8 && ((u64)p & 7) == 0) {
    st8(p, v);
    return;
  }
  for (u64 i = 0; i < n; i++) st1(p + i, (u8)(v >> (8 * i)));
}

// LLBlock is one block's share of an LL launch (the AllReduce's, the
// AllToAll's): its epoch e, the half of the line buffers e picks, and where
// that half's call numbers lie.
struct LLBlock {
  const Params& p;
  u32* epochp;
  u32 e;
  u64 half, seqAt;
  __device__ explicit LLBlock(const Params& q)
      : p(q),
        epochp((u32*)(q.signals + kLLEpochOffset) + blockIdx.x),
        e(*(volatile const u32*)epochp + 1),
        half(e & 1),
        seqAt(kLLSeqOffset + 4 * (half * kMaxRanks)) {}
  // slot: the lines from rank src in rank owner's buffer, for this block.
  __device__ char* slot(int owner, int src) const {
    return (char*)(p.peerStaging[owner] + p.llOffset) +
           (((half * p.nranks + src) * kLLMaxBlocks + blockIdx.x) * kLLSlot);
  }
  // publish: block 0 gives every peer this launch's call number, then e.
  __device__ void publish() const {
    const int t = threadIdx.x;
    if (blockIdx.x == 0 && t < p.nranks && t != p.rank) {
      st4((char*)p.peerSignals[t] + seqAt + 4 * p.rank, (u32)p.seq);
      st_release_sys((u32*)((char*)p.peerSignals[t] + seqAt + 64) + p.rank, e);
    }
  }
  // finish: block 0 checks the peers' call numbers (see kLLSeqOffset);
  // once every thread has read the epoch, it moves on to e unless a thread
  // stopped (dead: it saw the abort flag). Returns whether none did.
  __device__ bool finish(bool dead) const {
    const int t = threadIdx.x;
    const u32* abortp = (const u32*)p.abortFlag;
    if (blockIdx.x == 0 && t < p.nranks && t != p.rank && !dead) {
      if (!wait_flag((const u32*)(p.signals + seqAt + 64) + t, e, abortp) ||
          !check_call(p, t, ld4((const char*)p.signals + seqAt + 4 * t)))
        dead = true;
    }
    __shared__ int s_dead;
    if (threadIdx.x == 0) s_dead = 0;
    bar_sync();
    if (dead) s_dead = 1;
    bar_sync();
    if (threadIdx.x == 0 && !s_dead) *(volatile u32*)epochp = e;
    return s_dead == 0;
  }
};

// allreduce_ll returns false when it stopped for an abort (the epoch is
// kept). nblocks (0: the grid) is how many blocks share the message: the
// fused kernel runs each call on the blocks its own launch would have had.
template <typename T, typename Op>
__device__ bool allreduce_ll(const Params& p, u32 nblocks = 0) {
  typedef Elem<T> E;
  typedef typename E::Acc A;
  typedef typename E::Raw R;
  constexpr int V = 8 / sizeof(T);
  const int me = p.rank, nr = p.nranks;
  // PreMulSum: every rank pushes its products and reads its own the same way.
  constexpr bool pre = IsPreMul<Op>::value;
  const A scale = pre ? premul_scalar<T>(p) : A();
  union W { u64 u; R r[V]; };
  auto premul8 = [&](u64 v) -> u64 {
    if (!pre) return v;
    W w;
    w.u = v;
#pragma unroll
    for (int j = 0; j < V; j++) w.r[j] = premul_one<T>(w.r[j], scale);
    return w.u;
  };
  const u64 bytes = p.count * sizeof(T);
  const u64 per = round_up(ceil_div(bytes, nblocks ? nblocks : gridDim.x), 8);
  const u64 lo = per * blockIdx.x;
  const u64 n = lo < bytes ? min64(per, bytes - lo) : 0;
  const u64 lines = ceil_div(n, 8);
  const LLBlock B(p);
  const u32 e = B.e;
  auto slot = [&](int owner, int src) { return B.slot(owner, src); };
  const char* send = (const char*)p.send + lo;
  char* recv = (char*)p.recv + lo;
  B.publish();
  // Each thread writes, then reads, its own lines: no block barrier.
  for (u64 i = threadIdx.x; i < lines; i += blockDim.x) {
    const u64 v = premul8(load_tail(send + 8 * i, min64(8, n - 8 * i)));
    V16 line = {(u32)v, e, (u32)(v >> 32), e};
    for (int r = 0; r < nr; r++)
      if (r != me) st_volatile16(slot(r, me) + 16 * i, line);
  }
  // After an abort the lines may never come: stop waiting, finish the
  // loop on whatever is there (the communicator is dead) and keep the
  // epoch, so that every thread still reaches the barrier below.
  const u32* abortp = (const u32*)p.abortFlag;
  bool dead = false;
  for (u64 i = threadIdx.x; i < lines; i += blockDim.x) {
    const u64 len = min64(8, n - 8 * i);
    union U { u64 u; R r[V]; };
    // fetch: rank r's 8 bytes of line i, its own from send.
    auto fetch = [&](int r) -> U {
      U x;
      if (r == me) {
        x.u = premul8(load_tail(send + 8 * i, len));
        return x;
      }
      const char* l = slot(me, r) + 16 * i;
      V16 line = ld_volatile16(l);
      u32 spins = 0;
      while (!dead && (line.y != e || line.w != e)) {
        if ((++spins & 1023) == 0 && ld_volatile_sys(abortp) != 0) dead = true;
        line = ld_volatile16(l);
      }
      x.u = (u64)line.x | ((u64)line.z << 32);
      return x;
    };
    U x = fetch(0);
    A acc[V];
#pragma unroll
    for (int j = 0; j < V; j++) acc[j] = E::load(x.r[j]);
    for (int r = 1; r < nr; r++) {
      x = fetch(r);
#pragma unroll
      for (int j = 0; j < V; j++) acc[j] = Op::apply(acc[j], E::load(x.r[j]));
    }
    U out;
#pragma unroll
    for (int j = 0; j < V; j++) out.r[j] = E::store(Op::finish(acc[j], nr));
    store_tail(recv + 8 * i, out.u, len);
  }
  return B.finish(dead);
}

}  // namespace goccl

GOCCL_KERNELS(allreduce_ll)
#endif  // GOCCL_LL_CU
