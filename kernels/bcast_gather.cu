// bcast_gather.cu: Broadcast and AllGather, which move bytes without
// arithmetic, so one kernel each serves every data type
// (goccl_broadcast_oneshot, goccl_allgather_oneshot). count is in elements
// and elemSize gives their size.
#include "common.cuh"

namespace goccl {

// Broadcast: the root pushes each round's chunk into every peer's staging
// (and, out of place, into its own recv), barrier, peers copy it to recv.
__device__ void broadcast_oneshot(const Params& p) {
  Ctx c(p);
  const u64 bytes = p.count * p.elemSize;
  const int me = p.rank, root = p.root;
  const u64 chunk = chunk_elems(p, bytes, 1);
  const u64 stride = chunk * gridDim.x;
  for (u64 base = chunk * blockIdx.x; base < bytes; base += stride) {
    const u64 n = min64(chunk, bytes - base);
    const int h = c.next_half();
    if (me == root) {
      char* dst[kMaxRanks];
      int nd = 0;
      for (int r = 0; r < p.nranks; r++)
        if (r != me) dst[nd++] = c.stage(r, h, me);
      if (p.send != p.recv) dst[nd++] = (char*)p.recv + base;
      copy_multi(dst, nd, (const char*)p.send + base, n);
    }
    if (!c.barrier()) return;
    if (me != root) copy1((char*)p.recv + base, c.stage(me, h, root), n);
  }
  c.finish();
}

// AllGather: every rank pushes its chunk into every peer's staging (and its
// own slot of recv, out of place), barrier, every rank copies the others'
// chunks to their slots of recv.
__device__ void allgather_oneshot(const Params& p) {
  Ctx c(p);
  const u64 bytes = p.count * p.elemSize;
  const int me = p.rank, nr = p.nranks;
  const u64 chunk = chunk_elems(p, bytes, 1);
  const u64 stride = chunk * gridDim.x;
  for (u64 base = chunk * blockIdx.x; base < bytes; base += stride) {
    const u64 n = min64(chunk, bytes - base);
    const int h = c.next_half();
    char* dst[kMaxRanks];
    int nd = 0;
    for (int r = 0; r < nr; r++)
      if (r != me) dst[nd++] = c.stage(r, h, me);
    char* own = (char*)p.recv + me * bytes + base;
    if ((const char*)p.send + base != own) dst[nd++] = own;
    copy_multi(dst, nd, (const char*)p.send + base, n);
    if (!c.barrier()) return;
    for (int s = 0; s < nr; s++)
      if (s != me) copy1((char*)p.recv + s * bytes + base, c.stage(me, h, s), n);
  }
  c.finish();
}

}  // namespace goccl

extern "C" __global__ void __launch_bounds__(goccl::kThreads) goccl_broadcast_oneshot(goccl::Params p) {
  goccl::grid_dep_sync();
  goccl::stamp_begin(p);
  goccl::broadcast_oneshot(p);
  goccl::stamp_end(p);
}
extern "C" __global__ void __launch_bounds__(goccl::kThreads) goccl_allgather_oneshot(goccl::Params p) {
  goccl::grid_dep_sync();
  goccl::stamp_begin(p);
  goccl::allgather_oneshot(p);
  goccl::stamp_end(p);
}
