// allreduce.cu: AllReduce, one-shot and two-shot, pipelined in rounds
// through fixed staging slots. Exported as goccl_allreduce_{oneshot,twoshot}_<type>_<op>.
#include "common.cuh"

namespace goccl {

// The stash. Where the launch gives the one-shot dynamic shared memory for
// a whole round of its block, each thread also keeps the vectors it pushes
// there, and after the barrier it reads only the peers' chunks from
// staging: the round's own input is not read a second time. A thread
// reads back only the vectors it stored itself (index tid + k*blockDim.x in
// both loops, whatever their unrolling), so no block barrier is needed
// between the two.

// push_stash copies nv 16-byte vectors from src to every dst[0..ndst) and
// into stash, four loads in flight per thread.
__device__ __forceinline__ void push_stash(char* const* dst, int ndst, const char* src, u64 nv, V16* stash) {
  const u64 nt = blockDim.x;
  u64 i = threadIdx.x;
  for (; i + 3 * nt < nv; i += 4 * nt) {
    V16 v[4];
#pragma unroll
    for (int u = 0; u < 4; u++) v[u] = ld16(src + 16 * (i + u * nt));
    for (int d = 0; d < ndst; d++)
#pragma unroll
      for (int u = 0; u < 4; u++) st16(dst[d] + 16 * (i + u * nt), v[u]);
#pragma unroll
    for (int u = 0; u < 4; u++) stash[i + u * nt] = v[u];
  }
  for (; i < nv; i += nt) {
    const V16 v = ld16(src + 16 * i);
    for (int d = 0; d < ndst; d++) st16(dst[d] + 16 * i, v);
    stash[i] = v;
  }
}

// reduce_pair_stashed is the two-rank reduction from vector i on, U of the
// peer's loads in flight per thread; it returns where it stopped (fewer
// than U vectors per thread were left). Operands go in rank order.
template <typename T, typename Op, int U>
__device__ __forceinline__ u64 reduce_pair_stashed(char* out, const V16* mine, const char* peer, bool meFirst,
                                                   u64 i, u64 nv, int nranks) {
  const u64 nt = blockDim.x;
  for (; i + (U - 1) * nt < nv; i += U * nt) {
    V16 q[U];
#pragma unroll
    for (int u = 0; u < U; u++) q[u] = ld16(peer + 16 * (i + u * nt));
#pragma unroll
    for (int u = 0; u < U; u++) {
      const V16 a = mine[i + u * nt];
      st16(out + 16 * (i + u * nt), meFirst ? Pair<T, Op>::apply(a, q[u], nranks) : Pair<T, Op>::apply(q[u], a, nranks));
    }
  }
  return i;
}

// reduce_stashed writes out[i] = finish(in[0][i] op ... op in[nin-1][i]) for
// nv vectors, where this rank's input in[me] is read from stash.
template <typename T, typename Op>
__device__ __forceinline__ void reduce_stashed(char* out, const V16* stash, const char* const* in, int me, int nin,
                                               u64 nv, int nranks) {
  const u64 nt = blockDim.x;
  u64 i = threadIdx.x;
  if (nin == 2) {
    i = reduce_pair_stashed<T, Op, 4>(out, stash, in[1 - me], me == 0, i, nv, nranks);
  }
  for (; i < nv; i += nt) {
    V16 v[kMaxRanks];
#pragma unroll
    for (int k = 0; k < kMaxRanks; k++)
      if (k < nin) v[k] = k == me ? stash[i] : ld16(in[k] + 16 * i);
    st16(out + 16 * i, reduce_vec<T, Op>(v, nin, nranks));
  }
}

// One-shot: each round, every rank pushes its chunk into every peer's
// staging, one barrier, then every rank reduces all ranks' chunks (in rank
// order) into recv. At 2 ranks it moves the fewest bytes and has the lowest
// latency. count = elements per rank. A round whose chunk fits the launch's
// dynamic shared memory, with every pointer 16-byte aligned, goes through
// the stash (above).
template <typename T, typename Op>
__device__ void allreduce_oneshot(const Params& p) {
  Ctx c(p);
  // PreMulSum pushes its products, its own into its own slot too (common.cuh).
  constexpr bool pre = IsPreMul<Op>::value;
  const typename Elem<T>::Acc scale = pre ? premul_scalar<T>(p) : typename Elem<T>::Acc();
  const u64 count = p.count;
  const u64 chunk = chunk_elems(p, count, sizeof(T));
  const u64 stride = chunk * gridDim.x;
  const u64 stashBytes = dyn_smem_bytes();
  for (u64 base = chunk * blockIdx.x; base < count; base += stride) {
    const u64 n = min64(chunk, count - base);
    const u64 bytes = n * sizeof(T);
    const int h = c.next_half();
    const char* src = (const char*)p.send + base * sizeof(T);
    char* out = (char*)p.recv + base * sizeof(T);
    char* dst[kMaxRanks];
    int nd = 0;
    u64 bits = bytes | (u64)src | (u64)out;
    for (int r = 0; r < p.nranks; r++)
      if (r != p.rank || pre) {
        dst[nd] = c.stage(r, h, p.rank);
        bits |= (u64)dst[nd++];
      }
    const bool stash = !pre && bytes <= stashBytes && (bits & 15) == 0;
    if (stash)
      push_stash(dst, nd, src, bytes >> 4, dyn_smem());
    else
      push_multi<T, Op>(dst, nd, src, n, scale);
    if (!c.barrier()) return;
    const char* in[kMaxRanks];
    for (int r = 0; r < p.nranks; r++) in[r] = r == p.rank && !pre ? src : c.stage(p.rank, h, r);
    if (stash) {
      reduce_stashed<T, Op>(out, dyn_smem(), in, p.rank, p.nranks, bytes >> 4, p.nranks);
    } else {
      char* outs[1] = {out};
      reduce_multi<T, Op>(outs, 1, in, p.nranks, n, p.nranks);
    }
  }
  c.finish();
}

// Two-shot: the message is cut into nranks segments; each round, every rank
// pushes piece s of its input to rank s, barrier, rank s reduces its piece
// and pushes the result to every peer (and its own recv), barrier, every
// rank copies the others' results into recv. Each rank sends 2(n-1)/n of the
// message instead of (n-1) times it.
template <typename T, typename Op>
__device__ void allreduce_twoshot(const Params& p) {
  Ctx c(p);
  constexpr bool pre = IsPreMul<Op>::value;  // see allreduce_oneshot
  const typename Elem<T>::Acc scale = pre ? premul_scalar<T>(p) : typename Elem<T>::Acc();
  const u64 count = p.count;
  const int me = p.rank, nr = p.nranks;
  const u64 seg = round_up(ceil_div(count, nr), 16 / sizeof(T));
  const u64 chunk = chunk_elems(p, seg, sizeof(T));
  const u64 stride = chunk * gridDim.x;
  for (u64 base = chunk * blockIdx.x; base < seg; base += stride) {
    // Piece of segment s in this round: [s*seg+base, +len(s)).
    u64 len[kMaxRanks];
    for (int s = 0; s < nr; s++) {
      const u64 lo = s * seg + base;
      const u64 hi = min64(min64(lo + chunk, (s + 1) * seg), count);
      len[s] = hi > lo ? hi - lo : 0;
    }
    const int h1 = c.next_half();
    for (int s = 0; s < nr; s++) {
      if ((s == me && !pre) || len[s] == 0) continue;
      char* d[1] = {c.stage(s, h1, me)};
      push_multi<T, Op>(d, 1, (const char*)p.send + (s * seg + base) * sizeof(T), len[s], scale);
    }
    if (!c.barrier()) return;
    const int h2 = c.next_half();
    if (len[me] > 0) {
      const char* in[kMaxRanks];
      for (int r = 0; r < nr; r++)
        in[r] = r == me && !pre ? (const char*)p.send + (me * seg + base) * sizeof(T) : c.stage(me, h1, r);
      char* out[kMaxRanks];
      int no = 0;
      out[no++] = (char*)p.recv + (me * seg + base) * sizeof(T);
      for (int r = 0; r < nr; r++)
        if (r != me) out[no++] = c.stage(r, h2, me);
      reduce_multi<T, Op>(out, no, in, nr, len[me], nr);
    }
    if (!c.barrier()) return;
    for (int s = 0; s < nr; s++) {
      if (s == me || len[s] == 0) continue;
      copy1((char*)p.recv + (s * seg + base) * sizeof(T), c.stage(me, h2, s), len[s] * sizeof(T));
    }
  }
  c.finish();
}

}  // namespace goccl

GOCCL_KERNELS(allreduce_oneshot)
GOCCL_KERNELS(allreduce_twoshot)
