// p2p.cu: a group's point-to-point operations (Send, Recv and local copies)
// of one communicator in one launch: goccl_p2p.
//
// The ops come in lanes: every Send to one peer is one lane, every Recv
// from one peer another, and the copies of this rank's Sends to itself into
// its Recvs from itself a third. Each lane runs on P2PParams.channels
// blocks (its channels), which take the op's chunks round robin; a block
// runs its lane's ops in order, so the k-th Send from A to B meets the k-th
// Recv on B from A whatever order the group gave them, and lanes never
// wait for each other: no order of ops deadlocks.
//
// A channel of the pair (sender s, receiver d) owns `depth` staging slots of
// d's staging for source s (both halves of the collectives' layout), and a
// record of 64 bytes in each rank's signal area at kP2POffset. Per op k
// (the channel's op counter):
//   d: writes its byte count into s's record, then ready = k (release);
//   s: waits ready >= k (d is in this op, so no earlier kernel of d still
//      reads the slots), writes its count and sready = k into d's record;
//   both compare the counts. They differ: each side writes the error
//      record the host reads (kErrOffset beside the abort flag) and
//      raises its abort flag, before any byte moved;
//   s: chunk n (counted over the channel's life) goes into slot n % depth
//      once consumed >= n + 1 - depth, then posted = n + 1 (release);
//   d: waits posted >= n + 1, copies the slot out, consumed = n + 1.
// A sender's block ends only when every chunk it posted was consumed, so
// the next kernel finds the staging free. Counters live on the device and
// are advanced by the kernel, so CUDA graphs replay correctly.
#include "common.cuh"

namespace goccl {

constexpr int kP2PMaxOps = 128;     // ops of one launch
constexpr int kP2PMaxLanes = 16;    // 2 (nranks-1) peer lanes and the copy lane
constexpr int kP2PMaxChannels = 16; // blocks of one lane
constexpr int kP2PLaneOps = kP2PMaxOps / kP2PMaxLanes;  // per lane and launch (the host splits longer lanes)
constexpr u64 kP2POffset = 40 << 10;                     // records in the signal area
constexpr u64 kP2PRecordBytes = 64;
constexpr u64 kP2PMinChunk = 2048;  // a chunk is at least this (or a slot)

// Record fields (byte offsets): written by the peer as sender to this rank,
// by the peer as receiver from this rank, and this rank's own counters.
constexpr int kRecSBytes = 0, kRecSReady = 8, kRecPosted = 12;
constexpr int kRecRBytes = 16, kRecRReady = 24, kRecConsumed = 28;
constexpr int kRecSendOps = 32, kRecSendChunks = 36, kRecRecvOps = 40, kRecRecvChunks = 44;

enum P2PKindDev : u32 { kLaneSend = 0, kLaneRecv = 1, kLaneCopy = 2 };

struct P2POp {
  u64 src;    // Send, copy: the data
  u64 dst;    // Recv, copy: where it goes
  u64 bytes;  // this rank's byte count
};
struct P2PLane {
  u16 first;  // index of the lane's first op in ops
  u16 n;      // ops of the lane
  u8 peer;
  u8 kind;    // P2PKindDev
  u16 pad;
};
// P2PParams extends Params for goccl_p2p; collectives/gpu/p2p.go writes it.
struct P2PParams {
  Params p;                        //   0
  u32 nlanes;                      // 288
  u32 channels;                    // 292: blocks per lane, the same on every rank
  u64 reserved;                    // 296
  P2PLane lanes[kP2PMaxLanes];     // 304
  P2POp ops[kP2PMaxOps];           // 432
};                                 // 3504 bytes
static_assert(__builtin_offsetof(P2PParams, nlanes) == 288, "P2PParams.nlanes moved: update collectives/gpu/p2p.go");
static_assert(__builtin_offsetof(P2PParams, channels) == 292, "P2PParams.channels moved: update collectives/gpu/p2p.go");
static_assert(__builtin_offsetof(P2PParams, lanes) == 304, "P2PParams.lanes moved: update collectives/gpu/p2p.go");
static_assert(__builtin_offsetof(P2PParams, ops) == 432, "P2PParams.ops moved: update collectives/gpu/p2p.go");
static_assert(sizeof(P2PLane) == 8 && sizeof(P2POp) == 24, "P2P descriptors changed size: update collectives/gpu/p2p.go");
static_assert(sizeof(P2PParams) == 3504, "P2PParams changed size: update collectives/gpu/p2p.go");
static_assert(kP2POffset + kMaxRanks * kP2PMaxChannels * kP2PRecordBytes <= kErrClaimOffset, "p2p records overlap the error claim");
static_assert(kP2POffset >= kCECountOffset + 4 * kCESlots, "p2p records overlap the copy-engine counters");

// Chunking of an op of `bytes`: the same on both sides of a pair, as it
// depends only on the count both compared.
struct Chunks {
  u64 size, n;  // bytes per chunk, chunks of the op
  __device__ Chunks(const P2PParams& q, u64 bytes) {
    u64 c = round_up(ceil_div(bytes, q.channels), 16);
    c = c < kP2PMinChunk ? kP2PMinChunk : c;
    size = c < q.p.slotBytes ? c : q.p.slotBytes;
    n = bytes == 0 ? 0 : ceil_div(bytes, size);
  }
  // of: chunks of channel ch (it takes ch, ch + channels, ...).
  __device__ u32 of(u32 ch, u32 channels) const { return n > ch ? (u32)((n - ch - 1) / channels + 1) : 0; }
  __device__ u64 len(u64 g, u64 bytes) const { return min64(size, bytes - g * size); }
};

__device__ __forceinline__ char* record(u64 signals, int peer, u32 ch) {
  return (char*)signals + kP2POffset + ((u64)peer * kP2PMaxChannels + ch) * kP2PRecordBytes;
}
__device__ __forceinline__ u32* word(char* rec, int off) { return (u32*)(rec + off); }

// slot i of the channel's slots in rank d's staging for source s.
__device__ __forceinline__ char* p2p_slot(const P2PParams& q, int d, int s, u32 ch, u32 depth, u32 i) {
  const Params& p = q.p;
  const u32 k = ch * depth + i, half = k / p.blockSlots, j = k % p.blockSlots;
  const u64 halfBytes = (u64)p.nranks * p.blockSlots * p.slotBytes;
  return (char*)p.peerStaging[d] + half * halfBytes + ((u64)s * p.blockSlots + j) * p.slotBytes;
}

// p2p_mismatch reports a pair whose byte counts disagree (this rank's
// direction as the code) and aborts this rank's kernels. Thread 0 only.
__device__ void p2p_mismatch(const Params& p, int peer, u32 dir, u64 mine, u64 theirs) {
  report_error(p, dir == 0 ? kErrSendBytes : kErrRecvBytes, peer, mine, theirs);
}

// Verdict hands thread 0's outcome of a wait to the whole block through a
// barrier. Its two words alternate, so thread 0 rewrites one only after
// every thread passed the barrier that followed its read of it, and every
// thread leaves at the same check.
struct Verdict {
  int* s;
  u32 turn;
  __device__ bool share(bool ok0) {
    if (threadIdx.x == 0) s[turn & 1] = ok0;
    bar_sync();
    return s[turn++ & 1] != 0;
  }
};

// Each lane function returns false when the block stopped early (abort or
// mismatch); its counters are then left behind, as the communicator is done.
__device__ bool p2p_send(const P2PParams& q, const P2PLane& lane, u32 ch, u32 depth) {
  const Params& p = q.p;
  const u32* abortp = (const u32*)p.abortFlag;
  char* mine = record(p.signals, lane.peer, ch);
  char* theirs = record(p.peerSignals[lane.peer], p.rank, ch);
  __shared__ int s_ok[2];
  Verdict v{s_ok, 0};
  u32 ops = *(volatile u32*)word(mine, kRecSendOps), chunks = *(volatile u32*)word(mine, kRecSendChunks);
  for (u32 o = 0; o < lane.n; o++) {
    const P2POp& op = q.ops[lane.first + o];
    ops++;
    bool ok = true;
    if (threadIdx.x == 0) {
      ok = wait_flag(word(mine, kRecRReady), ops, abortp);
      if (ok) {
        st8(theirs + kRecSBytes, op.bytes);
        st_release_sys(word(theirs, kRecSReady), ops);
        const u64 want = ld8(mine + kRecRBytes);
        if (want != op.bytes) {
          p2p_mismatch(p, lane.peer, 0, op.bytes, want);
          ok = false;
        }
      }
    }
    if (!v.share(ok)) return false;
    const Chunks c(q, op.bytes);
    const u32 mineN = c.of(ch, q.channels);
    for (u32 k = 0; k < mineN; k++) {
      const u32 n = chunks + k;
      if (!v.share(threadIdx.x != 0 || wait_flag(word(mine, kRecConsumed), n + 1 - depth, abortp))) return false;
      const u64 g = ch + (u64)k * q.channels;
      copy1(p2p_slot(q, lane.peer, p.rank, ch, depth, n % depth), (const char*)op.src + g * c.size, c.len(g, op.bytes));
      bar_sync();
      if (threadIdx.x == 0) st_release_sys(word(theirs, kRecPosted), n + 1);
    }
    chunks += mineN;
  }
  // The staging is free again only when the receiver has read it all.
  if (!v.share(threadIdx.x != 0 || wait_flag(word(mine, kRecConsumed), chunks, abortp))) return false;
  if (threadIdx.x == 0) {
    *(volatile u32*)word(mine, kRecSendOps) = ops;
    *(volatile u32*)word(mine, kRecSendChunks) = chunks;
  }
  return true;
}

__device__ bool p2p_recv(const P2PParams& q, const P2PLane& lane, u32 ch, u32 depth) {
  const Params& p = q.p;
  const u32* abortp = (const u32*)p.abortFlag;
  char* mine = record(p.signals, lane.peer, ch);
  char* theirs = record(p.peerSignals[lane.peer], p.rank, ch);
  __shared__ int s_ok[2];
  Verdict v{s_ok, 0};
  u32 ops = *(volatile u32*)word(mine, kRecRecvOps), chunks = *(volatile u32*)word(mine, kRecRecvChunks);
  for (u32 o = 0; o < lane.n; o++) {
    const P2POp& op = q.ops[lane.first + o];
    ops++;
    bool ok = true;
    if (threadIdx.x == 0) {
      st8(theirs + kRecRBytes, op.bytes);
      st_release_sys(word(theirs, kRecRReady), ops);
      ok = wait_flag(word(mine, kRecSReady), ops, abortp);
      if (ok) {
        const u64 sent = ld8(mine + kRecSBytes);
        if (sent != op.bytes) {
          p2p_mismatch(p, lane.peer, 1, op.bytes, sent);
          ok = false;
        }
      }
    }
    if (!v.share(ok)) return false;
    const Chunks c(q, op.bytes);
    const u32 mineN = c.of(ch, q.channels);
    for (u32 k = 0; k < mineN; k++) {
      const u32 n = chunks + k;
      if (!v.share(threadIdx.x != 0 || wait_flag(word(mine, kRecPosted), n + 1, abortp))) return false;
      const u64 g = ch + (u64)k * q.channels;
      copy1((char*)op.dst + g * c.size, p2p_slot(q, p.rank, lane.peer, ch, depth, n % depth), c.len(g, op.bytes));
      bar_sync();
      if (threadIdx.x == 0) st_release_sys(word(theirs, kRecConsumed), n + 1);
    }
    chunks += mineN;
  }
  if (threadIdx.x == 0) {
    *(volatile u32*)word(mine, kRecRecvOps) = ops;
    *(volatile u32*)word(mine, kRecRecvChunks) = chunks;
  }
  return true;
}

// p2p_copy: this rank's Sends to itself into its Recvs from itself (the
// host paired them and checked their counts).
__device__ void p2p_copy(const P2PParams& q, const P2PLane& lane, u32 ch) {
  for (u32 o = 0; o < lane.n; o++) {
    const P2POp& op = q.ops[lane.first + o];
    const Chunks c(q, op.bytes);
    for (u64 g = ch; g < c.n; g += q.channels)
      copy1((char*)op.dst + g * c.size, (const char*)op.src + g * c.size, c.len(g, op.bytes));
  }
}

__device__ void p2p(const P2PParams& q) {
  const u32 lane = blockIdx.x / q.channels, ch = blockIdx.x % q.channels;
  if (lane >= q.nlanes) return;
  const P2PLane& l = q.lanes[lane];
  const u32 depth = 2 * q.p.blockSlots / q.channels;
  switch (l.kind) {
    case kLaneSend:
      p2p_send(q, l, ch, depth);
      break;
    case kLaneRecv:
      p2p_recv(q, l, ch, depth);
      break;
    default:
      p2p_copy(q, l, ch);
  }
}

}  // namespace goccl

extern "C" __global__ void __launch_bounds__(goccl::kThreads) goccl_p2p(goccl::P2PParams q) {
  goccl::grid_dep_sync();
  goccl::stamp_begin(q.p);
  goccl::p2p(q);
  goccl::stamp_end(q.p);
}
