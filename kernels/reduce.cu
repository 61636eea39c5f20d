// reduce.cu: Reduce (to a root) and ReduceScatter, one round-pipelined
// push algorithm each. Exported as goccl_reduce_oneshot_<type>_<op> and
// goccl_reducescatter_oneshot_<type>_<op>.
#include "common.cuh"

namespace goccl {

// Reduce: every non-root pushes its chunk into the root's staging, barrier,
// the root reduces all chunks in rank order into recv. count = elements.
template <typename T, typename Op>
__device__ void reduce_oneshot(const Params& p) {
  Ctx c(p);
  constexpr bool pre = IsPreMul<Op>::value;  // see allreduce_oneshot
  const typename Elem<T>::Acc scale = pre ? premul_scalar<T>(p) : typename Elem<T>::Acc();
  const u64 count = p.count;
  const int me = p.rank, root = p.root;
  const u64 chunk = chunk_elems(p, count, sizeof(T));
  const u64 stride = chunk * gridDim.x;
  for (u64 base = chunk * blockIdx.x; base < count; base += stride) {
    const u64 n = min64(chunk, count - base);
    const int h = c.next_half();
    const char* src = (const char*)p.send + base * sizeof(T);
    if (me != root || pre) {
      char* d[1] = {c.stage(root, h, me)};
      push_multi<T, Op>(d, 1, src, n, scale);
    }
    if (!c.barrier()) return;
    if (me == root) {
      const char* in[kMaxRanks];
      for (int r = 0; r < p.nranks; r++) in[r] = r == me && !pre ? src : c.stage(me, h, r);
      char* out[1] = {(char*)p.recv + base * sizeof(T)};
      reduce_multi<T, Op>(out, 1, in, p.nranks, n, p.nranks);
    }
  }
  c.finish();
}

// ReduceScatter: count = elements of each rank's output; send holds
// nranks*count. Each round every rank pushes piece s of its input to rank s,
// barrier, every rank reduces its own piece from all ranks in rank order.
template <typename T, typename Op>
__device__ void reducescatter_oneshot(const Params& p) {
  Ctx c(p);
  constexpr bool pre = IsPreMul<Op>::value;  // see allreduce_oneshot
  const typename Elem<T>::Acc scale = pre ? premul_scalar<T>(p) : typename Elem<T>::Acc();
  const u64 count = p.count;
  const int me = p.rank, nr = p.nranks;
  const u64 chunk = chunk_elems(p, count, sizeof(T));
  const u64 stride = chunk * gridDim.x;
  for (u64 base = chunk * blockIdx.x; base < count; base += stride) {
    const u64 n = min64(chunk, count - base);
    const int h = c.next_half();
    for (int s = 0; s < nr; s++) {
      if (s == me && !pre) continue;
      char* d[1] = {c.stage(s, h, me)};
      push_multi<T, Op>(d, 1, (const char*)p.send + (s * count + base) * sizeof(T), n, scale);
    }
    if (!c.barrier()) return;
    const char* in[kMaxRanks];
    for (int r = 0; r < nr; r++)
      in[r] = r == me && !pre ? (const char*)p.send + (me * count + base) * sizeof(T) : c.stage(me, h, r);
    char* out[1] = {(char*)p.recv + base * sizeof(T)};
    reduce_multi<T, Op>(out, 1, in, nr, n, nr);
  }
  c.finish();
}

}  // namespace goccl

GOCCL_KERNELS(reduce_oneshot)
GOCCL_KERNELS(reducescatter_oneshot)
