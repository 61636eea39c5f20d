// emu_fused.cc: the fused group kernel (fused.cu) on the CPU. A scenario
// is a communicator and a sequence of steps; a step is a group of
// AllReduces of one type and op, each call with its count (0 included),
// its blocks (as collectives/gpu/tune.go's shape gives them: at least one
// per 4 KiB of data) and in or out of place, or a plain LL launch between
// groups. Each rank decides alone, per group, whether it runs the group as
// one fused launch (descriptors in its own memory, as the backend's
// host-mapped ring) or as one LL launch per call, as collectives/gpu/fuse.go
// lets a rank do, so that fused launches must meet separate ones. After
// each group a rank checks every call's result against the reference, its
// send buffers, the canaries around every buffer, the ticket the fused
// launch wrote before its descriptors and the launch's block counter
// (back to zero).
//
// Groups: fused2, fused3, fused4 (every type and op, batches of 1 to 64
// calls, ranks mixing fused and separate launches, plain LL launches in
// between, skew), fusedabort (a rank never launches its group; the abort
// flag must end the others' fused launches).
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu.h"
// fused.cu and alltoall.cu (and ll.cu inside them) are compiled here,
// their one translation unit in the emulator (emu_alltoall.cc runs the
// AllToAll).
#include "alltoall.cu"
#include "fused.cu"

namespace {

using goccl::Params;
using goccl::u32;
using goccl::u64;

constexpr uint64_t kSignalSize = 128 << 10;
constexpr uint8_t kCanary = 0x5a;
constexpr uint64_t kDescHead = 64;  // fuse.go's fuseSlotHead: the done word at kDescHead - kFuseDoneBack

#define EMU_FUSED_PTR(pfx, opname, tname, T) &goccl_fused_allreduce_ll_##tname##_##opname,
const KernelFn kFused[kNumOps][kNumDts] = {
    {GOCCL_TYPES(EMU_FUSED_PTR, , sum)}, {GOCCL_TYPES(EMU_FUSED_PTR, , prod)}, {GOCCL_TYPES(EMU_FUSED_PTR, , min)},
    {GOCCL_TYPES(EMU_FUSED_PTR, , max)}, {GOCCL_TYPES(EMU_FUSED_PTR, , avg)},
};
#undef EMU_FUSED_PTR

struct Call {
  uint64_t count;
  int blocks;
  bool inplace;
  uint64_t seed;
  uint64_t soff, roff;  // in the rank's data region (the same on every rank)
};

struct Step {
  int dt, op;
  std::vector<Call> calls;
  bool plain;                // one LL launch of calls[0], not a group
  uint32_t fuseMask;         // ranks that fuse the group
  int delayRank, delayUs;    // one rank starts late
};

struct Scenario {
  std::string name, group;
  int nranks, threads;
  std::vector<Step> steps;
  uint64_t dataBytes;
  int missing = -1;  // fusedabort: this rank never launches its group; it raises every abort flag
};

struct Rng {
  uint64_t s;
  uint64_t next() { return mix64(s++); }
  int below(int n) { return (int)(next() % (uint64_t)n); }
};

// blocks_for: the least blocks whose lines hold the call (4 KiB of data a
// block), or more, as the backend's llblock setting gives.
int blocks_for(uint64_t bytes, Rng& rng) {
  const int least = (int)((bytes + kEmuLLSlot / 2 - 1) / (kEmuLLSlot / 2));
  const int pick = 1 + rng.below(3);
  return pick > least ? pick : least;
}

// place lays the step's buffers out in the data region; returns its end.
uint64_t place(Step& st) {
  uint64_t at = 64;
  for (Call& c : st.calls) {
    const uint64_t b = c.count * kDtSize[st.dt];
    // Some buffers start off 16-byte boundaries (by whole elements).
    at = emu_round_up(at, 16) + 16 + (c.seed % 3 == 0 ? kDtSize[st.dt] : 0);
    c.soff = at;
    at += b;
    if (c.inplace) {
      c.roff = c.soff;
    } else {
      at = emu_round_up(at, 16) + 16;
      c.roff = at;
      at += b;
    }
  }
  return at + 64;
}

Step group_step(Rng& rng, int n, int ncalls, uint64_t maxCount) {
  Step st{};
  st.dt = rng.below(kNumDts);
  st.op = rng.below(kPreMulSum);  // PreMulSum never fuses (its scalar is per call)
  for (int i = 0; i < ncalls; i++) {
    Call c{};
    c.count = rng.below(6) == 0 ? 0 : 1 + (uint64_t)rng.below((int)maxCount);
    c.blocks = blocks_for(c.count * kDtSize[st.dt], rng);
    c.inplace = rng.below(3) == 0;
    c.seed = rng.next();
    st.calls.push_back(c);
  }
  st.fuseMask = (uint32_t)rng.next() & ((1u << n) - 1);
  if (rng.below(2)) st.fuseMask = (1u << n) - 1;
  st.delayRank = -1;
  if (rng.below(3) == 0) {
    st.delayRank = rng.below(n);
    st.delayUs = rng.below(3000);
  }
  return st;
}

Scenario make(const char* name, int n, int groups, uint64_t seed) {
  Scenario s{name, name, n, n > 3 ? 16 : 32, {}, 0};
  Rng rng{seed};
  for (int g = 0; g < groups; g++) {
    static const int kSizes[] = {1, 2, 3, 8, 17, 64};
    const int ncalls = g < 6 ? kSizes[g] : 1 + rng.below(64);
    // Mostly small calls; now and then one that spreads over many blocks.
    Step st = group_step(rng, n, ncalls, rng.below(4) == 0 ? 6000 : 700);
    s.steps.push_back(st);
    if (rng.below(3) == 0) {  // a plain LL launch between groups
      Step pl = group_step(rng, n, 1, 3000);
      pl.plain = true;
      s.steps.push_back(pl);
    }
  }
  uint64_t most = 0;
  for (Step& st : s.steps) {
    const uint64_t e = place(st);
    most = e > most ? e : most;
  }
  s.dataBytes = emu_round_up(most, 4096);
  return s;
}

std::vector<Scenario> scenarios(uint64_t seed) {
  std::vector<Scenario> v;
  v.push_back(make("fused2", 2, 14, seed + 31));
  v.push_back(make("fused3", 3, 10, seed + 32));
  v.push_back(make("fused4", 4, 8, seed + 33));
  // The first group: every rank that comes fuses, every call has data.
  Scenario ab = make("fusedabort", 3, 2, seed + 34);
  ab.missing = 0;
  Rng rng{seed + 35};
  ab.steps[0] = group_step(rng, 3, 8, 700);
  for (Call& c : ab.steps[0].calls) c.count += 1;
  ab.steps[0].fuseMask = 7;
  place(ab.steps[0]);
  v.push_back(ab);
  return v;
}

// ---- memory and running --------------------------------------------------------------

// Comm: one control page (abort flag), then per rank a workspace (signals,
// the LL lines), a descriptor block and a data region, each followed by an
// inaccessible page.
struct Comm {
  int n = 0;
  uint64_t wsBytes = 0, llOffset = 0, dataBytes = 0;
  char* base = nullptr;
  size_t size = 0;
  u32* abortFlag = nullptr;
  char* ws[goccl::kMaxRanks] = {};
  char* desc[goccl::kMaxRanks] = {};
  char* data[goccl::kMaxRanks] = {};
};

constexpr uint64_t kDescBytes = 4096;

bool comm_create(Comm& c, const Scenario& s) {
  const size_t pg = emu_page_size();
  c.n = s.nranks;
  c.llOffset = 0;  // no staging: LL lines only
  c.wsBytes = emu_round_up(kSignalSize + 2ull * c.n * kEmuLLMaxBlocks * kEmuLLSlot, pg);
  c.dataBytes = emu_round_up(s.dataBytes, pg);
  const std::vector<EmuRegion> regions = {
      {"workspace", c.wsBytes, c.ws},
      {"descriptors", emu_round_up(kDescBytes, pg), c.desc},
      {"data", c.dataBytes, c.data}};
  if (!(c.base = emu_map_ranks(c.n, regions, &c.size))) return false;
  c.abortFlag = (u32*)c.base;
  return true;
}

Params comm_params(const Comm& c, int me) {
  Params p{};
  p.abortFlag = (uint64_t)c.abortFlag;
  p.signals = (uint64_t)c.ws[me];
  for (int r = 0; r < c.n; r++) {
    p.peerSignals[r] = (uint64_t)c.ws[r];
    p.peerStaging[r] = (uint64_t)c.ws[r] + kSignalSize;
  }
  p.rank = me;
  p.nranks = c.n;
  p.llOffset = c.llOffset;
  return p;
}

void put(char* p, uint64_t idx, int es, uint64_t bits) { memcpy(p + idx * es, &bits, (size_t)es); }
uint64_t get(const char* p, uint64_t idx, int es) {
  uint64_t v = 0;
  memcpy(&v, p + idx * es, (size_t)es);
  return v;
}

// check_step compares every call's output with the reference, every send
// buffer with its input and every byte outside the buffers with the canary.
int check_step(const Comm& c, const Scenario& s, size_t si, const Step& st, int me) {
  int fails = 0;
  const int es = kDtSize[st.dt];
  std::vector<bool> live(c.dataBytes, false);
  for (size_t k = 0; k < st.calls.size(); k++) {
    const Call& cl = st.calls[k];
    const char* out = c.data[me] + cl.roff;
    const char* in = c.data[me] + cl.soff;
    uint64_t bad = 0, first = 0, got0 = 0, want0 = 0;
    for (uint64_t i = 0; i < cl.count; i++) {
      uint64_t v[goccl::kMaxRanks];
      for (int r = 0; r < s.nranks; r++) v[r] = gen_elem(st.dt, st.op, cl.seed, r, i);
      const Expect e = reference(st.dt, st.op, s.nranks, v);
      const uint64_t g = get(out, i, es);
      if (!matches(st.dt, e, g) && bad++ == 0) first = i, got0 = g, want0 = e.bits;
      if (!cl.inplace && get(in, i, es) != gen_elem(st.dt, st.op, cl.seed, me, i) && bad++ == 0)
        first = i, got0 = get(in, i, es), want0 = gen_elem(st.dt, st.op, cl.seed, me, i);
    }
    if (bad) {
      fails++;
      printf("FAIL %s step %zu call %zu: %s %s count=%llu blocks=%d %s rank=%d (%s): first wrong index %llu (%llu "
             "wrong): got %s, want %s\n",
             s.name.c_str(), si, k, kDtName[st.dt], kOpName[st.op], (unsigned long long)cl.count, cl.blocks,
             cl.inplace ? "in-place" : "out-of-place", me, (st.fuseMask >> me) & 1 ? "fused" : "separate",
             (unsigned long long)first, (unsigned long long)bad, describe(st.dt, got0).c_str(),
             describe(st.dt, want0).c_str());
    }
    for (uint64_t i = 0; i < cl.count * es; i++) live[cl.soff + i] = live[cl.roff + i] = true;
  }
  uint64_t nbad = 0, first = 0;
  for (uint64_t i = 0; i < c.dataBytes; i++)
    if (!live[i] && (uint8_t)c.data[me][i] != kCanary && nbad++ == 0) first = i;
  if (nbad) {
    fails++;
    printf("FAIL %s step %zu rank %d: %llu bytes outside the buffers written, the first at %llu\n", s.name.c_str(), si,
           me, (unsigned long long)nbad, (unsigned long long)first);
  }
  return fails;
}

int run_rank(const Comm& c, const Scenario& s, int me, const EmuOptions& o, size_t nsteps) {
  int fails = 0;
  u64 seq = 0;
  u32 ticket = 0;
  for (size_t si = 0; si < nsteps; si++) {
    const Step& st = s.steps[si];
    const int es = kDtSize[st.dt];
    if (o.inject == "hang" && me == 0 && si == 1) return fails ? kExitCheck : kExitOK;  // rank 0 goes missing
    memset(c.data[me], kCanary, c.dataBytes);
    for (const Call& cl : st.calls) {
      char* in = c.data[me] + cl.soff;
      if (!cl.inplace) memset(c.data[me] + cl.roff, st.dt >= kF16 ? 0xff : 0xa5, cl.count * es);  // poison (NaN in floats)
      for (uint64_t i = 0; i < cl.count; i++) put(in, i, es, gen_elem(st.dt, st.op, cl.seed, me, i));
    }
    if (me == s.missing && !st.plain) {
      usleep(300 * 1000);
      __atomic_store_n(c.abortFlag, 1u, __ATOMIC_SEQ_CST);
      return fails ? kExitCheck : kExitOK;
    }
    if (st.delayRank == me) usleep((useconds_t)st.delayUs);
    emu_set_dyn_smem(0);
    Params p = comm_params(c, me);
    char label[256];
    const bool fuse = !st.plain && ((st.fuseMask >> me) & 1);
    int rc = kExitOK;
    if (fuse) {
      // The descriptors of the calls with data, as fuse.go writes them.
      char* d = c.desc[me] + kDescHead;
      int n = 0, grid = 1;
      for (const Call& cl : st.calls) {
        seq++;
        if (cl.count == 0) continue;
        goccl::FusedDesc fd{(u64)(c.data[me] + cl.soff), (u64)(c.data[me] + cl.roff), seq, (u32)cl.count,
                            (u32)cl.blocks};
        memcpy(d + n * sizeof fd, &fd, sizeof fd);
        grid = cl.blocks > grid ? cl.blocks : grid;
        n++;
      }
      if (n > 0) {
        ticket++;
        p.reserved[2] = (u64)d;
        p.reserved[3] = (u64)n | (u64)ticket << 32;
        snprintf(label, sizeof label, "%s step %zu (fused %s %s, %d calls, grid %d) rank %d", s.name.c_str(), si,
                 kDtName[st.dt], kOpName[st.op], n, grid, me);
        rc = emu_launch(kFused[st.op][st.dt], p, grid, s.threads, o.timeout, label);
        if (rc == kExitOK && me != s.missing && s.missing < 0) {
          const u32 done = *(volatile u32*)(d - goccl::kFuseDoneBack);
          const u32 arrived = *(volatile u32*)(c.ws[me] + goccl::kFuseCountOffset);
          if (done != ticket || arrived != 0) {
            fails++;
            printf("FAIL %s step %zu rank %d: done word %u (want the ticket %u), block counter %u (want 0)\n",
                   s.name.c_str(), si, me, done, ticket, arrived);
          }
        }
      }
    } else {
      for (size_t k = 0; k < st.calls.size() && rc == kExitOK; k++) {
        const Call& cl = st.calls[k];
        seq++;
        if (cl.count == 0) continue;  // Run launches nothing for it
        p.send = (u64)(c.data[me] + cl.soff);
        p.recv = (u64)(c.data[me] + cl.roff);
        p.count = cl.count;
        p.seq = seq;
        snprintf(label, sizeof label, "%s step %zu call %zu (LL %s %s count=%llu grid %d) rank %d", s.name.c_str(), si,
                 k, kDtName[st.dt], kOpName[st.op], (unsigned long long)cl.count, cl.blocks, me);
        rc = emu_launch(kernel_for(kARL, st.dt, st.op), p, cl.blocks, s.threads, o.timeout, label);
      }
    }
    if (rc != kExitOK) {
      printf("EMU-FATAL %s step %zu rank %d: %s\n", s.name.c_str(), si, me,
             rc == kExitTimeout ? "timed out" : rc == kExitMisaligned ? "misaligned access" : "crashed");
      return rc;
    }
    if (s.missing >= 0 && !st.plain) {  // returned after the abort: results are undefined
      printf("aborted %s step %zu rank %d: returned\n", s.name.c_str(), si, me);
      return fails ? kExitCheck : kExitOK;
    }
    if (o.inject == "corrupt" && si == 0 && me == c.n - 1) {
      for (const Call& cl : st.calls)
        if (cl.count) {
          c.data[me][cl.roff] ^= 1;
          break;
        }
    }
    fails += check_step(c, s, si, st, me);
    fflush(stdout);
  }
  return fails ? kExitCheck : kExitOK;
}

void dump(const Comm& c) {
  printf("LL epochs of blocks 0..2 of every rank:\n");
  for (int r = 0; r < c.n; r++)
    printf("  rank %d: %u %u %u\n", r, *(volatile u32*)(c.ws[r] + kEmuLLEpochOffset),
           *(volatile u32*)(c.ws[r] + kEmuLLEpochOffset + 4), *(volatile u32*)(c.ws[r] + kEmuLLEpochOffset + 8));
}

bool run_scenario(const Scenario& s, const EmuOptions& o) {
  Comm c;
  if (!comm_create(c, s)) return false;
  const size_t n = o.limit >= 0 && (size_t)o.limit < s.steps.size() ? (size_t)o.limit : s.steps.size();
  const bool ok =
      emu_run_ranks(s.nranks, [&](int r) { return run_rank(c, s, r, o, n); }, [&] { dump(c); }, s.name, n, "steps");
  munmap(c.base, c.size);
  return ok;
}

}  // namespace

std::vector<std::string> fused_groups() { return {"fused2", "fused3", "fused4", "fusedabort"}; }

bool fused_run_group(const std::string& group, const EmuOptions& o) {
  bool ok = true;
  for (const Scenario& s : scenarios(o.seed))
    if (s.group == group) ok = run_scenario(s, o) && ok;
  return ok;
}
