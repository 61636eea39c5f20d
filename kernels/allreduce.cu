// allreduce.cu: AllReduce, one-shot and two-shot, pipelined in rounds
// through fixed staging slots. Exported as goccl_allreduce_{oneshot,twoshot}_<type>_<op>.
#include "common.cuh"

namespace goccl {

// One-shot: each round, every rank pushes its chunk into every peer's
// staging, one barrier, then every rank reduces all ranks' chunks (in rank
// order) into recv. At 2 ranks it moves the fewest bytes and has the lowest
// latency. count = elements per rank.
template <typename T, typename Op>
__device__ void allreduce_oneshot(const Params& p) {
  Ctx c(p);
  const u64 count = p.count;
  const u64 chunk = chunk_elems(count, p.slotBytes, sizeof(T));
  const u64 stride = chunk * gridDim.x;
  for (u64 base = chunk * blockIdx.x; base < count; base += stride) {
    const u64 n = min64(chunk, count - base);
    const int h = c.next_half();
    const char* src = (const char*)p.send + base * sizeof(T);
    char* dst[kMaxRanks];
    int nd = 0;
    for (int r = 0; r < p.nranks; r++)
      if (r != p.rank) dst[nd++] = c.stage(r, h, p.rank);
    copy_multi(dst, nd, src, n * sizeof(T));
    if (!c.barrier()) return;
    const char* in[kMaxRanks];
    for (int r = 0; r < p.nranks; r++) in[r] = r == p.rank ? src : c.stage(p.rank, h, r);
    char* out[1] = {(char*)p.recv + base * sizeof(T)};
    reduce_multi<T, Op>(out, 1, in, p.nranks, n, p.nranks);
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
  const u64 count = p.count;
  const int me = p.rank, nr = p.nranks;
  const u64 seg = round_up(ceil_div(count, nr), 16 / sizeof(T));
  const u64 chunk = chunk_elems(seg, p.slotBytes, sizeof(T));
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
      if (s == me || len[s] == 0) continue;
      char* d[1] = {c.stage(s, h1, me)};
      copy_multi(d, 1, (const char*)p.send + (s * seg + base) * sizeof(T), len[s] * sizeof(T));
    }
    if (!c.barrier()) return;
    const int h2 = c.next_half();
    if (len[me] > 0) {
      const char* in[kMaxRanks];
      for (int r = 0; r < nr; r++)
        in[r] = r == me ? (const char*)p.send + (me * seg + base) * sizeof(T) : c.stage(me, h1, r);
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
