// emu_ce.h: what the two halves of the copy-engine reductions' emulation
// share: the calls and scenarios and the memory (emu_ce.cc runs and checks
// them) and the model of the host's copy streams (emu_ce_streams.cc).
#pragma once

#include <string.h>
#include <sys/types.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "emu.h"

namespace emu_ce {

using goccl::kCESlots;
using goccl::Params;
using goccl::u32;

enum { kCeAR, kCeRS };
// A slow reader's kernel sleeps this long before one load in two.
constexpr int kSlowUs = 100;
// ready[src] and done[src] in the flag area (collectives/gpu/ce.go).
constexpr uint64_t kReadyOff = 0, kDoneOff = 128;
constexpr uint8_t kCanary = 0x5a;

struct Call {
  int kind, dt, op, es;
  uint64_t count;  // AllReduce: elements in all; ReduceScatter: per rank
  uint64_t chunk;  // elements per chunk (direct: the smallest chunk, the floor)
  u32 depth;       // staging slots per source (direct: 1, unused)
  bool inplace;
  bool direct;     // the peer's chunks land in the owner's recv (2 ranks, out of place)
  int grid, threads;
  uint64_t seed;
  int slowRank, delayUs;  // this rank's kernel (direct: the first chunk's) starts late, reads slowly (-1: none)
  int slowBlock;          // only this block of it reads slowly (-1: every block)
  int lazyRank;           // this rank's push stream dawdles between chunks (-1: none)
  int lazyLateUs;         // and starts this late
  uint64_t piece;         // elements of every piece but the last ones
  u32 chunks, seq;        // chunks per piece; chunk 0's flag value
};

struct CeScenario {
  std::string name, group;
  int n;
  u32 seq0;  // the first call's seq; every flag starts at seq0 - 1
  std::vector<Call> calls;
  long abortCall;  // rank 0's push stream sends nothing and raises the abort flag
};

inline uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
inline uint64_t round_up(uint64_t a, uint64_t b) { return ceil_div(a, b) * b; }

// piece_len is the elements of rank r's piece; piece_off where it starts
// in a send buffer.
inline uint64_t piece_len(const Call& c, int r) {
  if (c.kind == kCeRS) return c.count;
  const uint64_t lo = (uint64_t)r * c.piece;
  return lo >= c.count ? 0 : std::min(c.piece, c.count - lo);
}
inline uint64_t piece_off(const Call& c, int r) { return (uint64_t)r * c.piece; }
// next_len is the length of the chunk that starts where left elements of a
// piece are left: the chunk size, or in direct mode half of what is left in
// whole 16-byte vectors and at least the floor (collectives/gpu/cereduce.go's
// next; the host cuts the chunks, and each direct chunk's kernel is given
// that chunk alone).
inline uint64_t next_len(const Call& c, uint64_t left) {
  uint64_t n = c.chunk;
  if (c.direct) {
    const uint64_t vec = 16 / c.es, half = left / 2 / vec * vec;
    n = std::max(n, half);
  }
  return std::min(n, left);
}
// chunks_of is the chunks of a piece of len elements.
inline u32 chunks_of(const Call& c, uint64_t len) {
  if (!c.direct) return (u32)ceil_div(len, c.chunk);
  u32 k = 0;
  for (uint64_t lo = 0; lo < len; lo += next_len(c, len - lo)) k++;
  return k;
}
// chunk_len is the elements of chunk i of rank r's piece (0 past its end)
// and *lo, when given, where it starts in the piece.
inline uint64_t chunk_len(const Call& c, int r, uint64_t i, uint64_t* lo = nullptr) {
  const uint64_t len = piece_len(c, r);
  uint64_t at = 0, n = 0;
  if (!c.direct) {
    at = i * c.chunk;
    n = at >= len ? 0 : std::min(c.chunk, len - at);
  } else {
    for (uint64_t k = 0;; k++, at += n) {
      n = at < len ? next_len(c, len - at) : 0;
      if (k == i || n == 0) break;
    }
  }
  if (lo) *lo = at;
  return n;
}
// filled is the chunks of rank r's piece that hold data.
inline u32 filled(const Call& c, int r) { return chunks_of(c, piece_len(c, r)); }

struct Rng {
  uint64_t s;
  uint64_t next() { return mix64(s++); }
  int below(int n) { return (int)(next() % (uint64_t)n); }
};

// Mem is every rank's memory in one shared mapping: a control page (the
// abort flag, the count of kernels running, the calls each rank finished:
// kernel returned, streams joined; each rank's reduced event), then per
// rank its workspace (signal area, then staging that ends at an
// inaccessible page) and its send and receive regions, each followed by an
// inaccessible page.
struct Mem {
  int n = 0;
  char* base = nullptr;
  size_t size = 0;
  u32* abortFlag = nullptr;
  u32* running = nullptr;
  u32* finished = nullptr;  // [rank]: calls whose kernel returned and streams joined
  // reducedEvent[rank] stands for the host's ce.reduced event, recorded
  // on the land stream behind each direct chunk's kernel: seq + i once
  // chunk i's kernel has returned (a direct kernel publishes no flag). It
  // sits in the control page, where no kernel writes.
  u32* reducedEvent = nullptr;
  uint64_t sigBytes = 0, stgRegion = 0, regBytes = 0;
  char* ws[goccl::kMaxRanks] = {};
  char* stg[goccl::kMaxRanks] = {};
  char* sendReg[goccl::kMaxRanks] = {};
  char* recvReg[goccl::kMaxRanks] = {};
};

inline u32* flag(const Mem& m, int r, uint64_t off) { return (u32*)(m.ws[r] + goccl::kCEFlagOffset + off); }
inline u32* ready_f(const Mem& m, int r, int src) { return flag(m, r, kReadyOff + 4 * src); }
inline u32* done_f(const Mem& m, int r, int src) { return flag(m, r, kDoneOff + 4 * src); }
inline u32* data_f(const Mem& m, int r, int src) { return flag(m, r, goccl::kCEDataOff + 4 * src); }
inline u32* landed_f(const Mem& m, int r) { return flag(m, r, goccl::kCELandedOff); }
inline u32* reduced_f(const Mem& m, int r, u32 slot) { return flag(m, r, goccl::kCEReducedOff + 4 * slot); }
inline u32* free_f(const Mem& m, int r, int src, u32 slot) {
  return flag(m, r, goccl::kCEFreeOff + 4 * ((uint64_t)src * kCESlots + slot));
}
inline u32* counter(const Mem& m, int r, u32 slot) { return (u32*)(m.ws[r] + goccl::kCECountOffset + 4 * slot); }
inline u32* reduced_event(const Mem& m, int r) { return m.reducedEvent + r; }
inline u32 load(const u32* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void store(u32* p, u32 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// protocol_word: byte off of a signal area holds a flag (or counter) of a
// communicator of n ranks; every other byte must keep the canary.
bool protocol_word(uint64_t off, int n);
// mem_create maps the memory of scenario s, every flag at s.seq0 - 1.
bool mem_create(Mem& m, const CeScenario& s);

// Bufs: one rank's buffers for a call, each ending (rounded to 16 bytes) at
// an inaccessible page.
struct Bufs {
  char *send, *recv;
  uint64_t sendB, recvB;
  char* liveSend;  // the live span in the send region (null in place)
  char* liveRecv;  // and in the recv region
  uint64_t liveSendB, liveRecvB;
};

Bufs place(const Mem& m, const Call& c, int r);
// fill writes rank me's canaries, poison and inputs for call c.
void fill(const Mem& m, const Call& c, const Bufs& b, int me);
uint64_t get(const char* p, uint64_t i, int es);

// ---- the copy streams (emu_ce_streams.cc) ----

enum { kWaitOK, kWaitAborted, kWaitTimeout };

// wait_geq waits until *f >= want in the cyclic order, as a stream memory
// operation does; it gives up when the abort flag is raised (standing for
// Abort's rescue, which overwrites the flags) or after the timeout (having
// said what it waited for).
int wait_geq(const Mem& m, const u32* f, u32 want, int timeout_s, const char* who, const char* what);

// StreamCtx is one copy stream of rank me for call c.
struct StreamCtx {
  const Mem& m;
  const CeScenario& s;
  const Call& c;
  int me;
  const EmuOptions& o;
  std::string who;
  Rng rng;
  int wait(const u32* f, u32 want, const std::string& what) {
    return wait_geq(m, f, want, o.timeout, who.c_str(), what.c_str());
  }
};

// The streams of ceReduce (collectives/gpu/cereduce.go), each run as a
// process of its own; they return an exit code (kExitOK when aborted).
int push(StreamCtx& x);    // cePush
int land(StreamCtx& x);    // ceLand (direct: and launchChunk)
int spread(StreamCtx& x);  // ceSpread (AllReduce)
int mute(StreamCtx& x);    // the push stream of a rank that never sends

// ce_params are the kernel's parameters for rank me's whole piece of call
// c, as launchCEReduce gives the staged mode's one kernel on the user
// stream; direct_params narrow them to chunk i alone (lo, n elements into
// the piece), as launchChunk gives each direct chunk's kernel on the land
// stream.
Params ce_params(const Mem& m, const CeScenario& s, const Call& c, int me);
void direct_params(Params& p, const Mem& m, const Call& c, int me, u32 i, uint64_t lo, uint64_t n);

// reap waits for a process of emu_spawn's and returns its exit code
// (kExitOK, saying nothing, for one killed on purpose: the failure that
// led to it is reported; kExitOK for pid 0, none spawned).
int reap(pid_t pid, const std::string& who, bool killed = false);

}  // namespace emu_ce
