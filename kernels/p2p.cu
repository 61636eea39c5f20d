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
//
// Zero copy: a Recv whose buffer lies in a registration carries the
// registration's tag and the buffer's offset in it (P2POp.src; the host
// offers it from GOCCL_TUNE's p2pzc bytes up); d publishes them with its count
// (0: none). s, holding a mapping of d's registration under that tag in its
// table (P2PParams.zcTable, written by its host at registration), takes the
// op straight into d's buffer and says so in d's record (szero = k; k - 1:
// staging) before sready, so that both sides follow the one path s chose
// from what both saw. On that path each channel with chunks of the op
// copies them into d's buffer and posts one chunk that uses no slot
// ("landed"); d waits for it and copies nothing, then consumes it, so the
// counters stay the staging path's.
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
// Zero copy: the peer as receiver writes its registration's tag (0: none)
// and the offset, the peer as sender its choice (szero).
constexpr int kRecRTag = 48, kRecSZero = 52, kRecROff = 56;

// The zero-copy table (device memory, collectives/gpu/p2pzc.go): entry
// tag % kZcSlots holds the tag of the registration it maps (0: free) and
// each peer's copy of it as mapped here.
constexpr u32 kZcSlots = 1024;
constexpr int kZcOffBits = 40;  // P2POp.src of a Recv: tag << 40 | offset
struct ZcEntry {
  u32 tag;
  u32 pad;
  u64 base[kMaxRanks];
};
static_assert(sizeof(ZcEntry) == 8 + 8 * kMaxRanks, "ZcEntry changed: update collectives/gpu/p2pzc.go");

// Stamp flags (Params.reserved[4], the point-to-point launch's own word):
// a group's launches time it together. A kernel built before them ignores
// the word and times each launch whole.
constexpr u64 kP2PStampClaim = 1, kP2PStampStart = 2, kP2PStampEnd = 4;

enum P2PKindDev : u32 { kLaneSend = 0, kLaneRecv = 1, kLaneCopy = 2 };

struct P2POp {
  u64 src;    // Send, copy: the data; Recv: zero-copy tag << 40 | offset (0: none)
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
  u64 zcTable;                     // 296: ZcEntry[kZcSlots] (0: no zero copy)
  P2PLane lanes[kP2PMaxLanes];     // 304
  P2POp ops[kP2PMaxOps];           // 432
};                                 // 3504 bytes
static_assert(__builtin_offsetof(P2PParams, nlanes) == 288, "P2PParams.nlanes moved: update collectives/gpu/p2p.go");
static_assert(__builtin_offsetof(P2PParams, zcTable) == 296, "P2PParams.zcTable moved: update collectives/gpu/p2p.go");
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

// p2p_agree compares a pair's byte counts (thread 0): when they differ it
// reports the pair (this rank's direction as the code) and aborts this
// rank's kernels.
__device__ bool p2p_agree(const Params& p, int peer, u32 dir, u64 mine, u64 theirs) {
  if (mine == theirs) return true;
  report_error(p, dir == 0 ? kErrSendBytes : kErrRecvBytes, peer, mine, theirs);
  return false;
}

// Verdict hands thread 0's outcome of a wait to the whole block through a
// barrier. Its two words alternate, so thread 0 rewrites one only after
// every thread passed the barrier that followed its read of it, and every
// thread leaves at the same check.
// share2 hands a word along with it in the same way.
struct Verdict {
  int* s;
  u64* x;
  u32 turn;
  __device__ bool share(bool ok0) {
    if (threadIdx.x == 0) s[turn & 1] = ok0;
    bar_sync();
    return s[turn++ & 1] != 0;
  }
  __device__ bool share2(bool ok0, u64 x0, u64* out) {
    if (threadIdx.x == 0) x[turn & 1] = x0;
    const u32 t = turn;
    const bool ok = share(ok0);
    *out = x[t & 1];
    return ok;
  }
};

// zc_dst is where a Send of this rank to peer goes straight into the
// peer's registered buffer, 0 for staging: the peer published tag (and
// off), and this rank's table maps that registration of the peer. The tag
// is read with acquire: the host writes an entry's bases before its tag.
__device__ u64 zc_dst(const P2PParams& q, int peer, u32 tag, u64 off) {
  if (tag == 0 || q.zcTable == 0) return 0;
  const ZcEntry* e = (const ZcEntry*)q.zcTable + tag % kZcSlots;
  if (ld_acquire_sys(&e->tag) != tag) return 0;
  const u64 b = ld8(&e->base[peer]);
  return b == 0 ? 0 : b + off;
}

// LaneSide is what both directions of a lane start from: the pair's
// records on both ranks, the block's verdicts and the channel's counters
// (ops, chunks) at offset `at` of this rank's record, stored back by save.
struct LaneSide {
  const u32* abortp;
  char* mine;
  char* theirs;
  Verdict v;
  u32 ops, chunks;
  __device__ LaneSide(const P2PParams& q, const P2PLane& lane, u32 ch, int at, int* s_ok, u64* s_x)
      : abortp((const u32*)q.p.abortFlag),
        mine(record(q.p.signals, lane.peer, ch)),
        theirs(record(q.p.peerSignals[lane.peer], q.p.rank, ch)),
        v{s_ok, s_x, 0},
        ops(*(volatile u32*)word(mine, at)),
        chunks(*(volatile u32*)word(mine, at + 4)) {}
  __device__ bool wait(int off, u32 want) { return v.share(threadIdx.x != 0 || wait_flag(word(mine, off), want, abortp)); }
  __device__ void save(int at) {
    if (threadIdx.x != 0) return;
    *(volatile u32*)word(mine, at) = ops;
    *(volatile u32*)word(mine, at + 4) = chunks;
  }
  // pipe moves this channel's chunks of op through its staging slots: the
  // sender's chunk n waits for consumed >= n + 1 - depth and goes from src
  // into slot n % depth, the receiver's waits for posted >= n + 1 and goes
  // from the slot into dst; each then posts n + 1 to the peer.
  __device__ bool pipe(const P2PParams& q, const P2PLane& lane, const P2POp& op, u32 ch, u32 depth, bool send) {
    const Params& p = q.p;
    const Chunks c(q, op.bytes);
    const u32 mineN = c.of(ch, q.channels);
    for (u32 k = 0; k < mineN; k++) {
      const u32 n = chunks + k;
      if (!wait(send ? kRecConsumed : kRecPosted, send ? n + 1 - depth : n + 1)) return false;
      const u64 g = ch + (u64)k * q.channels, at = g * c.size, len = c.len(g, op.bytes);
      if (send)
        copy1(p2p_slot(q, lane.peer, p.rank, ch, depth, n % depth), (const char*)op.src + at, len);
      else
        copy1((char*)op.dst + at, p2p_slot(q, p.rank, lane.peer, ch, depth, n % depth), len);
      bar_sync();
      if (threadIdx.x == 0) st_release_sys(word(theirs, send ? kRecPosted : kRecConsumed), n + 1);
    }
    chunks += mineN;
    return true;
  }
  // land is zero copy: the sender writes this channel's chunks of op
  // straight to dst and posts one chunk that uses no slot; the receiver
  // waits for it, then consumes it. A channel without chunks does neither.
  __device__ bool land(const P2PParams& q, const P2POp& op, u32 ch, u64 dst, bool send) {
    const Chunks c(q, op.bytes);
    const u32 mineN = c.of(ch, q.channels);
    if (mineN == 0) return true;
    if (send) {
      for (u32 k = 0; k < mineN; k++) {
        const u64 g = ch + (u64)k * q.channels;
        copy1((char*)dst + g * c.size, (const char*)op.src + g * c.size, c.len(g, op.bytes));
      }
      bar_sync();
      if (threadIdx.x == 0) st_release_sys(word(theirs, kRecPosted), chunks + 1);
    } else {
      if (!wait(kRecPosted, chunks + 1)) return false;
      if (threadIdx.x == 0) st_release_sys(word(theirs, kRecConsumed), chunks + 1);
    }
    chunks++;
    return true;
  }
};

// Each lane function returns false when the block stopped early (abort or
// mismatch); its counters are then left behind, as the communicator is done.
__device__ bool p2p_send(const P2PParams& q, const P2PLane& lane, u32 ch, u32 depth) {
  __shared__ int s_ok[2];
  __shared__ u64 s_x[2];
  LaneSide L(q, lane, ch, kRecSendOps, s_ok, s_x);
  for (u32 o = 0; o < lane.n; o++) {
    const P2POp& op = q.ops[lane.first + o];
    const u32 ops = ++L.ops;
    bool ok = true;
    u64 zc = 0;  // where the data goes straight (0: staging)
    if (threadIdx.x == 0) {
      ok = wait_flag(word(L.mine, kRecRReady), ops, L.abortp);
      if (ok) {
        const u64 want = ld8(L.mine + kRecRBytes);
        zc = zc_dst(q, lane.peer, ld4(L.mine + kRecRTag), ld8(L.mine + kRecROff));
        st4(L.theirs + kRecSZero, zc != 0 ? ops : ops - 1);
        st8(L.theirs + kRecSBytes, op.bytes);
        st_release_sys(word(L.theirs, kRecSReady), ops);
        ok = p2p_agree(q.p, lane.peer, 0, op.bytes, want);
      }
    }
    if (!L.v.share2(ok, zc, &zc)) return false;
    if (!(zc != 0 ? L.land(q, op, ch, zc, true) : L.pipe(q, lane, op, ch, depth, true))) return false;
  }
  // The staging is free again only when the receiver has read it all.
  if (!L.wait(kRecConsumed, L.chunks)) return false;
  L.save(kRecSendOps);
  return true;
}

__device__ bool p2p_recv(const P2PParams& q, const P2PLane& lane, u32 ch, u32 depth) {
  __shared__ int s_ok[2];
  __shared__ u64 s_x[2];
  LaneSide L(q, lane, ch, kRecRecvOps, s_ok, s_x);
  for (u32 o = 0; o < lane.n; o++) {
    const P2POp& op = q.ops[lane.first + o];
    const u32 ops = ++L.ops;
    bool ok = true;
    u64 zc = 0;  // 1: the sender writes straight into op.dst
    if (threadIdx.x == 0) {
      st8(L.theirs + kRecRBytes, op.bytes);
      st4(L.theirs + kRecRTag, (u32)(op.src >> kZcOffBits));
      st8(L.theirs + kRecROff, op.src & ((1ull << kZcOffBits) - 1));
      st_release_sys(word(L.theirs, kRecRReady), ops);
      ok = wait_flag(word(L.mine, kRecSReady), ops, L.abortp);
      if (ok) {
        zc = ld4(L.mine + kRecSZero) == ops;
        ok = p2p_agree(q.p, lane.peer, 1, op.bytes, ld8(L.mine + kRecSBytes));
      }
    }
    if (!L.v.share2(ok, zc, &zc)) return false;
    if (!(zc != 0 ? L.land(q, op, ch, 0, false) : L.pipe(q, lane, op, ch, depth, false))) return false;
  }
  L.save(kRecRecvOps);
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

// A group's launches share its Stamp: the first claims it (and stores the
// start unless the group's collectives already did), the last ends it.
__device__ __forceinline__ void p2p_stamp_begin(const P2PParams& q) {
  if (q.p.reserved[0] == 0 || blockIdx.x != 0 || threadIdx.x != 0) return;
  Stamp* s = (Stamp*)q.p.reserved[0];
  if (q.p.reserved[4] & kP2PStampClaim) st8(&s->seq, 0);
  if (q.p.reserved[4] & kP2PStampStart) st8(&s->start, globaltimer());
}
__device__ __forceinline__ void p2p_stamp_end(const P2PParams& q) {
  if (q.p.reserved[4] & kP2PStampEnd) stamp_end(q.p);
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
  goccl::p2p_stamp_begin(q);
  goccl::p2p(q);
  goccl::p2p_stamp_end(q);
}
