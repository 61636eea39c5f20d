// emu_ce.cc: the copy-engine reductions (cereduce.cu) on the CPU, fed by
// a model of the host's copy streams (emu_ce_streams.cc, after
// collectives/gpu/cereduce.go). Each rank is a driver process playing the
// user's stream: it fills its buffers, does the ready handshake (ready[me]
// = seq into every peer's flag area, then waits for the peers'), forks its
// push stream (its parts of the peers' pieces into their staging, then
// data[me] = seq + i), its land stream (once every peer's chunk i of its own
// piece arrived, landed = seq + i, which the kernel polls) and, for
// AllReduce, its spread stream (each reduced chunk into every peer's
// output, then done[me] = seq), launches the kernel's blocks (staged
// calls; direct ones: see below), joins the
// streams (ReduceScatter: then done[me] = seq into every peer's flag area),
// waits for the peers' done and checks: results
// against the reference, canaries, unchanged inputs, and the flag area
// (every flag exactly where the protocol leaves it, the kernel's counters
// back at 0, nothing else written). Flags are never reset: a call's flag
// values are seq .. seq+chunks-1 and the next call's seq is seq+chunks, as
// the host counts them, and scenarios start near 2^32 or 2^31 so that the
// cyclic compares wrap.
//
// Direct calls (2 ranks, out of place, cereduce.cu's kFlagCEDirect) have
// the peer's push stream copy straight into the owner's recv; nothing is
// staged (the kernel gets no staging pointers, so a stray access faults),
// chunks halve what is left of a piece down to the floor (the host cuts
// them), and no kernel runs on the user's stream: the land stream writes
// landed once for the call, then behind each chunk's waits launches the
// kernel for that chunk alone (its own grid of block processes; one after
// the other, in stream order), which reduces recv = send op recv in place
// and publishes nothing: no reduced, no counters, no free flags (the
// checks say so). The host orders the spread after the kernel by an event
// recorded behind it on the land stream; here the land stream records it
// in a word of the control page once the kernel has returned, which the
// spread stream waits on. A direct ReduceScatter has no done handshake at
// all.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "emu_ce.h"

namespace {

using namespace emu_ce;
using goccl::Params;

const char* const kCeName[2] = {"ce_allreduce", "ce_reducescatter"};

// ---- scenarios -------------------------------------------------------------------

// call makes a call of nranks n; chunkBytes is a multiple of 16.
Call call(int n, int kind, int dt, int op, uint64_t count, uint64_t chunkBytes, u32 depth, bool ip) {
  Call c{};
  c.kind = kind, c.dt = dt, c.op = op, c.es = kDtSize[dt], c.count = count, c.inplace = ip;
  c.chunk = chunkBytes / c.es;
  c.depth = depth;
  c.piece = kind == kCeAR ? round_up(ceil_div(count, n), 16 / c.es) : count;
  c.chunks = (u32)std::max<uint64_t>(1, ceil_div(c.piece, c.chunk));
  c.grid = 1, c.threads = 16, c.slowRank = -1, c.slowBlock = -1, c.lazyRank = -1;
  return c;
}

// direct_call makes a direct call of 2 ranks with a floor of floorBytes (a
// multiple of 16). Its chunks cover the longer of the two pieces' halvings:
// a shorter last piece can need more chunks than the first (at 31 f32 and
// a floor of 16 bytes, 4 for its 15 elements against 3 for the first
// piece's 16), as collectives/gpu/cereduce.go's planCEReduce counts them.
// hostChunks (-inject shortchunks) counts those of the first piece only.
// (The host also caps its floor at half a piece, so that a call cuts two
// chunks; a kernel sees only its chunk, so the floors here may be any.)
Call direct_call(int kind, int dt, int op, uint64_t count, uint64_t floorBytes, bool hostChunks) {
  Call c = call(2, kind, dt, op, count, floorBytes, 1, false);
  c.direct = true;
  c.chunks = chunks_of(c, c.piece);
  if (!hostChunks) c.chunks = std::max({c.chunks, filled(c, 0), filled(c, 1)});
  return c;
}

void randomize(Call& c, int n, Rng& rng) {
  c.grid = 1 + rng.below(3);
  c.threads = rng.below(4) == 0 ? 32 : 16;
  c.seed = rng.next();
  if (rng.below(4) == 0) c.slowRank = rng.below(n), c.delayUs = rng.below(3000);
  if (rng.below(4) == 0) c.lazyRank = rng.below(n);
}

// number assigns the calls' flag values, consecutive from seq0 as the
// host's counter hands them out (runCE: a reduction takes one per chunk).
void number(CeScenario& s) {
  u32 seq = s.seq0;
  for (Call& c : s.calls) {
    c.seq = seq;
    seq += c.chunks;
  }
}

// matrix: every type and op (the family alternating with shift), chunks of
// 16 to 64 bytes, depths 2 to 4, counts from 1 (AllReduce pieces of 0
// elements) to several chunks per piece, in and out of place, random grids,
// slow readers and lazy senders, one call of more than kCESlots chunks and
// one of depth kCESlots; call 0 has a slow reader at rank 1 (the nofreewait
// injection relies on it) whose push stream starts 20 ms late and dawdles.
// skew: a slow reader in every call.
CeScenario matrix(const char* name, int n, u32 seq0, int shift, bool skew, uint64_t seed) {
  CeScenario s{name, "", n, seq0, {}, -1};
  Rng rng{seed};
  Call first = call(n, kCeAR, kF32, kSum, (uint64_t)n * 48, 16, 2, false);
  randomize(first, n, rng);
  first.grid = 2, first.slowRank = 1, first.delayUs = 2000, first.lazyRank = 1, first.lazyLateUs = 20000;
  s.calls.push_back(first);
  for (int j = 0; j < kNumDts * kNumCEOps; j++) {
    const int dt = j % kNumDts, op = j / kNumDts, kind = (dt + op + shift) % 2, es = kDtSize[dt];
    const uint64_t chunkBytes = 16 * (1 + rng.below(4)), per = chunkBytes / es;
    uint64_t count;
    if (kind == kCeAR)
      count = rng.below(4) == 0 ? 1 + rng.below(n * 48 / es) : 1 + rng.below((int)(n * per * 7));  // (tiny: pieces of 0)
    else
      count = 1 + rng.below((int)(per * 7));
    Call c = call(n, kind, dt, op, count, chunkBytes, 2 + rng.below(3), rng.below(2));
    randomize(c, n, rng);
    s.calls.push_back(c);
  }
  // More chunks than flag slots: every slot used twice or more.
  const int dt = kU8 + 7 * shift % kNumDts, kind = shift % 2, es = kDtSize[dt];
  const uint64_t per = 16 / es, chunks = 65 + rng.below(76);
  Call big = call(n, kind, dt, rng.below(kNumCEOps), (kind == kCeAR ? n : 1) * per * chunks - rng.below((int)per), 16,
                  2 + rng.below(3), rng.below(2));
  randomize(big, n, rng);
  s.calls.insert(s.calls.begin() + 1 + rng.below(40), big);
  // Depth 64 and 65 chunks, the last piece one chunk shorter (the
  // AllReduce rounding): its chunk 64 carries no data, so nothing holds it
  // back, and block 1 of that rank starts late and reads slowly while block
  // 0 runs through every chunk. (Chunks of 32 bytes give block 1 a share;
  // the rounding can shorten a piece by 32 bytes only from 3 ranks on.)
  const int deepChunk = n >= 3 ? 32 : 16, x = n >= 3 ? 32 + rng.below(16 * n - 32) : 16 + rng.below(16);
  Call deep = call(n, kCeAR, kU8 + shift % 2 * (kI8 - kU8), rng.below(kNumCEOps), (uint64_t)n * deepChunk * 65 - x,
                   deepChunk, 64, rng.below(2));
  randomize(deep, n, rng);
  deep.grid = 2, deep.slowRank = n - 1, deep.slowBlock = 1, deep.delayUs = 50000;
  s.calls.insert(s.calls.begin() + 1 + rng.below(40), deep);
  if (skew)  // (call 0's slow reader stays rank 1; the deep call keeps its slow block)
    for (size_t i = 0; i < s.calls.size(); i++)
      if (s.calls[i].slowBlock < 0) s.calls[i].slowRank = (int)((i + 1) % n), s.calls[i].delayUs = 500 + rng.below(2000);
  number(s);
  return s;
}

// direct: 2 ranks, direct calls of every type, op and kind (floors of 16
// to 64 bytes; counts from tiny ones, whose AllReduce leaves rank 1 a
// piece of 0, to pieces of up to ten halving chunks; random grids, slow
// readers and lazy senders), a random staged call after about one in
// three, so that the flags carry over between the modes. Call 0 (AllReduce
// f32 sum, 7 chunks per piece) has a lazy sender at rank 1 whose push
// starts 20 ms late; call 1 is the
// 31-element case of direct_call (-inject shortchunks). skew: a slow
// reader in every call.
CeScenario direct(const char* name, u32 seq0, bool skew, bool hostChunks, uint64_t seed) {
  CeScenario s{name, "", 2, seq0, {}, -1};
  Rng rng{seed};
  Call first = direct_call(kCeAR, kF32, kSum, 400, 16, hostChunks);
  randomize(first, 2, rng);
  first.grid = 2, first.slowRank = -1, first.lazyRank = 1, first.lazyLateUs = 20000;
  s.calls.push_back(first);
  Call uneven = direct_call(kCeAR, kF32, kSum, 31, 16, hostChunks);
  randomize(uneven, 2, rng);
  s.calls.push_back(uneven);
  for (int j = 0; j < 2 * kNumDts * kNumCEOps; j++) {
    const int dt = j % kNumDts, op = j / kNumDts % kNumCEOps, kind = (j / (kNumDts * kNumCEOps) + dt + op) % 2;
    const uint64_t floorBytes = 16 * (1 + rng.below(4)), vec = 16 / kDtSize[dt], per = floorBytes / kDtSize[dt];
    uint64_t count;
    if (rng.below(4) == 0)  // tiny: one or two chunks; at AllReduce, nothing for rank 1
      count = 1 + rng.below((int)(kind == kCeAR ? vec : 2 * per));
    else
      count = 1 + rng.below((int)((kind == kCeAR ? 2 : 1) * per << rng.below(9)));
    Call c = direct_call(kind, dt, op, count, floorBytes, hostChunks);
    randomize(c, 2, rng);
    s.calls.push_back(c);
    if (rng.below(3) == 0) {
      const int sdt = rng.below(kNumDts), skind = rng.below(2), ses = kDtSize[sdt];
      const uint64_t chunkBytes = 16 * (1 + rng.below(4)), sper = chunkBytes / ses;
      Call st = call(2, skind, sdt, rng.below(kNumCEOps), 1 + rng.below((int)(sper * (skind == kCeAR ? 14 : 7))),
                     chunkBytes, 2 + rng.below(3), rng.below(2));
      randomize(st, 2, rng);
      s.calls.push_back(st);
    }
  }
  if (skew)
    for (size_t i = 1; i < s.calls.size(); i++)
      s.calls[i].slowRank = (int)(i % 2), s.calls[i].delayUs = 500 + rng.below(2000);
  number(s);
  return s;
}

std::vector<CeScenario> ce_scenarios(const EmuOptions& o) {
  const uint64_t seed = o.seed;
  std::vector<CeScenario> v;
  v.push_back(matrix("ce2", 2, 1, 0, false, seed + 21));
  v.push_back(matrix("ce3", 3, 0xfffffff0u, 1, false, seed + 22));
  v.push_back(matrix("ce4", 4, 0x7ffffff8u, 3, true, seed + 23));
  const bool hostChunks = o.inject == "shortchunks";
  v.push_back(direct("cedirect", 0xffffffe0u, false, hostChunks, seed + 25));
  v.push_back(direct("cedirectskew", 0x7fffffe0u, true, hostChunks, seed + 26));
  // abort: a checked call, then one whose push stream at rank 0 sends
  // nothing; every kernel must return once the abort flag is raised.
  Rng rng{seed + 24};
  for (int kind : {kCeAR, kCeRS}) {
    CeScenario s{std::string("ceabort-") + (kind == kCeAR ? "allreduce" : "reducescatter"), "ceabort", 3, 1, {}, 1};
    for (int i = 0; i < 2; i++) {
      Call c = call(3, kind, kF32, kSum, (kind == kCeAR ? 3 : 1) * 64, 32, 2, false);
      randomize(c, 3, rng);
      c.grid = 2, c.slowRank = -1, c.lazyRank = -1;
      s.calls.push_back(c);
    }
    number(s);
    v.push_back(s);
  }
  return v;
}

// ---- checks --------------------------------------------------------------------------

// Flags: what one rank's flags must hold after the calls so far. A call
// moves landed to seq + its piece's last chunk that holds data (none: it
// stays), slot k of reduced (its own piece) and of free[r] (r's piece) to
// seq + the last such chunk i with i % kCESlots == k: the kernel neither
// counts nor publishes the empty chunks past the end of a shorter piece,
// for which the copy streams hold nothing back; done to seq. A direct
// call moves landed to seq + its chunks - 1 (written once, before the
// first chunk, as it must pass every chunk's kernel), leaves reduced and
// free alone (its kernels publish nothing), and a direct ReduceScatter
// leaves done alone too; it moves the reduced event (not a flag: the land
// stream's, emu_ce.h) to seq + its piece's last chunk, as every chunk that
// holds data has its kernel.
struct Flags {
  u32 landed, event, done[goccl::kMaxRanks], reduced[kCESlots], freed[goccl::kMaxRanks][kCESlots];
  void init(u32 v) {
    landed = event = v;
    std::fill(std::begin(done), std::end(done), v);
    std::fill(std::begin(reduced), std::end(reduced), v);
    for (auto& f : freed) std::fill(std::begin(f), std::end(f), v);
  }
};

// advance moves slots to their values after call c, for rank q's piece.
void advance(const Call& c, int q, u32* slots) {
  for (u32 i = 0; i < filled(c, q); i++) slots[i % kCESlots] = c.seq + i;
}

std::string hex(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "0x%llx", (unsigned long long)v);
  return b;
}

struct Checker {
  const Mem& m;
  const CeScenario& s;
  const Call& c;
  size_t ci;
  int me;
  const EmuOptions& o;
  int fails = 0;

  void fail(const std::string& what, uint64_t idx, uint64_t nbad, const std::string& got, const std::string& want) {
    fails++;
    printf("FAIL %s call %zu: %s %s %s count=%llu %s=%llu depth=%u chunks=%u seq=0x%x nranks=%d grid=%d "
           "threads=%d %s rank=%d: %s: first wrong index %llu (%llu wrong): got %s, want %s\n",
           s.name.c_str(), ci, kCeName[c.kind], kDtName[c.dt], kOpName[c.op], (unsigned long long)c.count,
           c.direct ? "floor" : "chunk", (unsigned long long)c.chunk, c.depth, c.chunks, c.seq, s.n, c.grid,
           c.threads, c.direct ? "direct" : c.inplace ? "in-place" : "out-of-place", me, what.c_str(),
           (unsigned long long)idx, (unsigned long long)nbad, got.c_str(), want.c_str());
  }

  // region: every byte of reg outside [live, live+liveB) holds the canary.
  void region(const char* what, const char* reg, uint64_t regB, const char* live, uint64_t liveB) {
    uint64_t first = 0, nbad = 0;
    for (uint64_t i = 0; i < regB; i++) {
      if (live && reg + i >= live && reg + i < live + liveB) continue;
      if ((uint8_t)reg[i] != kCanary && nbad++ == 0) first = i;
    }
    if (nbad) fail(what, first, nbad, hex((uint8_t)reg[first]), hex(kCanary));
  }

  // reduced: out[i] = the reduction over ranks of input element off+i.
  void reduced(const char* out, uint64_t n, uint64_t off) {
    uint64_t first = 0, nbad = 0, in[goccl::kMaxRanks];
    std::string got, want;
    for (uint64_t i = 0; i < n; i++) {
      for (int r = 0; r < s.n; r++) in[r] = gen_elem(c.dt, c.op, c.seed, r, off + i);
      const Expect e = reference(c.dt, c.op, s.n, in);
      const uint64_t g = get(out, i, c.es);
      if (!matches(c.dt, e, g) && nbad++ == 0) first = i, got = describe(c.dt, g), want = describe(c.dt, e.bits);
    }
    if (nbad) fail("result", first, nbad, got, want);
  }

  // equal: elements [0,n) of p are this rank's inputs off..off+n.
  void equal(const char* what, const char* p, uint64_t n, uint64_t off) {
    uint64_t first = 0, nbad = 0, g0 = 0, w0 = 0;
    for (uint64_t i = 0; i < n; i++) {
      const uint64_t g = get(p, i, c.es), w = gen_elem(c.dt, c.op, c.seed, me, off + i);
      if (g != w && nbad++ == 0) first = i, g0 = g, w0 = w;
    }
    if (nbad) fail(what, first, nbad, hex(g0), hex(w0));
  }

  void flag_is(const std::string& what, const u32* f, u32 want) {
    const u32 v = load(f);
    if (v != want) fail(what, 0, 1, hex(v), hex(want));
  }

  // signals: the flag area holds what the protocol leaves there, the
  // kernel's counters are back at 0 and nothing else changed. Every
  // peer's call is over and none writes here again before this rank's next
  // ready, but for ready itself (not checked: a peer may be in the next
  // call).
  void signals(Flags& want) {
    const char* ws = m.ws[me];
    uint64_t first = 0, nbad = 0;
    for (uint64_t off = 0; off < m.sigBytes; off++)
      if (!protocol_word(off & ~3ull, s.n) && (uint8_t)ws[off] != kCanary && nbad++ == 0) first = off;
    if (nbad) fail("signal area written outside the flags (offset)", first, nbad, hex((uint8_t)ws[first]), hex(kCanary));
    if (c.direct) want.landed = c.seq + c.chunks - 1;  // (written once, for every chunk)
    else if (filled(c, me) > 0) want.landed = c.seq + filled(c, me) - 1;
    flag_is("landed", landed_f(m, me), want.landed);
    if (!c.direct) advance(c, me, want.reduced);  // (direct: the kernels publish nothing)
    if (c.direct && filled(c, me) > 0) want.event = c.seq + filled(c, me) - 1;
    flag_is("reduced event", reduced_event(m, me), want.event);
    for (u32 k = 0; k < kCESlots; k++) {
      const std::string sk = "[" + std::to_string(k) + "]";
      flag_is("counter" + sk, counter(m, me, k), 0);
      flag_is("reduced" + sk, reduced_f(m, me, k), want.reduced[k]);
    }
    for (int r = 0; r < s.n; r++) {
      if (r == me) continue;
      const std::string sr = "[" + std::to_string(r) + "]";
      flag_is("data" + sr, data_f(m, me, r), c.seq + c.chunks - 1);
      if (!(c.direct && c.kind == kCeRS)) want.done[r] = c.seq;  // (a direct ReduceScatter has no done)
      flag_is("done" + sr, done_f(m, me, r), want.done[r]);
      if (!c.direct) advance(c, r, want.freed[r]);  // (direct: the kernel frees nothing)
      for (u32 k = 0; k < kCESlots; k++)
        flag_is("free" + sr + "[" + std::to_string(k) + "]", free_f(m, me, r, k), want.freed[r][k]);
    }
  }
};

int check(const Mem& m, const CeScenario& s, size_t ci, const Bufs& b, int me, const EmuOptions& o, Flags& flags) {
  const Call& c = s.calls[ci];
  Checker k{m, s, c, ci, me, o};
  k.region("canary in the send region", m.sendReg[me], m.regBytes, b.liveSend, b.liveSendB);
  k.region("canary in the recv region", m.recvReg[me], m.regBytes, b.liveRecv, b.liveRecvB);
  if (c.kind == kCeAR) {
    k.reduced(b.recv, c.count, 0);
  } else {
    k.reduced(b.recv, c.count, (uint64_t)me * c.count);
    if (c.inplace)
      for (int r = 0; r < s.n; r++)
        if (r != me) k.equal("send changed outside this rank's piece", b.send + r * c.count * c.es, c.count, r * c.count);
  }
  if (!c.inplace) k.equal("send buffer changed", b.send, b.sendB / c.es, 0);
  k.signals(flags);
  return k.fails;
}

// ---- running ---------------------------------------------------------------------------

std::string label_of(const CeScenario& s, size_t ci, int me) {
  const Call& c = s.calls[ci];
  char b[320];
  snprintf(b, sizeof b,
           "%s call %zu (%s %s %s count=%llu %s=%llu depth=%u chunks=%u seq=0x%x grid=%d threads=%d %s) rank %d",
           s.name.c_str(), ci, kCeName[c.kind], kDtName[c.dt], kOpName[c.op], (unsigned long long)c.count,
           c.direct ? "floor" : "chunk", (unsigned long long)c.chunk, c.depth, c.chunks, c.seq, c.grid, c.threads,
           c.direct ? "direct" : c.inplace ? "in-place" : "out-of-place", me);
  return b;
}

int run_rank(const Mem& m, const CeScenario& s, int me, const EmuOptions& o, size_t ncalls) {
  int fails = 0;
  Flags flags;
  flags.init(s.seq0 - 1);
  for (size_t ci = 0; ci < ncalls; ci++) {
    const Call& c = s.calls[ci];
    const std::string label = label_of(s, ci, me);
    const Bufs b = place(m, c, me);
    fill(m, c, b, me);
    // The ready handshake: the peers' earlier work on this rank's staging
    // and output is over before anything of this call is sent.
    for (int r = 0; r < s.n; r++)
      if (r != me) store(ready_f(m, r, me), c.seq);
    for (int r = 0; r < s.n; r++)
      if (r != me && wait_geq(m, ready_f(m, me, r), c.seq, o.timeout, label.c_str(),
                              ("ready[" + std::to_string(r) + "]").c_str()) != kWaitOK)
        return kExitTimeout;
    const bool aborting = (long)ci == s.abortCall;
    StreamCtx px{m, s, c, me, o, label + " push stream", {c.seed ^ (0x100u + me)}};
    StreamCtx lx{m, s, c, me, o, label + " land stream", {c.seed ^ (0x300u + me)}};
    StreamCtx sx{m, s, c, me, o, label + " spread stream", {c.seed ^ (0x200u + me)}};
    const pid_t ps = emu_spawn([&] { return aborting && me == 0 ? mute(px) : push(px); });
    const pid_t ls = emu_spawn([&] { return land(lx); });
    const pid_t ss = c.kind == kCeAR ? emu_spawn([&] { return spread(sx); }) : 0;
    int rc = kExitOK;
    if (!c.direct) {  // (direct: the land stream launches a kernel per chunk)
      if (c.slowRank == me) usleep((useconds_t)c.delayUs);
      emu_set_slow(c.slowRank == me ? kSlowUs : 0, c.slowBlock, c.slowBlock >= 0 ? c.delayUs : 0);
      const Params p = ce_params(m, s, c, me);
      __atomic_add_fetch(m.running, 1u, __ATOMIC_SEQ_CST);
      rc = emu_launch(ce_kernel_for(c.dt, c.op), p, c.grid, c.threads, o.timeout, label.c_str());
      __atomic_sub_fetch(m.running, 1u, __ATOMIC_SEQ_CST);
      emu_set_slow(0);
    }
    const bool failed = rc != kExitOK;
    if (failed) {
      for (pid_t pid : {ps, ls, ss})
        if (pid > 0) kill(pid, SIGKILL);
    }
    const int prc = reap(ps, label + " push stream", failed), lrc = reap(ls, label + " land stream", failed);
    // A land stream that failed (a direct chunk's kernel hung or crashed)
    // leaves the spread stream waiting for reductions that never come.
    const bool landFailed = !failed && lrc != kExitOK && ss > 0;
    if (landFailed) kill(ss, SIGKILL);
    const int src = reap(ss, label + " spread stream", failed || landFailed);
    const int worst = std::max({rc, prc, lrc, src});
    if (worst >= kExitTimeout) {
      printf("EMU-FATAL %s: %s\n", label.c_str(),
             rc == kExitTimeout             ? "the kernel timed out"
             : rc != kExitOK                ? "the kernel crashed or misaligned"
             : c.direct && lrc != kExitOK ? "the land stream or a chunk's kernel failed"
                                            : "a copy stream failed");
      return worst;
    }
    if (worst == kExitCheck) fails++;
    store(m.finished + me, (u32)ci + 1);
    if (aborting) {  // results are undefined; every kernel returned
      printf("aborted %s: returned\n", label.c_str());
      return fails ? kExitCheck : kExitOK;
    }
    // ReduceScatter: this rank's kernel is over, so its staging is free
    // (the host's user stream writes done[me] after the kernel). A direct
    // ReduceScatter stages nothing and has no done handshake at all.
    const bool handshake = !(c.direct && c.kind == kCeRS);
    if (c.kind != kCeAR && handshake)
      for (int r = 0; r < s.n; r++)
        if (r != me) store(done_f(m, r, me), c.seq);
    // AllReduce: the peers' copies into this rank's output landed;
    // ReduceScatter: the peers are done with their staging.
    for (int r = 0; r < s.n && handshake; r++)
      if (r != me && wait_geq(m, done_f(m, me, r), c.seq, o.timeout, label.c_str(),
                              ("done[" + std::to_string(r) + "]").c_str()) != kWaitOK)
        return kExitTimeout;
    if (o.inject == "corrupt" && ci == 0 && me == s.n - 1) b.recv[0] ^= 1;
    // The peers' kernels and streams are over: their flags here are final
    // (a peer's data flags for the chunks past the end of this rank's piece
    // may come after its done and its kernel's end).
    for (int r = 0; r < s.n; r++)
      if (r != me && wait_geq(m, m.finished + r, (u32)ci + 1, o.timeout, label.c_str(),
                              ("rank " + std::to_string(r) + "'s call").c_str()) != kWaitOK)
        return kExitTimeout;
    fails += check(m, s, ci, b, me, o, flags);
    fflush(stdout);
  }
  return fails ? kExitCheck : kExitOK;
}

// dump prints every rank's flags after a hang or crash.
void dump(const Mem& m) {
  printf("copy-engine flags of every rank (data[src]; landed; reduced, counters of slots 0..3; free[src][0..1]; "
         "the reduced event):\n");
  for (int r = 0; r < m.n; r++) {
    std::string line = "  rank " + std::to_string(r) + ": data";
    for (int q = 0; q < m.n; q++) line += " " + hex(load(data_f(m, r, q)));
    line += "; landed " + hex(load(landed_f(m, r))) + "; reduced";
    for (u32 k = 0; k < 4; k++) line += " " + hex(load(reduced_f(m, r, k)));
    line += "; counters";
    for (u32 k = 0; k < 4; k++) line += " " + std::to_string(load(counter(m, r, k)));
    line += "; free";
    for (int q = 0; q < m.n; q++) line += " " + hex(load(free_f(m, r, q, 0))) + "," + hex(load(free_f(m, r, q, 1)));
    line += "; event " + hex(load(reduced_event(m, r)));
    printf("%s\n", line.c_str());
  }
}

bool run_scenario(const CeScenario& s, const EmuOptions& o) {
  Mem m;
  if (!mem_create(m, s)) return false;
  const size_t nc = o.limit >= 0 && (size_t)o.limit < s.calls.size() ? (size_t)o.limit : s.calls.size();
  const bool ok =
      emu_run_ranks(s.n, [&](int r) { return run_rank(m, s, r, o, nc); }, [&] { dump(m); }, s.name, nc, "calls");
  munmap(m.base, m.size);
  return ok;
}

}  // namespace

std::vector<std::string> ce_groups() {
  std::vector<std::string> g;
  for (const CeScenario& s : ce_scenarios(EmuOptions{})) {
    const std::string name = s.group.empty() ? s.name : s.group;
    if (std::find(g.begin(), g.end(), name) == g.end()) g.push_back(name);
  }
  return g;
}

bool ce_run_group(const std::string& group, const EmuOptions& o) {
  bool ok = true;
  for (const CeScenario& s : ce_scenarios(o))
    if ((s.group.empty() ? s.name : s.group) == group) ok = run_scenario(s, o) && ok;
  return ok;
}
