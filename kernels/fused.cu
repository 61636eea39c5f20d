// fused.cu: a group's consecutive small AllReduces of one (type, op) in one
// launch, exported as goccl_fused_allreduce_ll_<type>_<op>. Each call of
// the batch is a descriptor; the launch runs ll.cu's allreduce_ll for each
// in order, on the blocks that call's own LL launch would have had, so
// that the lines, epochs and call numbers it uses are exactly those of
// separate LL launches: ranks that fuse a batch and ranks that launch its
// calls one by one meet correctly, and a launch after the batch finds the
// epochs where it expects them.
//
// Params.reserved[2] points at the descriptors (host-pinned memory mapped
// into the device, collectives/gpu/fuse.go); reserved[3] holds their count
// in its low 32 bits and a ticket in its high 32 bits. When the ticket is
// not 0, the last block to have copied the descriptors into shared memory
// writes it into the u32 kFuseDoneBack bytes before them, so that the host
// knows when it may write that slot again; a CUDA graph's descriptors have
// storage of their own and no ticket.
#include "ll.cu"

namespace goccl {

// FusedDesc is one call; keep in sync with collectives/gpu/fuse.go.
struct FusedDesc {
  u64 send;    //  0
  u64 recv;    //  8
  u64 seq;     // 16: the call's number (Params.seq), compared between ranks
  u32 count;   // 24: elements
  u32 blocks;  // 28: blocks of the call's own LL launch, at most the grid
};
static_assert(sizeof(FusedDesc) == 32, "FusedDesc changed size: update collectives/gpu/fuse.go");

constexpr u32 kFuseMaxDescs = 64;
constexpr u64 kFuseDoneBack = 16;
// Blocks of this launch that have copied the descriptors (a u32 of the
// signal area, zero between launches).
constexpr u64 kFuseCountOffset = 64 << 10;
static_assert(kFuseCountOffset >= kErrClaimOffset + 4 && kFuseCountOffset + 4 <= kLLEpochOffset,
              "the fused launch's counter overlaps another user of the signal area");

template <typename T, typename Op>
__device__ void fused_allreduce_ll(const Params& p) {
  __shared__ FusedDesc s_desc[kFuseMaxDescs];
  const u32 n = min64((u32)p.reserved[3], kFuseMaxDescs);
  const u32 ticket = (u32)(p.reserved[3] >> 32);
  const char* src = (const char*)p.reserved[2];
  for (u32 i = threadIdx.x; i < n * 4; i += blockDim.x) ((u64*)s_desc)[i] = ld8(src + 8 * i);
  bar_sync();
  if (ticket != 0 && threadIdx.x == 0) {
    u32* arrived = (u32*)(p.signals + kFuseCountOffset);
    if (atom_add_acq_rel_gpu(arrived, 1) == gridDim.x - 1) {
      // Every block has its copy: the next launch on the stream starts
      // after this one ends, so the reset cannot meet a late arrival.
      *(volatile u32*)arrived = 0;
      st_release_sys((u32*)(src - kFuseDoneBack), ticket);
    }
  }
  Params q = p;
  for (u32 k = 0; k < n; k++) {
    const FusedDesc& d = s_desc[k];
    if (blockIdx.x < d.blocks) {
      q.send = d.send;
      q.recv = d.recv;
      q.count = d.count;
      q.seq = d.seq;
      // After an abort the block's threads all stop here together (the
      // result is the block's, taken after its barrier).
      if (!allreduce_ll<T, Op>(q, d.blocks)) return;
    }
    // The next call's threads read the LL epoch that thread 0 stored.
    bar_sync();
  }
}

}  // namespace goccl

GOCCL_KERNELS_BUILTIN(fused_allreduce_ll)  // PreMulSum never fuses: its scalar is per call
