// p2p.cu: a group's point-to-point operations (Send, Recv and local copies)
// of one communicator in one launch: goccl_p2p.
//
// The ops come in lanes: every Send to one peer is one lane, every Recv
// from one peer another, and the copies of this rank's Sends to itself into
// its Recvs from itself a third. Each lane runs on P2PParams.channels
// blocks (its channels), which take the op's chunks round robin; a block
// runs its lane's ops in order, so the k-th Send from A to B meets the k-th
// Recv on B from A whatever order the group gave them, and lanes never
// wait for each other: no order of ops in a group deadlocks.
//
// A channel of the pair (sender s, receiver d) has a record of 64 bytes in
// each rank's signal area at kP2POffset, `depth` staging slots of d's
// staging for source s (both halves of the collectives' layout), and in
// d's eager area (past the copy engines' landing area, at Params.reserved[5]
// of d's staging; no collective touches it) a mailbox of kP2PEagerQ entries
// and an eager ring of eager_ring(q) bytes. Per op k (the channel's op
// counter) the sender publishes its byte count and its choice of path in
// mailbox entry k % kP2PEagerQ, the op number last (release); the receiver
// writes its count into s's record, then ready = k (release), waits for
// the entry and follows the path the sender chose:
//   eager: the channel's part of the op fits the ring (round up to 16
//      bytes, at most the ring): s waits only for credits (ready >= k + 1 -
//      kP2PEagerQ, so the entry's slot is read; freed far enough, so the
//      ring has room), writes the part at its ring position `at` (cyclic
//      u32, a part never wraps: it skips to the ring's start instead),
//      publishes {count, eager, at} and is done with the op: it never waits
//      for d to reach it. d copies the part out and advances s's freed.
//      So a Send below the limit completes whether or not its Recv runs,
//      and two ranks that each Send to the other before they Recv, outside
//      a group, go through.
//   rendezvous (staging or zero copy): s waits ready >= k (d is in this
//      op, so no earlier kernel of d still reads the slots), publishes,
//      then moves the data as below.
// The choice is per channel, as records and rings are. s prefers zero copy
// when d is in the op already and offered it (one copy instead of two),
// else eager when the part fits, else the rendezvous. Both compare the
// counts: on a rendezvous each side that finds them different writes the
// error record the host reads (kErrOffset beside the abort flag) and raises
// its abort flag, before any byte moved. On an eager op only d compares
// (s finished already): d reports kErrRecvBytes naming both counts, and
// writes the op's number into s's record (ebad); s's blocks look at it at
// each op and in every wait on d, so s's next launch with a lane to or
// from d (or one still waiting on d) reports kErrSendBytes with both counts
// (its own from the mailbox entry, d's from its record) and aborts.
// The staging path, per chunk n (counted over the channel's life):
//   s: chunk n goes into slot n % depth once consumed >= n + 1 - depth,
//      then posted = n + 1 (release);
//   d: waits posted >= n + 1, copies the slot out, consumed = n + 1.
// A sender's block ends only when every staged chunk it posted was
// consumed, so the next kernel finds the staging free; eager parts may
// stay in the ring after it ended, as the ring belongs to the pair alone.
// Counters live on the device and are advanced by the kernel, so CUDA
// graphs replay correctly.
//
// Every wait on the peer looks, each 1024 polls, at the abort flag, at the
// peer's rejection (ebad) and, when the launch carries a timeout
// (GOCCL_TIMEOUT, Params.reserved[4]'s high half in ms), at %globaltimer:
// past the timeout it records kErrSendTimeout or kErrRecvTimeout with the
// peer, the op's number on the lane and the nanoseconds waited, and
// aborts the rank.
//
// Zero copy: a Recv whose buffer lies in a registration carries the
// registration's tag and the buffer's offset in it (P2POp.src; the host
// offers it from GOCCL_TUNE's p2pzc bytes up); d publishes them with its count
// (0: none). s, holding a mapping of d's registration under that tag in its
// table (P2PParams.zcTable, written by its host at registration), takes the
// op straight into d's buffer and says so in the mailbox. On that path each
// channel with chunks of the op copies them into d's buffer and posts one
// chunk that uses no slot ("landed"); d waits for it and copies nothing,
// then consumes it, so the counters stay the staging path's.
#include "common.cuh"

namespace goccl {

constexpr int kP2PMaxOps = 128;     // ops of one launch
constexpr int kP2PMaxLanes = 16;    // 2 (nranks-1) peer lanes and the copy lane
constexpr int kP2PMaxChannels = 16; // blocks of one lane
constexpr int kP2PLaneOps = kP2PMaxOps / kP2PMaxLanes;  // per lane and launch (the host splits longer lanes)
constexpr u64 kP2POffset = 40 << 10;                     // records in the signal area
constexpr u64 kP2PRecordBytes = 64;
constexpr u64 kP2PMinChunk = 2048;  // a chunk is at least this (or a slot)

// Record fields (byte offsets): written by the peer as receiver from this
// rank (efreed, ebad, rbytes, rready, consumed, rtag, roff), by the peer as
// sender to this rank (posted), and this rank's own counters (ehead as
// sender; the op and chunk counters; rpath, the path its last Recv from the
// peer took, which tests read).
constexpr int kRecEFreed = 0, kRecEBad = 4, kRecEHead = 8, kRecPosted = 12;
constexpr int kRecRBytes = 16, kRecRReady = 24, kRecConsumed = 28;
constexpr int kRecSendOps = 32, kRecSendChunks = 36, kRecRecvOps = 40, kRecRecvChunks = 44;
constexpr int kRecRTag = 48, kRecRPath = 52, kRecROff = 56;

// The eager area of a rank (collectives/gpu/p2p.go eagerBytes): for each
// source but itself (the k-th after it, as the landing area counts), the
// mailboxes of kP2PMaxChannels channels, then kP2PEagerData bytes of rings
// that the lane's channels share (eager_ring each). An entry: the sender's
// count (u64), its path (P2PPath), the eager part's ring position, the op
// number (written last).
constexpr u32 kP2PEagerQ = 16;
constexpr u64 kP2PEagerEntry = 32;
constexpr u64 kP2PEagerMailboxes = kP2PMaxChannels * kP2PEagerQ * kP2PEagerEntry;
constexpr u64 kP2PEagerData = 256 << 10;
constexpr u64 kP2PEagerSrcBytes = kP2PEagerMailboxes + kP2PEagerData;
constexpr int kMbBytes = 0, kMbPath = 8, kMbAt = 12, kMbOps = 16;
enum P2PPath : u32 { kPathStaging = 0, kPathZc = 1, kPathEager = 2 };
static_assert(kMbOps + 4 <= kP2PEagerEntry, "mailbox entry overflows");
static_assert(kRecROff + 8 <= kP2PRecordBytes, "record fields overflow the record");
static_assert(kP2PEagerSrcBytes == 270336, "eager area changed: update collectives/gpu/p2p.go");
static_assert((kP2PEagerData & (kP2PEagerData - 1)) == 0 && kP2PEagerData / kP2PMaxChannels >= kP2PMinChunk,
              "every channel's ring must hold a smallest chunk");

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
// kP2PEagerOff (the same word): every Send of the launch is a rendezvous
// (GOCCL_TUNE p2peager=0).
constexpr u64 kP2PEagerOff = 8;
// The word's high 32 bits bound every wait on a peer, in milliseconds (0:
// none, GOCCL_TIMEOUT unset): a wait past it records kErrSendTimeout or
// kErrRecvTimeout naming the peer and the op, and aborts the rank.
constexpr int kP2PTimeoutShift = 32;

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
  // part: the bytes of channel ch's chunks, which an eager part holds back
  // to back (only the op's last chunk is short, and it is its channel's last).
  __device__ u64 part(u32 ch, u32 channels, u64 bytes) const {
    const u32 m = of(ch, channels);
    return m == 0 ? 0 : (u64)(m - 1) * size + len(ch + (u64)(m - 1) * channels, bytes);
  }
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

// eager_src: source s's part of rank d's eager area (as mapped here).
__device__ __forceinline__ char* eager_src(const P2PParams& q, int d, int s) {
  const int n = q.p.nranks;
  return (char*)q.p.peerStaging[d] + q.p.reserved[5] + (u64)((s - d - 1 + n) % n) * kP2PEagerSrcBytes;
}
// mailbox: the entry of op k of channel ch from s in d's eager area.
__device__ __forceinline__ char* mailbox(const P2PParams& q, int d, int s, u32 ch, u32 k) {
  return eager_src(q, d, s) + ((u64)ch * kP2PEagerQ + k % kP2PEagerQ) * kP2PEagerEntry;
}
// eager_ring: a channel's ring bytes, the largest power of 2 within its
// share of kP2PEagerData (so that u32 ring positions wrap with the ring).
__device__ __forceinline__ u64 eager_ring(const P2PParams& q) {
  u64 e = kP2PEagerData / q.channels;
  while (e & (e - 1)) e &= e - 1;
  return e;
}
__device__ __forceinline__ char* eager_at(const P2PParams& q, int d, int s, u32 ch, u64 ring, u32 at) {
  return eager_src(q, d, s) + kP2PEagerMailboxes + ch * ring + (at & (ring - 1));
}
// An eager choice travels to the whole block as kEagerBit | at.
constexpr u64 kEagerBit = 1ull << 63;

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
  const P2PParams& q;
  const int peer;
  const u32 ch;
  const bool send;
  const u64 timeout;  // ns, 0: none
  const u32* abortp;
  char* mine;
  char* theirs;
  Verdict v;
  u32 ops, chunks;
  __device__ LaneSide(const P2PParams& qq, const P2PLane& lane, u32 c, int at, int* s_ok, u64* s_x)
      : q(qq),
        peer(lane.peer),
        ch(c),
        send(at == kRecSendOps),
        timeout((qq.p.reserved[4] >> kP2PTimeoutShift) * 1000000ull),
        abortp((const u32*)qq.p.abortFlag),
        mine(record(qq.p.signals, lane.peer, c)),
        theirs(record(qq.p.peerSignals[lane.peer], qq.p.rank, c)),
        v{s_ok, s_x, 0},
        ops(*(volatile u32*)word(mine, at)),
        chunks(*(volatile u32*)word(mine, at + 4)) {}
  // healthy (thread 0): the peer has not rejected an eager Send of this
  // rank (ebad); when it has, report it as this rank's Send error, with
  // this rank's count from the op's mailbox entry and the peer's from
  // the record, and abort.
  __device__ bool healthy() {
    const u32 bad = ld_volatile_sys(word(mine, kRecEBad));
    if (bad == 0) return true;
    const u64 sent = ld8(mailbox(q, peer, q.p.rank, ch, bad) + kMbBytes);
    report_error(q.p, kErrSendBytes, peer, sent, ld8(mine + kRecRBytes));
    return false;
  }
  // watch (thread 0): wait_flag that also ends when the peer rejected an
  // eager Send of this rank, so that no wait on a peer that stopped
  // there outlives the report, and past the timeout, timed by
  // %globaltimer from the wait's first look at the clock (after its first
  // 1024 polls, so that waits that end at once never read it), which it
  // reports as the op's (its number: ops) timeout.
  __device__ bool watch(const u32* flag, u32 want) {
    u64 t0 = 0;
    for (u32 spins = 0; (i32)(ld_acquire_sys(flag) - want) < 0;) {
      if ((++spins & 1023) != 0) continue;
      if (ld_volatile_sys(abortp) != 0 || !healthy()) return false;
      if (timeout == 0) continue;
      const u64 now = globaltimer();
      if (t0 == 0) {
        t0 = now;
      } else if (now - t0 > timeout) {
        report_error(q.p, send ? kErrSendTimeout : kErrRecvTimeout, peer, ops, now - t0);
        return false;
      }
    }
    return true;
  }
  __device__ bool wait(int off, u32 want) { return v.share(threadIdx.x != 0 || watch(word(mine, off), want)); }
  __device__ void save(int at) {
    if (threadIdx.x != 0) return;
    *(volatile u32*)word(mine, at) = ops;
    *(volatile u32*)word(mine, at + 4) = chunks;
  }
  // pipe moves this channel's chunks of op through its staging slots: the
  // sender's chunk n waits for consumed >= n + 1 - depth and goes from src
  // into slot n % depth, the receiver's waits for posted >= n + 1 and goes
  // from the slot into dst; each then posts n + 1 to the peer.
  __device__ bool pipe(const P2POp& op, const Chunks& c, u32 depth, bool send) {
    const Params& p = q.p;
    const u32 mineN = c.of(ch, q.channels);
    for (u32 k = 0; k < mineN; k++) {
      const u32 n = chunks + k;
      if (!wait(send ? kRecConsumed : kRecPosted, send ? n + 1 - depth : n + 1)) return false;
      const u64 g = ch + (u64)k * q.channels, at = g * c.size, len = c.len(g, op.bytes);
      if (send)
        copy1(p2p_slot(q, peer, p.rank, ch, depth, n % depth), (const char*)op.src + at, len);
      else
        copy1((char*)op.dst + at, p2p_slot(q, p.rank, peer, ch, depth, n % depth), len);
      bar_sync();
      if (threadIdx.x == 0) st_release_sys(word(theirs, send ? kRecPosted : kRecConsumed), n + 1);
    }
    chunks += mineN;
    return true;
  }
  // land is zero copy: the sender writes this channel's chunks of op
  // straight to dst and posts one chunk that uses no slot; the receiver
  // waits for it, then consumes it. A channel without chunks does neither.
  __device__ bool land(const P2POp& op, const Chunks& c, u64 dst, bool send) {
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
  // eager copies this channel's chunks of op between the user's buffer and
  // the ring at ring position `at` of the pair's ring in the receiver
  // (rank d's, from source s), back to back.
  __device__ void eager(const P2POp& op, const Chunks& c, u64 ring, u32 at, bool send) {
    const int s = send ? q.p.rank : peer, d = send ? peer : q.p.rank;
    char* r = eager_at(q, d, s, ch, ring, at);
    const u32 mineN = c.of(ch, q.channels);
    for (u32 k = 0; k < mineN; k++) {
      const u64 g = ch + (u64)k * q.channels, len = c.len(g, op.bytes);
      if (send)
        copy1(r + (u64)k * c.size, (const char*)op.src + g * c.size, len);
      else
        copy1((char*)op.dst + g * c.size, r + (u64)k * c.size, len);
    }
    bar_sync();
  }
};

// publish (thread 0 of a sender): op k's entry in the receiver's mailbox,
// the op number last.
__device__ __forceinline__ void publish(const LaneSide& L, u32 k, u64 bytes, u32 path, u32 at) {
  char* e = mailbox(L.q, L.peer, L.q.p.rank, L.ch, k);
  st8(e + kMbBytes, bytes);
  st4(e + kMbPath, path);
  st4(e + kMbAt, at);
  st_release_sys((u32*)(e + kMbOps), k);
}

// Each lane function returns false when the block stopped early (abort or
// mismatch); its counters are then left behind, as the communicator is done.
__device__ bool p2p_send(const P2PParams& q, const P2PLane& lane, u32 ch, u32 depth) {
  __shared__ int s_ok[2];
  __shared__ u64 s_x[2];
  LaneSide L(q, lane, ch, kRecSendOps, s_ok, s_x);
  const u64 ring = (q.p.reserved[4] & kP2PEagerOff) ? 0 : eager_ring(q);
  u32 head = *(volatile u32*)word(L.mine, kRecEHead);  // thread 0's: the ring position of the next eager part
  for (u32 o = 0; o < lane.n; o++) {
    const P2POp& op = q.ops[lane.first + o];
    const Chunks c(q, op.bytes);
    const u32 ops = ++L.ops;
    bool ok = true;
    u64 x = 0;  // the path: zero copy's destination, kEagerBit | at, or 0 for staging
    if (threadIdx.x == 0) {
      ok = L.healthy();
      u64 zc = 0;
      // A receiver already in this op that offered zero copy gets it:
      // nothing waits, and the data is copied once.
      if (ok && (i32)(ld_acquire_sys(word(L.mine, kRecRReady)) - ops) >= 0)
        zc = zc_dst(q, lane.peer, ld4(L.mine + kRecRTag), ld8(L.mine + kRecROff));
      const u64 need = round_up(c.part(ch, q.channels, op.bytes), 16);
      if (ok && zc == 0 && ring != 0 && need <= ring) {
        u32 at = head;
        const u64 off = at & (ring - 1);
        if (off + need > ring) at += (u32)(ring - off);  // a part never wraps
        // Credits only: the entry's slot read (op ops - kP2PEagerQ done),
        // and the ring freed up to where this part ends, one ring back,
        // or up to the head where that lies past it (a skipped end of the
        // ring is never written, so never freed).
        u32 upto = at + (u32)need - (u32)ring;
        if ((i32)(upto - head) > 0) upto = head;
        ok = L.watch(word(L.mine, kRecRReady), ops + 1 - kP2PEagerQ) && L.watch(word(L.mine, kRecEFreed), upto);
        head = at + (u32)need;
        x = kEagerBit | at;
      } else if (ok) {
        if (zc == 0) {
          ok = L.watch(word(L.mine, kRecRReady), ops);
          if (ok) zc = zc_dst(q, lane.peer, ld4(L.mine + kRecRTag), ld8(L.mine + kRecROff));
        }
        if (ok) {
          publish(L, ops, op.bytes, zc != 0 ? kPathZc : kPathStaging, 0);
          ok = p2p_agree(q.p, lane.peer, 0, op.bytes, ld8(L.mine + kRecRBytes));
        }
        x = zc;
      }
    }
    if (!L.v.share2(ok, x, &x)) return false;
    if (x & kEagerBit) {
      L.eager(op, c, ring, (u32)x, true);
      if (threadIdx.x == 0) publish(L, ops, op.bytes, kPathEager, (u32)x);
    } else if (!(x != 0 ? L.land(op, c, x, true) : L.pipe(op, c, depth, true))) {
      return false;
    }
  }
  // The staging is free again only when the receiver has read it all.
  if (!L.wait(kRecConsumed, L.chunks)) return false;
  L.save(kRecSendOps);
  if (threadIdx.x == 0) *(volatile u32*)word(L.mine, kRecEHead) = head;
  return true;
}

__device__ bool p2p_recv(const P2PParams& q, const P2PLane& lane, u32 ch, u32 depth) {
  __shared__ int s_ok[2];
  __shared__ u64 s_x[2];
  LaneSide L(q, lane, ch, kRecRecvOps, s_ok, s_x);
  const u64 ring = eager_ring(q);
  for (u32 o = 0; o < lane.n; o++) {
    const P2POp& op = q.ops[lane.first + o];
    const Chunks c(q, op.bytes);
    const u32 ops = ++L.ops;
    bool ok = true;
    u64 x = 0;  // the sender's path: 1 zero copy, kEagerBit | at, or 0 for staging
    if (threadIdx.x == 0) {
      ok = L.healthy();
      st8(L.theirs + kRecRBytes, op.bytes);
      st4(L.theirs + kRecRTag, (u32)(op.src >> kZcOffBits));
      st8(L.theirs + kRecROff, op.src & ((1ull << kZcOffBits) - 1));
      st_release_sys(word(L.theirs, kRecRReady), ops);
      const char* e = mailbox(q, q.p.rank, lane.peer, ch, ops);
      ok = ok && L.watch((const u32*)(e + kMbOps), ops);
      if (ok) {
        const u32 path = ld4(e + kMbPath);
        x = path == kPathEager ? kEagerBit | ld4(e + kMbAt) : path == kPathZc ? 1 : 0;
        *(volatile u32*)word(L.mine, kRecRPath) = path;
        ok = p2p_agree(q.p, lane.peer, 1, op.bytes, ld8(e + kMbBytes));
        // The eager sender is done: tell it through its record.
        if (!ok && path == kPathEager) st_release_sys(word(L.theirs, kRecEBad), ops);
      }
    }
    if (!L.v.share2(ok, x, &x)) return false;
    if (x & kEagerBit) {
      L.eager(op, c, ring, (u32)x, false);
      if (threadIdx.x == 0)
        st_release_sys(word(L.theirs, kRecEFreed), (u32)x + (u32)round_up(c.part(ch, q.channels, op.bytes), 16));
    } else if (!(x != 0 ? L.land(op, c, 0, false) : L.pipe(op, c, depth, false))) {
      return false;
    }
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
