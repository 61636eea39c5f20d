// cereduce.cu: the kernel half of the copy-engine reductions (AllReduce
// and ReduceScatter of large messages, collectives/gpu/cereduce.go),
// exported as goccl_cereduce_<type>_<op>.
//
// The copy engines move the data between GPUs: each rank's copy stream puts
// chunk i of the piece rank r owns into r's staging, slot i % ceDepth, then
// writes data[me] = ceSeq + i into r's flag area. A stream of r's own waits
// for every source's data flag and then writes landed = ceSeq + i: a GPU
// may reorder writes arriving from a peer (CUDA says so for remote writes),
// so a kernel that saw a peer's flag could still read stale data, while a
// stream wait orders the downstream work after them. This kernel, on the
// user's stream meanwhile, reduces the chunks of this rank's piece as they
// land and says so twice per chunk: reduced[i % kCESlots] here, which this
// rank's second copy stream waits on before sending the reduced chunk to the
// peers (AllReduce), and free[me][i % kCESlots] in every peer's flag area,
// which the peer's copy stream waits on before it reuses the staging slot.
//
// Flag values grow by one per chunk over the communicator's life (host
// counter, the same on every rank), so a wait is a cyclic >= and no flag is
// ever reset. Slot reuse: chunk i + kCESlots of this rank's piece can only
// arrive after chunk i + kCESlots - ceDepth was freed, which is after chunk
// i finished (ceDepth <= kCESlots), so a block never counts into a slot
// whose previous chunk still has blocks to come. That holds for chunks that
// hold data; the copy streams hold nothing back for the empty chunks past
// the end of a shorter piece, so the kernel stops at the end of its piece.
//
// Direct mode (flags & kFlagCEDirect; 2 ranks, both buffers registered,
// out of place): the peer's copy engine lands its part of this rank's piece
// in recv itself, and the kernel reduces recv = send op recv in place.
// Nothing is staged, so no slot is reused and no free flag is written. The
// host launches one kernel per chunk on its land stream, each given its
// chunk as the whole piece (ceChunks 1) behind the stream waits for that
// chunk; landed is written once per call, before the first chunk, so the
// poll passes at once. Nor does the kernel publish reduced: the host
// orders the chunk's spread after the kernel by an event recorded behind
// it, so the fences and the arrival count would only delay the kernel's
// end (a fence.sc.sys costs about 1.4 us on H200).
//
// Params: send = this rank's own contribution to its piece, recv = its
// output piece, count = elements of the piece here (ranks may differ by the
// rounding), ceChunks, ceChunk (elements), ceSeq, ceDepth.
#include "common.cuh"

namespace goccl {

template <typename T, typename Op>
__device__ void cereduce(const Params& p) {
  const int me = p.rank, nr = p.nranks;
  const bool direct = (p.flags & kFlagCEDirect) != 0;
  const u64 chunkBytes = p.ceChunk * sizeof(T);
  constexpr u64 V = 16 / sizeof(T);
  const u32* landed = (const u32*)(p.signals + kCEFlagOffset + kCELandedOff);
  u32* reduced = (u32*)(p.signals + kCEFlagOffset + kCEReducedOff);
  u32* counters = (u32*)(p.signals + kCECountOffset);
  const u32* abortp = (const u32*)p.abortFlag;
  __shared__ int s_abort;
  u64 base = 0;
  for (u32 i = 0; i < p.ceChunks && base < p.count; i++) {
    const u32 v = p.ceSeq + i;
    const u32 slot = i % kCESlots;
    if (threadIdx.x == 0) s_abort = 0;
    bar_sync();
    // Every source's chunk i has landed.
    if (threadIdx.x == 0 && !wait_flag(landed, v, abortp)) s_abort = 1;
    bar_sync();
    if (s_abort) return;

    // This block's part of the chunk.
    const u64 n = min64(p.ceChunk, p.count - base);
    const u64 per = round_up(ceil_div(n, gridDim.x), V);
    const u64 lo = min64(per * blockIdx.x, n);
    const u64 len = min64(per, n - lo);
    if (len > 0) {
      char* out[1] = {(char*)p.recv + (base + lo) * sizeof(T)};
      const char* in[kMaxRanks];
      const char* stg = (const char*)p.peerStaging[me] + (u64)(i % p.ceDepth) * nr * chunkBytes;
      for (int r = 0; r < nr; r++) {
        if (r == me) in[r] = (const char*)p.send + (base + lo) * sizeof(T);
        else in[r] = direct ? out[0] : stg + r * chunkBytes + lo * sizeof(T);
      }
      reduce_multi<T, Op>(out, 1, in, nr, len, nr);
    }
    base += n;
    if (direct) continue;  // (the host orders the spread by an event: above)
    bar_sync();
    // The last block to finish the chunk publishes it: the block's writes
    // are ordered before its count by the fence, the other blocks' before
    // the flags by the acquire of the count.
    if (threadIdx.x == 0) {
      fence_sys();
      if (atom_add_acq_rel_gpu(counters + slot, 1) == gridDim.x - 1) {
        counters[slot] = 0;
        fence_sys();
        st_release_sys(reduced + slot, v);
        for (int r = 0; r < nr; r++)
          if (r != me)
            st_release_sys((u32*)(p.peerSignals[r] + kCEFlagOffset + kCEFreeOff) + me * kCESlots + slot, v);
      }
    }
  }
}

}  // namespace goccl

GOCCL_KERNELS_BUILTIN(cereduce)  // no PreMulSum: copy engines cannot scale
