// emu_alltoall.cc: the one-shot AllToAll (alltoall.cu, compiled inside
// emu_fused.cc with ll.cu, whose lines and epochs it shares) on the CPU.
// A scenario is a communicator and a sequence of launches: AllToAlls of
// random sizes per peer (1 byte to 20 KB, odd ones too, buffers off 8-byte
// boundaries, in and out of place, the grid collectives/gpu/alltoall.go
// gives) with LL AllReduces between them, so that both kernels' use of the
// lines and epochs is checked, and skew. After each launch a rank checks
// every chunk it received, its send buffer and the canaries around both.
//
// Groups: a2a2, a2a3, a2a8 (2, 3 and 8 ranks), a2aabort (a rank never
// launches; the abort flag must end the others' waits).
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu.h"

extern "C" void goccl_alltoall_ll(goccl::Params);

namespace {

using goccl::Params;
using goccl::u32;
using goccl::u64;

constexpr uint64_t kSignalSize = 128 << 10;
constexpr uint8_t kCanary = 0x5a, kPoison = 0xc3;

struct Launch {
  bool a2a;        // else an LL AllReduce of f32 sums
  uint64_t bytes;  // per peer (a2a) or the AllReduce's
  bool inplace;
  int shift;  // bytes past a 16-byte boundary (a2a)
  int grid;
  uint64_t seed;
  int delayRank, delayUs;
};

struct Scenario {
  std::string name;
  int nranks, threads;
  std::vector<Launch> launches;
  int missing = -1;  // a2aabort: this rank never launches its AllToAll; it raises the abort flag
};

struct Rng {
  uint64_t s;
  uint64_t next() { return mix64(s++); }
  int below(int n) { return (int)(next() % (uint64_t)n); }
};

// grid_for is collectives/gpu's LL shape: a block per 2 KiB, 1 to 128.
int grid_for(uint64_t bytes) {
  const uint64_t g = (bytes + 2047) / 2048;
  return (int)(g < 1 ? 1 : g > kEmuLLMaxBlocks ? kEmuLLMaxBlocks : g);
}

Scenario make(const char* name, int n, int count, uint64_t seed) {
  Scenario s{name, n, n > 4 ? 16 : 32, {}};
  Rng rng{seed};
  for (int i = 0; i < count; i++) {
    Launch l{};
    l.a2a = rng.below(4) != 0;
    const int pick = rng.below(4);
    l.bytes = pick == 0 ? 1 + rng.below(16) : pick == 1 ? 8 * (1 + rng.below(300)) : 1 + rng.below(n > 4 ? 6000 : 20000);
    if (!l.a2a) l.bytes = 4 * (1 + rng.below(3000));
    l.inplace = rng.below(3) == 0;
    l.shift = rng.below(3) == 0 ? rng.below(16) : 0;
    l.grid = grid_for(l.bytes);
    l.seed = rng.next();
    l.delayRank = rng.below(3) == 0 ? rng.below(n) : -1;
    l.delayUs = rng.below(3000);
    s.launches.push_back(l);
  }
  return s;
}

std::vector<Scenario> scenarios(uint64_t seed) {
  std::vector<Scenario> v;
  v.push_back(make("a2a2", 2, 30, seed + 41));
  v.push_back(make("a2a3", 3, 24, seed + 42));
  v.push_back(make("a2a8", 8, 12, seed + 43));
  Scenario ab = make("a2aabort", 3, 1, seed + 44);
  ab.launches[0].a2a = true;
  ab.launches[0].bytes = 9000;
  ab.launches[0].grid = grid_for(9000);
  ab.launches[0].delayRank = -1;
  ab.missing = 0;
  v.push_back(ab);
  return v;
}

size_t first_a2a(const Scenario& s) {
  size_t i = 0;
  while (i < s.launches.size() && !s.launches[i].a2a) i++;
  return i;
}

struct Comm {
  int n = 0;
  uint64_t wsBytes = 0, regBytes = 0;
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
  c.wsBytes = emu_round_up(kSignalSize + 2ull * c.n * kEmuLLMaxBlocks * kEmuLLSlot, pg);
  uint64_t most = 0;
  for (const Launch& l : s.launches) most = std::max(most, (l.a2a ? c.n : 1) * l.bytes + 64);
  c.regBytes = emu_round_up(most, pg);
  const std::vector<EmuRegion> regions = {
      {"workspace", c.wsBytes, c.ws},
      {"send region", c.regBytes, c.sendReg},
      {"recv region", c.regBytes, c.recvReg}};
  if (!(c.base = emu_map_ranks(c.n, regions, &c.size))) return false;
  c.abortFlag = (u32*)c.base;
  return true;
}

// in_byte is rank r's send byte i (an AllToAll's chunk p is i / bytes).
uint8_t in_byte(const Launch& l, int r, uint64_t i) { return gen_byte(l.seed, r, i); }

int check_a2a(const Comm& c, const Scenario& s, size_t li, const Launch& l, int me, const char* send, const char* recv) {
  int fails = 0;
  const uint64_t total = c.n * l.bytes;
  for (int src = 0; src < c.n; src++) {
    uint64_t bad = 0, first = 0;
    for (uint64_t i = 0; i < l.bytes; i++)
      if ((uint8_t)recv[src * l.bytes + i] != in_byte(l, src, me * l.bytes + i) && bad++ == 0) first = i;
    if (bad) {
      fails++;
      printf("FAIL %s launch %zu: alltoall bytes=%llu grid=%d %s shift=%d rank=%d: chunk from rank %d: first wrong "
             "byte %llu (%llu wrong): got 0x%02x, want 0x%02x\n",
             s.name.c_str(), li, (unsigned long long)l.bytes, l.grid, l.inplace ? "in-place" : "out-of-place", l.shift,
             me, src, (unsigned long long)first, (unsigned long long)bad, (uint8_t)recv[src * l.bytes + first],
             in_byte(l, src, me * l.bytes + first));
    }
  }
  if (!l.inplace)
    for (uint64_t i = 0; i < total; i++)
      if ((uint8_t)send[i] != in_byte(l, me, i)) {
        fails++;
        printf("FAIL %s launch %zu rank %d: send byte %llu changed\n", s.name.c_str(), li, me, (unsigned long long)i);
        break;
      }
  // Canaries: everything in the regions outside the live buffers.
  auto canary = [&](const char* reg, const char* live, uint64_t n, const char* what) {
    for (uint64_t i = 0; i < c.regBytes; i++) {
      const char* p = reg + i;
      if (live && p >= live && p < live + n) continue;
      if ((uint8_t)*p != kCanary) {
        fails++;
        printf("FAIL %s launch %zu rank %d: %s byte %llu outside the buffer written\n", s.name.c_str(), li, me, what,
               (unsigned long long)i);
        return;
      }
    }
  };
  canary(c.recvReg[me], recv, total, "recv region");
  canary(c.sendReg[me], l.inplace ? nullptr : send, total, "send region");
  return fails;
}

int run_rank(const Comm& c, const Scenario& s, int me, const EmuOptions& o, size_t nl) {
  int fails = 0;
  for (size_t li = 0; li < nl; li++) {
    const Launch& l = s.launches[li];
    memset(c.sendReg[me], kCanary, c.regBytes);
    memset(c.recvReg[me], kCanary, c.regBytes);
    Params p{};
    p.abortFlag = (u64)c.abortFlag;
    p.signals = (u64)c.ws[me];
    for (int r = 0; r < c.n; r++) {
      p.peerSignals[r] = (u64)c.ws[r];
      p.peerStaging[r] = (u64)c.ws[r] + kSignalSize;
    }
    p.rank = me;
    p.nranks = c.n;
    p.llOffset = 0;
    p.seq = li + 1;
    char label[256];
    int rc;
    if (l.a2a) {
      const uint64_t total = c.n * l.bytes;
      char* recv = c.recvReg[me] + l.shift;
      char* send = l.inplace ? recv : c.sendReg[me] + l.shift;
      if (!l.inplace) memset(recv, kPoison, total);
      for (uint64_t i = 0; i < total; i++) send[i] = (char)in_byte(l, me, i);
      if (me == s.missing) {
        usleep(300 * 1000);
        __atomic_store_n(c.abortFlag, 1u, __ATOMIC_SEQ_CST);
        return fails ? kExitCheck : kExitOK;
      }
      p.send = (u64)send;
      p.recv = (u64)recv;
      p.count = l.bytes;
      if (l.delayRank == me) usleep((useconds_t)l.delayUs);
      snprintf(label, sizeof label, "%s launch %zu (alltoall bytes=%llu grid=%d %s shift=%d) rank %d", s.name.c_str(),
               li, (unsigned long long)l.bytes, l.grid, l.inplace ? "in-place" : "out-of-place", l.shift, me);
      rc = emu_launch(goccl_alltoall_ll, p, l.grid, s.threads, o.timeout, label);
      if (rc == kExitOK && s.missing >= 0) {
        printf("aborted %s: returned\n", label);
        return fails ? kExitCheck : kExitOK;
      }
      if (rc == kExitOK) {
        if (o.inject == "corrupt" && li == first_a2a(s) && me == c.n - 1) recv[0] ^= 1;
        fails += check_a2a(c, s, li, l, me, send, recv);
      }
    } else {
      // An LL AllReduce of f32 sums between the AllToAlls (same lines and epochs).
      const uint64_t count = l.bytes / 4;
      char* send = c.sendReg[me];
      char* recv = l.inplace ? send : c.recvReg[me];
      for (uint64_t i = 0; i < count; i++) {
        const uint64_t v = gen_elem(kF32, kSum, l.seed, me, i);
        memcpy(send + 4 * i, &v, 4);
      }
      p.send = (u64)send;
      p.recv = (u64)recv;
      p.count = count;
      snprintf(label, sizeof label, "%s launch %zu (LL f32 sum count=%llu grid=%d) rank %d", s.name.c_str(), li,
               (unsigned long long)count, l.grid, me);
      rc = emu_launch(kernel_for(kARL, kF32, kSum), p, l.grid, s.threads, o.timeout, label);
      for (uint64_t i = 0; rc == kExitOK && i < count; i++) {
        uint64_t in[goccl::kMaxRanks];
        for (int r = 0; r < c.n; r++) in[r] = gen_elem(kF32, kSum, l.seed, r, i);
        uint64_t g = 0;
        memcpy(&g, recv + 4 * i, 4);
        if (!matches(kF32, reference(kF32, kSum, c.n, in), g)) {
          fails++;
          printf("FAIL %s: element %llu wrong\n", label, (unsigned long long)i);
          break;
        }
      }
    }
    if (rc != kExitOK) {
      printf("EMU-FATAL %s: %s\n", label, rc == kExitTimeout ? "timed out" : rc == kExitMisaligned ? "misaligned access" : "crashed");
      return rc;
    }
    fflush(stdout);
  }
  return fails ? kExitCheck : kExitOK;
}

bool run_scenario(const Scenario& s, const EmuOptions& o) {
  Comm c;
  if (!comm_create(c, s)) return false;
  const size_t n = o.limit >= 0 && (size_t)o.limit < s.launches.size() ? (size_t)o.limit : s.launches.size();
  const bool ok = emu_run_ranks(
      s.nranks, [&](int r) { return run_rank(c, s, r, o, n); }, [] {}, s.name, n, "launches");
  munmap(c.base, c.size);
  return ok;
}

}  // namespace

std::vector<std::string> a2a_groups() { return {"a2a2", "a2a3", "a2a8", "a2aabort"}; }

bool a2a_run_group(const std::string& group, const EmuOptions& o) {
  bool ok = true;
  for (const Scenario& s : scenarios(o.seed))
    if (s.name == group) ok = run_scenario(s, o) && ok;
  return ok;
}
