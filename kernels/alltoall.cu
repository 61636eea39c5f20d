// alltoall.cu: the one-shot AllToAll for small messages, exported as
// goccl_alltoall_ll. Params.count is the bytes each rank sends each peer:
// send holds chunk p (bytes at p*count) for rank p, and recv gets rank r's
// chunk for this rank at r*count. It moves the data as ll.cu's lines and
// shares their buffers, epochs and call numbers: block b of a launch
// carries the same byte range of every chunk, in lines stored into each
// peer's line buffer for (half, source = this rank, b), and then reads the
// lines every peer stored for it. Every rank writes to and reads from every
// other one, as the LL AllReduce does, so ll.cu's argument for reusing the
// halves holds across both kernels; like it, no block may be without data
// (the backend's grid gives each at least a line).
//
// In place (send == recv) works: each thread writes recv only at the bytes
// it alone read from send before, and the own chunk already lies where it
// belongs.
#include "ll.cu"

namespace goccl {

__device__ void alltoall_ll(const Params& p) {
  const int me = p.rank, nr = p.nranks;
  const u64 bytes = p.count;
  const u64 per = round_up(ceil_div(bytes, gridDim.x), 8);
  const u64 lo = per * blockIdx.x;
  const u64 n = lo < bytes ? min64(per, bytes - lo) : 0;
  const u64 lines = ceil_div(n, 8);
  const LLBlock B(p);
  const u32 e = B.e;
  auto slot = [&](int owner, int src) { return B.slot(owner, src); };
  const char* send = (const char*)p.send;
  char* recv = (char*)p.recv;
  B.publish();
  // Lines of chunk r go to rank r; this rank's own chunk goes straight to
  // recv (in place it is already there).
  const bool inPlace = send == recv;
  for (u64 i = threadIdx.x; i < lines; i += blockDim.x) {
    const u64 len = min64(8, n - 8 * i);
    for (int r = 0; r < nr; r++) {
      const u64 at = r * bytes + lo + 8 * i;
      if (r == me && inPlace) continue;
      const u64 v = load_tail(send + at, len);
      if (r == me)
        store_tail(recv + at, v, len);
      else
        st_volatile16(slot(r, me) + 16 * i, V16{(u32)v, e, (u32)(v >> 32), e});
    }
  }
  const u32* abortp = (const u32*)p.abortFlag;
  bool dead = false;
  for (u64 i = threadIdx.x; i < lines; i += blockDim.x) {
    const u64 len = min64(8, n - 8 * i);
    for (int r = 0; r < nr; r++) {
      if (r == me) continue;
      const char* l = slot(me, r) + 16 * i;
      V16 line = ld_volatile16(l);
      u32 spins = 0;
      while (!dead && (line.y != e || line.w != e)) {
        if ((++spins & 1023) == 0 && ld_volatile_sys(abortp) != 0) dead = true;
        line = ld_volatile16(l);
      }
      store_tail(recv + r * bytes + lo + 8 * i, (u64)line.x | ((u64)line.z << 32), len);
    }
  }
  B.finish(dead);
}

}  // namespace goccl

extern "C" __global__ void __launch_bounds__(goccl::kThreads) goccl_alltoall_ll(goccl::Params p) {
  goccl::grid_dep_sync();
  goccl::stamp_begin(p);
  goccl::alltoall_ll(p);
  goccl::stamp_end(p);
}
