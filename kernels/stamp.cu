// stamp.cu: goccl_stamp, one thread that stores %globaltimer into a call's
// Stamp (common.cuh) for a call that runs no kernel of its own, such as a
// copy-engine call: enqueued before its copies with kStampStart it claims
// the Stamp (number 0) and stores the start; after them with kStampEnd it
// stores the end, then the call's number, as stamp_end does for a kernel.
#include "common.cuh"

namespace goccl {

constexpr u32 kStampStart = 0, kStampEnd = 1;

// StampArgs is goccl_stamp's parameter buffer; collectives/gpu/stamps.go
// writes it.
struct StampArgs {
  u64 slot;   //  0: the call's Stamp (host-mapped); 0 stores nothing
  u32 which;  //  8: kStampStart or kStampEnd
  u32 pad;    // 12
  u64 seq;    // 16: the call's number, stored after the end
};
static_assert(sizeof(StampArgs) == 24 && __builtin_offsetof(StampArgs, seq) == 16,
              "StampArgs changed: update collectives/gpu/stamps.go");

__device__ __forceinline__ void stamp_one(const StampArgs& a) {
  if (a.slot == 0 || blockIdx.x != 0 || threadIdx.x != 0) return;
  Stamp* s = (Stamp*)a.slot;
  if (a.which == kStampStart) {
    st8(&s->seq, 0);
    st8(&s->start, globaltimer());
    return;
  }
  st8(&s->end, globaltimer());
  st8(&s->seq, a.seq);
}

}  // namespace goccl

extern "C" __global__ void goccl_stamp(goccl::StampArgs a) {
  goccl::grid_dep_sync();
  goccl::stamp_one(a);
}
