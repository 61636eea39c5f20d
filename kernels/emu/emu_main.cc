// emu_main.cc: the CPU emulator of goccl's kernels. It runs scenarios: a
// communicator (nranks, slot sizes) and a sequence of kernel launches that
// every rank runs in order. Each rank is a driver process that launches and
// then checks its own results against an independent reference, without
// synchronizing with the other ranks between launches, so that state
// carried across launches (Ctx epochs, LL epochs, staging and line halves) is
// exercised as on a GPU stream.
//
// Scenarios: matrix1..4 (every family, type, op, counts 1..4099, in and out
// of place, roots 0 and nranks-1, random grids and block sizes), mixed3/4/6/8
// (random sequences with random skew between ranks), skew4 (each rank in
// turn starts late and reads slowly, so the others finish a launch as soon
// as its data lands and run into the next one while it still reads), wide3
// (the widest grid), abort (every family returns when a rank is missing
// and the abort flag is raised), selftest (the emulated 16-bit float
// conversions). Besides each result, a rank checks that its send buffer is
// unchanged, that nothing outside its buffers was written (canaries), and
// buffers end at an inaccessible page.
//
// The point-to-point kernel (p2p.cu) has its scenarios in emu_p2p.cc
// (p2p2, p2pring, p2pall, p2pabort, p2pmismatch; its header says what each
// covers), and so has callskip: ranks that meet in calls of different
// numbers, which every staged kernel and LL must report (every launch here
// carries its call number too, so that no scenario may report one falsely).
//
// The fused group kernel (fused.cu) has its scenarios in emu_fused.cc
// (fused2, fused3, fused4, fusedabort): groups of AllReduces that some
// ranks run as one fused launch and others as one LL launch per call; the
// one-shot AllToAll (alltoall.cu) in emu_alltoall.cc (a2a2, a2a3, a2a8,
// a2aabort).
//
// The copy-engine reductions (cereduce.cu, run by emu_ce.cc and fed by the
// push, land and spread streams that emu_ce_streams.cc models after
// collectives/gpu/cereduce.go) have scenarios of their own: ce2, ce3, ce4
// (every type and op, AllReduce and ReduceScatter, chunks of 16 to 64
// bytes, depths 2 to 4 and 64, calls of more than 64 chunks, AllReduce pieces of
// different lengths and 0, in and out of place, slow readers, a slow
// block, lazy senders; flag values start at 1, near 2^32 and near 2^31,
// and carry over from call to call; every flag is checked after each call),
// cedirect and cedirectskew (2 ranks: direct calls, whose chunks land in
// the owner's recv and halve down to a floor of 16 to 64 bytes, each
// reduced by a kernel of its own that the land stream launches behind the
// chunk's waits, of every type, op and kind, mixed with staged calls) and
// ceabort (a rank that never sends; every kernel blocks, and the abort
// flag must end them all).
//
// Build (kernels/emu_test.go does this in TestKernelsOnCPU), from kernels/:
//   (p2p.cu is compiled inside emu/emu_p2p.cc, fused.cu, alltoall.cu and ll.cu inside emu/emu_fused.cc)
//   mkdir -p /tmp/emu && for f in allreduce.cu reduce.cu bcast_gather.cu cereduce.cu emu/*.cc; do
//     g++ -std=c++17 -O0 -DGOCCL_EMU -pthread -I. -include emu/cuda_emu.h -x c++ -c $f -o /tmp/emu/${f#*/}.o
//   done && g++ -pthread -o /tmp/emu/emu /tmp/emu/*.o
//
//   emu -list                     scenario names, one a line
//   emu [-run a,b] [-timeout s] [-seed n] [-limit n] [-nojitter] [-inject fault]
//
// -inject breaks one thing on purpose: nostamp gives rank 1's launch 1 no
// timestamp slot (the check of the stored timestamps must notice), corrupt flips a bit of a result
// (p2pcorrupt: of rank 1's first received buffer, p2p scenarios), p2pzcnomap
// gives rank 0 no zero-copy table (p2pzc: its Sends take staging where the
// path check wants zero copy and the staging must stay untouched),
// p2pnoeager makes every Send a rendezvous (kP2PEagerOff: p2peager's
// split scenarios, each rank's Sends before its Recvs, must deadlock),
// hang makes rank 0 skip a launch, nofreewait makes rank 0's copy stream
// reuse staging slots without waiting for the reader to free them (ce
// scenarios; call 0 has a slow reader, so its results come out wrong),
// nolandwait makes rank 0's land stream say every chunk landed without
// waiting for the peers' data flags (ce and cedirect scenarios: the peers
// hold each chunk back until rank 0's kernel, in cedirect each chunk's
// kernel the land stream launches at once, has reduced it without its
// data), earlydata makes rank 0's push stream write a direct chunk's
// data flag before its copy, which lands only after rank 1's kernel for
// the chunk has run (cedirect: rank 1's chunk kernels reduce chunks that
// have not arrived), shortchunks gives a
// direct AllReduce only the chunks of its first piece rather than the most
// of any piece's, which collectives/gpu/cereduce.go's planCEReduce takes
// (cedirect call 1: the shorter last piece needs one more, never sent nor
// launched).
//
// Output: "PASS name: ..." per scenario, "FAIL ..." lines naming the launch,
// family, type, op, count, nranks, grid, rank and first wrong index, and
// "EMU-TIMEOUT"/"EMU-CRASH"/"EMU-MISALIGNED" for a block that hung or
// faulted (followed by a dump of every rank's epochs).
// Exit status 0 when every scenario passed.
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "emu.h"

namespace {

using goccl::Params;
using goccl::u32;

constexpr uint64_t kSignalSize = 128 << 10;  // per rank, before staging
constexpr int kDumpBlocks = 3;
// The LL epochs share the signal area with the barrier's slots and epochs.
static_assert(goccl::kEpochOffset + 4 * goccl::kMaxBlocks <= kEmuLLEpochOffset, "LL epochs overlap the barrier's");
static_assert(kEmuLLEpochOffset + 4 * goccl::kMaxBlocks <= kSignalSize, "LL epochs outside the signal area");

struct Launch {
  int fam, dt, op;  // dt, op: reductions only
  int es;           // bytes per element
  uint64_t count;
  int root;
  bool inplace;
  int grid, threads;
  uint64_t seed;
  int delayRank, delayUs;  // one rank starts late (delayRank -1: none)
  bool delaySlow;          // and then reads slowly (emu_set_slow)
  unsigned smem;           // dynamic shared memory bytes (the one-shot AllReduce's stash)
  unsigned share;          // Params.shareBytes: blocks' shares cut to multiples of this
};

struct Scenario {
  std::string name;
  int nranks;
  uint64_t slotBytes;
  std::vector<Launch> launches;
  std::string group;  // what -run and -list name (the name when empty)
  long abortAt = -1;  // launch that rank 0 skips, raising the abort flag instead
  // Staging slots per (half, source), Params.blockSlots: the grid the
  // layout is for. More than finish()'s grids of 1-3 blocks, so that a
  // launch narrower than its layout is the rule.
  int slots = 4;
};

using Options = EmuOptions;


struct Rng {
  uint64_t s;
  uint64_t next() { return mix64(s++); }
  int below(int n) { return (int)(next() % (uint64_t)n); }
};

// ---- scenarios ---------------------------------------------------------------

void sizes(const Launch& l, int n, uint64_t* sendB, uint64_t* recvB) {
  const uint64_t b = l.count * l.es;
  *sendB = l.fam == kRS1 ? n * b : b;
  *recvB = l.fam == kAG1 ? n * b : b;
}

// finish fills a launch's random parts: grid, threads, skew.
void finish(Launch& l, const Scenario& s, Rng& rng) {
  l.grid = 1 + rng.below(3);
  if (l.fam == kARL) {  // the LL lines hold kEmuLLSlot/2 bytes of data per block
    const int least = (int)((l.count * l.es + kEmuLLSlot / 2 - 1) / (kEmuLLSlot / 2));
    l.grid = l.grid > least ? l.grid : least;
  }
  static const int kThreadChoices[] = {16, 16, 16, 32};
  l.threads = s.nranks > 4 ? 16 : kThreadChoices[rng.below(4)];
  l.seed = rng.next();
  // Shares on 16-byte boundaries (the default) or on wider ones.
  static const unsigned kShareChoices[] = {16, 16, 32, 128};
  l.share = kShareChoices[rng.below(4)];
  // The one-shot AllReduce keeps a round in dynamic shared memory where it
  // fits: none, room for every round, or a random size that some rounds
  // (a short last chunk) fit and others do not.
  l.smem = 0;
  if (l.fam == kAR1) {
    const int pick = rng.below(3);
    l.smem = pick == 0 ? 0 : pick == 1 ? (unsigned)s.slotBytes : 16 * (1 + rng.below((int)(s.slotBytes / 16)));
  }
  l.delayRank = -1;
  l.delayUs = 0;
  if (rng.below(4) == 0) {
    l.delayRank = rng.below(s.nranks);
    l.delayUs = rng.below(3000);
  }
}

Launch reduction(int fam, int dt, int op, uint64_t count, int root, bool inplace) {
  Launch l{};
  l.fam = fam, l.dt = dt, l.op = op, l.es = kDtSize[dt], l.count = count, l.root = root, l.inplace = inplace;
  return l;
}
Launch copy(int fam, int es, uint64_t count, int root, bool inplace) {
  Launch l{};
  l.fam = fam, l.dt = -1, l.op = -1, l.es = es, l.count = count, l.root = root, l.inplace = inplace;
  return l;
}

const uint64_t kCounts[] = {1, 7, 33, 1000, 4099};

// matrix: every family, every type (six main ones at every count, the rest
// at two), every op, in and out of place, roots 0 and nranks-1.
Scenario matrix(const char* name, int n, uint64_t slot, uint64_t seed) {
  Scenario s{name, n, slot, {}, "", -1};
  Rng rng{seed};
  const int mainDts[] = {kF32, kI32, kBF16, kF64, kU8, kI64};
  const int extraDts[] = {kI8, kU32, kU64, kF16, kF8E4M3, kF8E5M2};
  for (int fam = kAR1; fam <= kRS1; fam++) {
    for (int ti = 0; ti < 12; ti++) {
      const bool main = ti < 6;
      const int dt = main ? mainDts[ti] : extraDts[ti - 6];
      for (int ci = 0; ci < 5; ci++) {
        if (!main && ci != 1 && ci != 3) continue;
        for (int ip = 0; ip < 2; ip++) {
          const int op = (ti + ci + 2 * ip + fam) % kNumOps;
          const int root = (ci + ip) % 2 ? n - 1 : 0;
          s.launches.push_back(reduction(fam, dt, op, kCounts[ci], root, ip));
        }
      }
    }
  }
  for (int fam = kBC1; fam <= kAG1; fam++)
    for (int es = 1; es <= 8; es *= 2)
      for (int ci = 0; ci < 5; ci++)
        for (int ip = 0; ip < 2; ip++) s.launches.push_back(copy(fam, es, kCounts[ci], (es + ci + ip) % 2 ? n - 1 : 0, ip));
  for (Launch& l : s.launches) finish(l, s, rng);
  return s;
}

// mixed: a random sequence of every kind of launch, many with skew between ranks.
Scenario mixed(const char* name, int n, uint64_t slot, int count, uint64_t seed) {
  Scenario s{name, n, slot, {}, "", -1};
  Rng rng{seed};
  for (int i = 0; i < count; i++) {
    const int fam = rng.below(kNumFamilies);
    const uint64_t cnt = rng.below(3) == 0 ? 1 + rng.below(6000) : kCounts[rng.below(5)];
    const bool ip = rng.below(2);
    const int root = rng.below(n);
    Launch l = family_reduces(fam) ? reduction(fam, rng.below(kNumDts), rng.below(kNumOps), cnt, root, ip)
                                   : copy(fam, 1 << rng.below(4), cnt, root, ip);
    finish(l, s, rng);
    if (rng.below(2) == 0) {
      l.delayRank = rng.below(n);
      l.delayUs = rng.below(4000);
    }
    s.launches.push_back(l);
  }
  return s;
}

// skew: every kind of launch, each with one rank (in turn) starting late
// and reading slowly. The others finish a launch as soon as its data lands
// and run into the next one, writing the other staging or LL half of the
// slow rank while it still reads the current one; LL launches come back to
// back so that their line halves alternate under that overlap. (An LL
// kernel that always used one half hung here on each of 10 seeds tried.)
Scenario skew(const char* name, int n, uint64_t seed) {
  Scenario s{name, n, 1024, {}, "", -1};
  Rng rng{seed};
  for (int round = 0; round < 3; round++)
    for (int fam = 0; fam < kNumFamilies; fam++)
      for (int i = 0; i < (fam == kARL ? 4 : 1); i++) {
        const uint64_t cnt = 1 + rng.below(fam == kARL ? 2000 : 1500);
        const int root = rng.below(n);
        const bool ip = rng.below(2);
        s.launches.push_back(family_reduces(fam)
                                 ? reduction(fam, rng.below(kNumDts), rng.below(kNumOps), cnt, root, ip)
                                 : copy(fam, 1 << rng.below(4), cnt, root, ip));
      }
  for (size_t i = 0; i < s.launches.size(); i++) {
    Launch& l = s.launches[i];
    finish(l, s, rng);
    l.delayRank = (int)(i % n);
    l.delayUs = 1000 + rng.below(3000);
    l.delaySlow = true;
  }
  return s;
}

// wide: every family once on a wide grid at 3 ranks, one that fills a
// layout of 132 slots (the H200's SMs; not a power of two), with a count
// that gives every block the same share, so that the last blocks' staging
// slots, LL lines and epochs are used too (and would overlap another
// source's if a layout stride were short).
Scenario wide(const char* name, uint64_t seed) {
  Scenario s{name, 3, 512, {}, "", -1};
  s.slots = 132;
  Rng rng{seed};
  const uint64_t cnt = (uint64_t)s.slots * 24;
  for (int fam = 0; fam < kNumFamilies; fam++) {
    Launch l = family_reduces(fam) ? reduction(fam, kF32, kSum, cnt, 1, false) : copy(fam, 4, cnt, 1, false);
    finish(l, s, rng);
    l.grid = fam == kARL ? (int)kEmuLLMaxBlocks : s.slots;  // (the LL lines have their own, fixed layout)
    l.share = 16;
    l.threads = 16;
    l.delayRank = -1;
    s.launches.push_back(l);
  }
  return s;
}

// pairs: the two-rank reductions' unrolled loops (four vectors a thread at
// a time; 16-bit float sums added packed, common.cuh's Pair), in rounds
// that fill an 8 KiB slot: every type and op, every reducing family, in and
// out of place.
Scenario pairs(const char* name, uint64_t seed) {
  Scenario s{name, 2, 8192, {}, "", -1};
  Rng rng{seed};
  for (int fam : {kAR1, kAR2, kRED, kRS1})
    for (int dt = 0; dt < kNumDts; dt++)
      for (int op = 0; op < kNumOps; op++) {
        const uint64_t cnt = (3 * s.slotBytes + 48 * (uint64_t)rng.below(8)) / kDtSize[dt] + (uint64_t)rng.below(5);
        Launch l = reduction(fam, dt, op, cnt, rng.below(2), rng.below(2));
        finish(l, s, rng);
        s.launches.push_back(l);
      }
  return s;
}

std::vector<Scenario> scenarios(uint64_t seed) {
  std::vector<Scenario> v;
  v.push_back(matrix("matrix1", 1, 1024, seed + 1));
  v.push_back(matrix("matrix2", 2, 4096, seed + 2));
  v.push_back(matrix("matrix3", 3, 1024, seed + 3));
  v.push_back(matrix("matrix4", 4, 512, seed + 4));
  v.push_back(mixed("mixed3", 3, 2048, 40, seed + 5));
  v.push_back(mixed("mixed4", 4, 1024, 40, seed + 6));
  v.push_back(mixed("mixed6", 6, 512, 24, seed + 10));
  v.push_back(mixed("mixed8", 8, 1024, 24, seed + 7));
  v.push_back(skew("skew4", 4, seed + 9));
  v.push_back(wide("wide3", seed + 11));
  v.push_back(pairs("pairs2", seed + 12));
  // abort: for each family, one checked launch, then one that rank 0 never
  // starts; it raises the abort flag instead, and every other rank's kernel
  // must return rather than hang.
  Rng rng{seed + 8};
  for (int fam = 0; fam < kNumFamilies; fam++) {
    Scenario s{std::string("abort-") + kFamilyName[fam], 3, 1024, {}, "abort", 1};
    for (int i = 0; i < 2; i++) {
      Launch l = family_reduces(fam) ? reduction(fam, kF32, kSum, 4099, 1 + i, false) : copy(fam, 4, 4099, 1 + i, false);
      finish(l, s, rng);
      if (fam != kARL) l.grid = 2;  // (the LL kernel needs its grid)
      l.delayRank = -1;
      s.launches.push_back(l);
    }
    v.push_back(s);
  }
  return v;
}

// ---- the communicator's memory -------------------------------------------------

// Comm is every rank's device memory in one shared mapping, with an
// inaccessible page after each workspace and buffer region.
struct Comm {
  int n = 0;
  uint64_t slot = 0, wsBytes = 0, regBytes = 0, llOffset = 0;
  int slots = 0;  // staging slots per (half, source)
  char* base = nullptr;
  size_t size = 0;
  u32* abortFlag = nullptr;
  char* ws[goccl::kMaxRanks] = {};
  char* sendReg[goccl::kMaxRanks] = {};
  char* recvReg[goccl::kMaxRanks] = {};
};

bool comm_create(Comm& c, const Scenario& s) {
  const size_t pg = emu_page_size();
  c.n = s.nranks;
  c.slot = s.slotBytes;
  c.slots = s.slots;
  // The layout of collectives/gpu: signals, staging halves, then LL lines.
  const uint64_t staging = 2ull * c.n * c.slots * c.slot;
  const uint64_t lines = 2ull * c.n * kEmuLLMaxBlocks * kEmuLLSlot;
  c.llOffset = staging;
  c.wsBytes = emu_round_up(kSignalSize + staging + lines, pg);
  uint64_t maxB = 0;
  for (const Launch& l : s.launches) {
    uint64_t a, b;
    sizes(l, c.n, &a, &b);
    maxB = a > maxB ? a : maxB;
    maxB = b > maxB ? b : maxB;
  }
  c.regBytes = emu_round_up(maxB + 256, pg);
  const std::vector<EmuRegion> regions = {
      {"workspace", c.wsBytes, c.ws},
      {"send region", c.regBytes, c.sendReg},
      {"recv region", c.regBytes, c.recvReg}};
  if (!(c.base = emu_map_ranks(c.n, regions, &c.size))) return false;
  c.abortFlag = (u32*)c.base;
  return true;
}

// Bufs: one rank's buffers for one launch, placed so that each buffer's
// 16-byte-rounded end touches an inaccessible page.
struct Bufs {
  char *send, *recv;
  uint64_t sendB, recvB;
  char* liveSend;  // live span in the send region (null in place)
  char* liveRecv;  // live span in the recv region
  uint64_t liveSendB, liveRecvB;
};

Bufs place(const Comm& c, const Launch& l, int me) {
  Bufs b{};
  sizes(l, c.n, &b.sendB, &b.recvB);
  auto at_end = [&](char* reg, uint64_t bytes) { return reg + c.regBytes - emu_round_up(bytes, 16); };
  const uint64_t one = l.count * l.es;
  if (!l.inplace) {
    b.send = b.liveSend = at_end(c.sendReg[me], b.sendB);
    b.recv = b.liveRecv = at_end(c.recvReg[me], b.recvB);
    b.liveSendB = b.sendB;
    b.liveRecvB = b.recvB;
  } else if (l.fam == kRS1) {
    b.send = b.liveRecv = at_end(c.recvReg[me], b.sendB);
    b.recv = b.send + me * one;
    b.liveRecvB = b.sendB;
  } else if (l.fam == kAG1) {
    b.recv = b.liveRecv = at_end(c.recvReg[me], b.recvB);
    b.send = b.recv + me * one;
    b.liveRecvB = b.recvB;
  } else {
    b.send = b.recv = b.liveRecv = at_end(c.recvReg[me], b.recvB);
    b.liveRecvB = b.recvB;
  }
  return b;
}

constexpr uint8_t kCanary = 0x5a;

uint8_t poison_byte(const Launch& l) {
  if (family_reduces(l.fam) && l.dt >= kF16) return 0xff;  // NaN in every float type
  return (uint8_t)(0x80 | ((l.seed >> 8) & 0x7f));
}

void put(char* p, uint64_t idx, int es, uint64_t bits) { memcpy(p + idx * es, &bits, (size_t)es); }
uint64_t get(const char* p, uint64_t idx, int es) {
  uint64_t v = 0;
  memcpy(&v, p + idx * es, (size_t)es);
  return v;
}

// input of rank r: element idx (reductions) or byte idx (copies).
uint64_t input(const Launch& l, int r, uint64_t idx) {
  return family_reduces(l.fam) ? gen_elem(l.dt, l.op, l.seed, r, idx) : gen_byte(l.seed, r, idx);
}
// unit: what input() indexes: an element (reductions) or a byte (copies).
int unit(const Launch& l) { return family_reduces(l.fam) ? l.es : 1; }

void fill(const Comm& c, const Launch& l, const Bufs& b, int me) {
  memset(c.sendReg[me], kCanary, c.regBytes);
  memset(c.recvReg[me], kCanary, c.regBytes);
  const int u = unit(l);
  const uint8_t poison = poison_byte(l);
  if (!l.inplace) memset(b.recv, poison, b.recvB);
  if (l.inplace && l.fam == kAG1) memset(b.recv, poison, b.recvB);
  if (l.inplace && l.fam == kBC1 && me != l.root) {
    memset(b.recv, poison, b.recvB);
    return;
  }
  for (uint64_t i = 0; i < b.sendB / u; i++) put(b.send, i, u, input(l, me, i));
}

// ---- checks ------------------------------------------------------------------------

struct Checker {
  const Scenario& s;
  const Launch& l;
  size_t li;
  int me;
  int fails = 0;

  void fail(const char* what, uint64_t idx, uint64_t nbad, const std::string& got, const std::string& want) {
    fails++;
    char op[32] = "", dt[32] = "";
    if (family_reduces(l.fam)) {
      snprintf(dt, sizeof dt, " %s", kDtName[l.dt]);
      snprintf(op, sizeof op, " %s", kOpName[l.op]);
    } else {
      snprintf(dt, sizeof dt, " elem%d", l.es);
    }
    printf("FAIL %s launch %zu: %s%s%s count=%llu nranks=%d grid=%d threads=%d smem=%u root=%d %s rank=%d: "
           "%s: first wrong index %llu (%llu wrong): got %s, want %s\n",
           s.name.c_str(), li, kFamilyName[l.fam], dt, op, (unsigned long long)l.count, s.nranks, l.grid, l.threads,
           l.smem, l.root, l.inplace ? "in-place" : "out-of-place", me, what, (unsigned long long)idx,
           (unsigned long long)nbad, got.c_str(), want.c_str());
  }

  static std::string hex(uint64_t v) {
    char b[32];
    snprintf(b, sizeof b, "0x%llx", (unsigned long long)v);
    return b;
  }

  // region: every byte of reg outside [live, live+liveB) still holds the canary.
  void region(const char* what, const char* reg, uint64_t regB, const char* live, uint64_t liveB) {
    uint64_t first = 0, nbad = 0;
    for (uint64_t i = 0; i < regB; i++) {
      const char* p = reg + i;
      if (live && p >= live && p < live + liveB) continue;
      if ((uint8_t)*p != kCanary && nbad++ == 0) first = i;
    }
    if (nbad) {
      const int64_t off = (int64_t)(reg + first - (live ? live : reg));
      fail(what, (uint64_t)off, nbad, hex((uint8_t)reg[first]) + " (offset from buffer start " + std::to_string(off) + ")",
           hex(kCanary));
    }
  }

  // reduced: out[i] = reduction over ranks of input element off+i.
  void reduced(const char* out, uint64_t off) {
    uint64_t first = 0, nbad = 0;
    std::string got, want;
    uint64_t in[goccl::kMaxRanks];
    for (uint64_t i = 0; i < l.count; i++) {
      for (int r = 0; r < s.nranks; r++) in[r] = gen_elem(l.dt, l.op, l.seed, r, off + i);
      const Expect e = reference(l.dt, l.op, s.nranks, in);
      const uint64_t g = get(out, i, l.es);
      if (!matches(l.dt, e, g) && nbad++ == 0) {
        first = i;
        got = describe(l.dt, g);
        want = describe(l.dt, e.bits);
        if (!e.exact) {
          char ref[96];
          snprintf(ref, sizeof ref, " (double reference %.9g +- %.3g)", e.value, e.tol);
          want += ref;
        }
      }
    }
    if (nbad) fail("result", first, nbad, got, want);
  }

  // equal: units [0,n) of p equal rank r's input units off..off+n.
  void equal(const char* what, const char* p, uint64_t n, int r, uint64_t off) {
    const int u = unit(l);
    uint64_t first = 0, nbad = 0, g0 = 0, w0 = 0;
    for (uint64_t i = 0; i < n; i++) {
      const uint64_t g = get(p, i, u), w = input(l, r, off + i);
      if (g != w && nbad++ == 0) first = i, g0 = g, w0 = w;
    }
    if (nbad) fail(what, first, nbad, hex(g0), hex(w0));
  }

  void untouched(const char* what, const char* p, uint64_t bytes, uint8_t poison) {
    uint64_t first = 0, nbad = 0;
    for (uint64_t i = 0; i < bytes; i++)
      if ((uint8_t)p[i] != poison && nbad++ == 0) first = i;
    if (nbad) fail(what, first, nbad, hex((uint8_t)p[first]), hex(poison));
  }
};

int check(const Comm& c, const Scenario& s, size_t li, const Launch& l, const Bufs& b, int me) {
  Checker k{s, l, li, me};
  k.region("canary in the send region", c.sendReg[me], c.regBytes, b.liveSend, b.liveSendB);
  k.region("canary in the recv region", c.recvReg[me], c.regBytes, b.liveRecv, b.liveRecvB);
  const uint64_t one = l.count * l.es;
  const int n = s.nranks;
  switch (l.fam) {
    case kAR1:
    case kAR2:
    case kARL:
      k.reduced(b.recv, 0);
      break;
    case kRED:
      if (me == l.root)
        k.reduced(b.recv, 0);
      else if (l.inplace)
        k.equal("non-root buffer changed", b.recv, l.count, me, 0);
      else
        k.untouched("non-root recv written", b.recv, b.recvB, poison_byte(l));
      break;
    case kRS1:
      k.reduced(b.recv, me * l.count);
      if (l.inplace)
        for (int s2 = 0; s2 < n; s2++)
          if (s2 != me) k.equal("send changed outside this rank's slot", b.send + s2 * one, l.count, me, s2 * l.count);
      break;
    case kBC1:
      k.equal("broadcast result", b.recv, one, l.root, 0);
      break;
    case kAG1:
      for (int s2 = 0; s2 < n; s2++) k.equal("allgather result", b.recv + s2 * one, one, s2, 0);
      break;
  }
  if (!l.inplace) k.equal("send buffer changed", b.send, b.sendB / unit(l), me, 0);
  return k.fails;
}

// ---- running -----------------------------------------------------------------------

void label_of(char* buf, size_t n, const Scenario& s, size_t li, const Launch& l, int me) {
  char what[64];
  if (family_reduces(l.fam))
    snprintf(what, sizeof what, "%s %s %s", kFamilyName[l.fam], kDtName[l.dt], kOpName[l.op]);
  else
    snprintf(what, sizeof what, "%s elem%d", kFamilyName[l.fam], l.es);
  snprintf(buf, n, "%s launch %zu (%s count=%llu grid=%d threads=%d smem=%u share=%u root=%d %s) rank %d",
           s.name.c_str(), li, what, (unsigned long long)l.count, l.grid, l.threads, l.smem, l.share, l.root,
           l.inplace ? "in-place" : "out-of-place", me);
}

// check_stamp checks the timestamps a launch stored (common.cuh's
// stamp_begin and stamp_end: every launch of these scenarios is timed):
// its number last, start and end within the launch's wall-clock span, and
// the blocks-done counter back at zero for the next launch.
int check_stamp(const Comm& c, const goccl::Stamp* st, uint64_t seq, uint64_t t0, uint64_t t1, int me, const char* label) {
  const uint64_t got = __atomic_load_n(&st->seq, __ATOMIC_ACQUIRE);
  const uint64_t start = st->start, end = st->end;
  const u32 left = *(volatile u32*)(c.ws[me] + goccl::kStampCountOffset);
  if (got == seq && t0 <= start && start <= end && end <= t1 && left == 0) return 0;
  printf("FAIL %s: timestamps: seq %llu (want %llu), start %+lld ns and end %+lld ns from the launch's start (span %llu ns), %u blocks left counted\n",
         label, (unsigned long long)got, (unsigned long long)seq, (long long)(start - t0), (long long)(end - t0),
         (unsigned long long)(t1 - t0), left);
  return 1;
}

int run_rank(const Comm& c, const Scenario& s, int me, const Options& o, size_t nl) {
  int fails = 0;
  // Where the launches store their timestamps: shared with the block
  // processes, as host-mapped memory is with the GPU.
  goccl::Stamp* stamp = (goccl::Stamp*)emu_map_shared(emu_page_size());
  if (stamp == nullptr) return kExitCrash;
  for (size_t li = 0; li < nl; li++) {
    if (o.inject == "hang" && me == 0 && li == 1) return fails ? kExitCheck : kExitOK;  // rank 0 goes missing
    if ((long)li == s.abortAt && me == 0) {
      usleep(300 * 1000);
      __atomic_store_n(c.abortFlag, 1u, __ATOMIC_SEQ_CST);
      return fails ? kExitCheck : kExitOK;
    }
    const Launch& l = s.launches[li];
    const Bufs b = place(c, l, me);
    fill(c, l, b, me);
    Params p{};
    p.send = (uint64_t)b.send;
    p.recv = (uint64_t)b.recv;
    p.count = l.count;
    p.abortFlag = (uint64_t)c.abortFlag;
    p.signals = (uint64_t)c.ws[me];
    for (int r = 0; r < c.n; r++) {
      p.peerSignals[r] = (uint64_t)c.ws[r];
      p.peerStaging[r] = (uint64_t)c.ws[r] + kSignalSize;
    }
    p.slotBytes = c.slot;
    p.blockSlots = (u32)c.slots;
    p.shareBytes = l.share;
    p.rank = me;
    p.nranks = c.n;
    p.root = l.root;
    p.flags = 0;
    // PreMulSum: this rank's scalar by value, or (odd launches) by address.
    static uint64_t scalarCell;
    if (family_reduces(l.fam) && l.op == kPreMulSum) {
      scalarCell = premul_scalar_bits(l.dt, me);
      p.reserved[1] = scalarCell;
      if (li % 2) {
        p.reserved[1] = (uint64_t)&scalarCell;
        p.flags |= goccl::kFlagScalarDevice;
      }
    }
    p.elemSize = (u32)l.es;
    p.llOffset = c.llOffset;
    p.seq = li + 1;  // every launch checks the peers' call numbers (common.cuh)
    p.reserved[0] = o.inject == "nostamp" && me == 1 && li == 1 ? 0 : (uint64_t)stamp;
    if (l.delayRank == me) usleep((useconds_t)l.delayUs);
    emu_set_slow(l.delayRank == me && l.delaySlow ? 100 : 0);
    emu_set_dyn_smem(l.smem);
    char label[320];
    label_of(label, sizeof label, s, li, l, me);
    const uint64_t t0 = goccl::globaltimer();
    const int rc = emu_launch(kernel_for(l.fam, l.dt, l.op), p, l.grid, l.threads, o.timeout, label);
    const uint64_t t1 = goccl::globaltimer();
    if (rc != kExitOK) {
      printf("EMU-FATAL %s: %s\n", label,
             rc == kExitTimeout ? "timed out" : rc == kExitMisaligned ? "misaligned access" : "crashed");
      return rc;
    }
    if ((long)li == s.abortAt) {  // returned after the abort: results are undefined
      printf("aborted %s: returned\n", label);
      return fails ? kExitCheck : kExitOK;
    }
    if (o.inject == "corrupt" && li == 0 && me == c.n - 1) b.recv[0] ^= 1;  // one ulp or one unit: the checker must notice
    fails += check(c, s, li, l, b, me);
    fails += check_stamp(c, stamp, p.seq, t0, t1, me, label);
    fflush(stdout);
  }
  return fails ? kExitCheck : kExitOK;
}

// dump prints every rank's per-block epochs (barrier and LL) of the first blocks.
void dump(const Comm& c) {
  printf("state of every rank (per-block epochs of blocks 0..%d):\n", kDumpBlocks - 1);
  for (int r = 0; r < c.n; r++) {
    std::string line = "  rank " + std::to_string(r) + ":";
    for (int b = 0; b < kDumpBlocks; b++) {
      const u32 e = *(volatile u32*)(c.ws[r] + goccl::kEpochOffset + 4 * b);
      const u32 ll = *(volatile u32*)(c.ws[r] + kEmuLLEpochOffset + 4 * b);
      line += " epoch[" + std::to_string(b) + "]=" + std::to_string(e);
      if (ll) line += " llEpoch[" + std::to_string(b) + "]=" + std::to_string(ll);
    }
    printf("%s\n", line.c_str());
  }
}

bool run_scenario(const Scenario& s, const Options& o) {
  Comm c;
  if (!comm_create(c, s)) return false;
  const size_t nl = o.limit >= 0 && (size_t)o.limit < s.launches.size() ? (size_t)o.limit : s.launches.size();
  const bool ok = emu_run_ranks(s.nranks, [&](int r) { return run_rank(c, s, r, o, nl); }, [&] { dump(c); }, s.name,
                                nl, "launches");
  munmap(c.base, c.size);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string run;
  bool list = false;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "emu: %s needs a value\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "-list")
      list = true;
    else if (a == "-run")
      run = "," + val() + ",";
    else if (a == "-timeout")
      o.timeout = atoi(val().c_str());
    else if (a == "-seed")
      o.seed = strtoull(val().c_str(), nullptr, 0);
    else if (a == "-limit")
      o.limit = atol(val().c_str());
    else if (a == "-inject")
      o.inject = val();
    else if (a == "-nojitter")
      emu_set_jitter(false);
    else {
      fprintf(stderr, "emu: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (o.inject != "" && std::find(injections().begin(), injections().end(), o.inject) == injections().end()) {
    std::string all;
    for (const std::string& i : injections()) all += " " + i;
    fprintf(stderr, "emu: -inject takes one of%s, not %s\n", all.c_str(), o.inject.c_str());
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::vector<Scenario> all = scenarios(o.seed);
  bool ok = true;
  int ran = 0;
  std::string listed = ",";
  for (const Scenario& s : all) {
    const std::string group = s.group.empty() ? s.name : s.group;
    if (list) {
      if (listed.find("," + group + ",") == std::string::npos) printf("%s\n", group.c_str());
      listed += group + ",";
      continue;
    }
    if (!run.empty() && run.find("," + group + ",") == std::string::npos) continue;
    ran++;
    ok = run_scenario(s, o) && ok;
  }
  for (const std::string& group : p2p_groups()) {
    if (list) {
      printf("%s\n", group.c_str());
      continue;
    }
    if (!run.empty() && run.find("," + group + ",") == std::string::npos) continue;
    ran++;
    ok = p2p_run_group(group, o) && ok;
  }
  for (const std::string& group : fused_groups()) {
    if (list) {
      printf("%s\n", group.c_str());
      continue;
    }
    if (!run.empty() && run.find("," + group + ",") == std::string::npos) continue;
    ran++;
    ok = fused_run_group(group, o) && ok;
  }
  for (const std::string& group : a2a_groups()) {
    if (list) {
      printf("%s\n", group.c_str());
      continue;
    }
    if (!run.empty() && run.find("," + group + ",") == std::string::npos) continue;
    ran++;
    ok = a2a_run_group(group, o) && ok;
  }
  for (const std::string& group : ce_groups()) {
    if (list) {
      printf("%s\n", group.c_str());
      continue;
    }
    if (!run.empty() && run.find("," + group + ",") == std::string::npos) continue;
    ran++;
    ok = ce_run_group(group, o) && ok;
  }
  if (list) printf("selftest\n");
  if (!list && (run.empty() || run.find(",selftest,") != std::string::npos)) {
    ran++;
    ok = selftest() && ok;
  }
  if (!list && ran == 0) {
    fprintf(stderr, "emu: no scenario matches %s\n", run.c_str());
    return 2;
  }
  return ok ? 0 : 1;
}
