// emu_p2p.cc: the point-to-point kernel (p2p.cu) on the CPU. A scenario is
// a communicator (nranks, slot size, slots per source, channels, threads)
// and a sequence of groups; a group is a list of transfers (sender,
// receiver, element size, the sender's and the receiver's count). Each
// rank is a driver process that builds its lanes from the transfers as
// collectives/gpu/p2p.go does (a lane per (peer, direction) and one of
// self copies, ops in transfer order, at most kP2PLaneOps of a lane per
// launch), fills its buffers, launches and checks its whole data region
// against an image built independently: received bytes equal the
// sender's, sent bytes and every byte around the buffers unchanged, and,
// for a pair whose counts disagree, the receive buffer untouched, the
// error record naming the peer, the direction and both counts, and the
// abort flag raised. The signal area is never reset between groups, so
// the per-pair counters carry from launch to launch as on a GPU.
//
// Groups: p2p2 (every element size at counts 0, 1, 7, 4095 and 1Mi+3,
// buffers on and off 16-byte boundaries), p2pring (rings both ways at 3
// and 4 ranks, self sends), p2pall (all pairs at once at 3, 4 and 8 ranks,
// with repeats past one launch's share of a lane), p2pabort (a rank never
// comes; the abort flag ends every wait), p2pmismatch (a pair's counts
// disagree, also 0 against 1), p2pzc (zero copy into registered
// receive buffers: registered, unregistered and unmapped receivers mixed
// in one launch, below and above the size where zero copy starts, one
// lane alternating both paths over several launches, chunks over three
// channels, a group run again with the same launch parameters and new
// data as a graph replay runs, each receiver's path checked from its
// record; and a group all zero copy that must leave every staging slot
// as it was), p2pzcmismatch (a registered receiver whose count disagrees:
// the error, no byte written), p2peager (eager Sends: every op a launch of
// its own, each rank's Sends before its Recvs, at 2, 3 and 4 ranks, below
// and at the limit, which deadlocks unless the Sends complete before their
// Recvs start; eager and rendezvous ops in one lane, in a group and one a
// launch; 40 Sends queued past the ring and the mailbox to a receiver that
// comes late, with ring positions wrapping their u32; zero copy and eager
// together; a mismatched eager Send, which the receiver reports and the
// sender's next group that waits on it reports as its Send's),
// p2ptimeout (a peer that never comes: a Recv, a rendezvous Send and an
// eager Send short of credits end at the timeout, naming the peer and the
// op), callskip (ranks that meet in calls of
// different numbers, in every staged collective and LL: see below).
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "emu.h"
// p2p.cu is compiled here, its one translation unit in the emulator.
#include "p2p.cu"

namespace {

using goccl::P2PParams;
using goccl::u32;
using goccl::u64;

constexpr uint64_t kSignalSize = 128 << 10;
constexpr uint8_t kCanary = 0x5a, kPoison = 0xc3;

struct Transfer {
  int src, dst, es;
  uint64_t scount, rcount;  // the sender's and the receiver's counts (differ: a mismatch)
  int misalign;             // elements past a 16-byte boundary (both buffers)
  int reg = 0;              // the receive buffer: 0 not registered, 1 registered and mapped by the sender, 2 registered
                            // but the sender's table holds another registration in that entry
};

// The registration every rank's whole data region is (same tag on every
// rank, as registrations are numbered alike), and one that collides with
// it in the table and that no sender maps.
constexpr u32 kZcTag = 5, kZcStale = kZcTag + goccl::kZcSlots;

struct Group {
  std::vector<Transfer> t;
  uint64_t seed;
};

struct Scenario {
  std::string name, group;
  int nranks, slots, channels, threads;
  uint64_t slotBytes;
  std::vector<Group> groups;
  int missing = -1;  // p2pabort: this rank never launches; it raises every abort flag instead
  uint64_t minData = 0;  // data region bytes at least (callskip)
  uint64_t zcMin = 0;    // a registered Recv from this many bytes takes zero copy (0: never)
  bool stagingUntouched = false;  // every transfer takes zero copy: no rank's staging may change
  bool eager = true;              // Sends may go eager (false: kP2PEagerOff, every Send a rendezvous)
  // split: every op its own launch, as calls outside a group are, each
  // rank's Sends first (in transfer order), then its Recvs: with a
  // rendezvous at every size, two ranks that send to each other deadlock.
  bool split = false;
  int eagerBadGroup = -1;  // the group whose mismatched transfer goes eager (see run_rank)
  u32 ringBase = 0;        // every pair's eager ring positions start here (wrapping u32 counters)
  int slowRank = -1;       // this rank sleeps slowMs before each of its groups (receivers that come late)
  int slowMs = 50;
  // p2ptimeout: the missing rank returns at once, raising no abort flag;
  // the other's waits end at timeoutMs with the error of its op number
  // timeoutOp (a Send to the missing rank, or a Recv from it).
  int timeoutMs = 0, timeoutOp = 0;
  bool timeoutSend = false;
};

struct Rng {
  uint64_t s;
  uint64_t next() { return mix64(s++); }
  int below(int n) { return (int)(next() % (uint64_t)n); }
};

// ---- scenarios -------------------------------------------------------------------

Scenario base(const char* name, const char* group, int n, int slots, int channels, int threads, uint64_t slot) {
  Scenario s;
  s.name = name, s.group = group, s.nranks = n, s.slots = slots, s.channels = channels, s.threads = threads;
  s.slotBytes = slot;
  return s;
}

const uint64_t kP2PCounts[] = {0, 1, 7, 4095, (1 << 20) + 3};

// eagerLimit: the largest op whose every channel's part fits its eager
// ring, for a scenario's channels and slot (a multiple of 16 below it).
uint64_t eager_limit(int channels, uint64_t slot) {
  P2PParams q;
  memset(&q, 0, sizeof q);
  q.channels = (u32)channels;
  q.p.slotBytes = slot;
  uint64_t b = 16;
  auto fits = [&](uint64_t bytes) {
    const goccl::Chunks ck(q, bytes);
    for (int ch = 0; ch < channels; ch++)
      if (goccl::round_up(ck.part((u32)ch, q.channels, bytes), 16) > goccl::eager_ring(q)) return false;
    return true;
  };
  while (fits(b + 16)) b += 16;
  return b;
}

// eager_scenarios: Sends that complete before their Recvs start (p2p.cu's
// eager path). Split scenarios launch every op alone, each rank's Sends
// before its Recvs, which deadlocks without eager Sends.
void eager_scenarios(std::vector<Scenario>& v, Rng& rng) {
  {
    // Two ranks, each Sends to the other then Recvs: random sizes below
    // the limit, then several each way, then ops at the limit exactly,
    // then the first group again (the same parameters: a graph replay).
    Scenario s = base("p2peager2", "p2peager", 2, 4, 2, 16, 4096);
    s.split = true;
    const uint64_t lim = eager_limit(s.channels, s.slotBytes);
    Group g{{}, rng.next()};
    for (int dir = 0; dir < 2; dir++) {
      const int es = 1 << rng.below(4);
      g.t.push_back({dir, 1 - dir, es, lim / es - (uint64_t)rng.below(5000), 0, rng.below(2)});
      g.t.back().rcount = g.t.back().scount;
    }
    s.groups.push_back(g);
    Group many{{}, rng.next()};
    for (int k = 0; k < 6; k++)
      for (int dir = 0; dir < 2; dir++) {
        const int es = 1 << rng.below(4);
        const uint64_t c = k == 0 ? 0 : 1 + (uint64_t)rng.below(3000);
        many.t.push_back({dir, 1 - dir, es, c, c, rng.below(2)});
      }
    s.groups.push_back(many);
    Group at{{}, rng.next()};
    at.t.push_back({0, 1, 1, lim, lim, 0});
    at.t.push_back({1, 0, 4, lim / 4, lim / 4, 1});
    s.groups.push_back(at);
    Group replay = g;
    replay.seed = rng.next();
    s.groups.push_back(replay);
    v.push_back(s);
  }
  for (int n : {3, 4}) {
    // Rings: every rank Sends to the next then Recvs from the one before;
    // then to both neighbours before both Recvs; 8 channels as the GPU
    // backend's default.
    Scenario s = base(n == 3 ? "p2peager3" : "p2peager4", "p2peager", n, 8, n == 3 ? 8 : 3, 16, 2048);
    s.split = true;
    const uint64_t lim = eager_limit(s.channels, s.slotBytes);
    for (int shape = 0; shape < 3; shape++) {
      Group g{{}, rng.next()};
      for (int r = 0; r < n; r++) {
        const int es = 1 << rng.below(4);
        const uint64_t c = shape == 2 ? lim / es : 1 + (uint64_t)rng.below((int)(lim / es));
        g.t.push_back({r, (r + 1) % n, es, c, c, rng.below(2)});
        if (shape == 1) g.t.push_back({r, (r + n - 1) % n, es, c / 2, c / 2, 0});
      }
      s.groups.push_back(g);
    }
    v.push_back(s);
  }
  {
    // Eager and rendezvous ops in one lane: in one group both ways, and
    // one op a launch from 0 to 1 only (a rendezvous Send waits for its
    // Recv, which comes after the eager ones before it).
    Scenario s = base("p2peagermix", "p2peager", 2, 4, 2, 16, 4096);
    const uint64_t lim = eager_limit(s.channels, s.slotBytes);
    Group g{{}, rng.next()};
    for (int k = 0; k < goccl::kP2PLaneOps + 4; k++)
      for (int dir = 0; dir < 2; dir++) {
        const uint64_t c = (k + dir) % 3 == 0 ? lim + 16 + (uint64_t)rng.below(100000) : (uint64_t)rng.below((int)lim);
        g.t.push_back({dir, 1 - dir, 1, c, c, rng.below(2)});
      }
    s.groups.push_back(g);
    v.push_back(s);
    Scenario o = base("p2peagermix1", "p2peager", 2, 4, 2, 16, 4096);
    o.split = true;
    Group one{{}, rng.next()};
    for (int k = 0; k < 12; k++) {
      const uint64_t c = k % 4 == 1 ? 3 * lim + (uint64_t)rng.below(1000) : (uint64_t)rng.below((int)lim / 4);
      one.t.push_back({0, 1, 4, c / 4, c / 4, rng.below(2)});
    }
    o.groups.push_back(one);
    v.push_back(o);
  }
  {
    // Eager Sends queued past the ring and the mailbox: rank 0 Sends 40
    // ops of about a third of the limit (then 40 small ones) to rank 1, which comes late and
    // Sends 3 of its own first; rank 0's Sends wait for credits, and the
    // ring positions start just short of wrapping their u32.
    Scenario s = base("p2peagerqueue", "p2peager", 2, 4, 2, 16, 8192);
    s.split = true;
    s.slowRank = 1;
    s.slowMs = 400;  // longer than rank 0's 40 launches take
    s.ringBase = 0u - 3u * 65536u - 4096u;
    const uint64_t lim = eager_limit(s.channels, s.slotBytes);
    for (int round = 0; round < 3; round++) {
      // Rounds 0 and 1 fill the rings, round 2 (small Sends) the mailboxes.
      Group g{{}, rng.next()};
      for (int k = 0; k < 40; k++) {
        const uint64_t c = round == 2 ? 1 + (uint64_t)rng.below(300) : lim / 3 + (uint64_t)rng.below(4096) - 2048;
        g.t.push_back({0, 1, 1, c, c, rng.below(2)});
        if (k < 3) g.t.push_back({1, 0, 2, lim / 16, lim / 16, 0});  // 3 parts of lim / 8 fit the rings
      }
      s.groups.push_back(g);
    }
    v.push_back(s);
  }
  {
    // Zero copy and eager Sends together: registered receivers take zero
    // copy where the sender finds them in the op, eager where it does
    // not and the part fits; larger registered ones always zero copy.
    Scenario s = base("p2peagerzc", "p2peager", 3, 4, 3, 16, 2048);
    s.zcMin = 1024;
    for (int round = 0; round < 2; round++) {
      Group g{{}, rng.next()};
      for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
          const int es = 1 << rng.below(4);
          const uint64_t c = rng.below(3) == 0 ? (1 << 18) / es + (uint64_t)rng.below(100) : 1 + (uint64_t)rng.below(5000);
          Transfer t{a, b, es, c, c, rng.below(2)};
          t.reg = rng.below(3);
          g.t.push_back(t);
        }
      s.groups.push_back(g);
    }
    v.push_back(s);
  }
  {
    // An eager Send whose Recv has another count: the receiver reports
    // both counts; the sender's Send completed, and its next group, a
    // Recv from the receiver (which stopped), reports them as its Send's.
    Scenario s = base("p2peagermismatch", "p2peager", 2, 4, 2, 16, 1024);
    s.split = true;
    s.eagerBadGroup = 1;
    Group ok{{}, rng.next()};
    ok.t = {{0, 1, 4, 300, 300, 0}, {1, 0, 4, 300, 300, 0}};
    s.groups.push_back(ok);
    Group bad{{}, rng.next()};
    bad.t = {{0, 1, 4, 300, 301, 0}};
    s.groups.push_back(bad);
    Group after{{}, rng.next()};
    after.t = {{1, 0, 4, 10, 10, 0}};
    s.groups.push_back(after);
    v.push_back(s);
  }
}

std::vector<Scenario> scenarios(uint64_t seed) {
  std::vector<Scenario> v;
  Rng rng{seed};
  {
    // Both directions at once, every element size and count; the largest
    // count in its own group (1Mi+3 of 8 bytes is 8 MiB each way).
    Scenario s = base("p2p2", "p2p2", 2, 4, 2, 16, 4096);
    Group g{{}, rng.next()};
    for (int es = 1; es <= 8; es *= 2)
      for (int ci = 0; ci < 4; ci++)
        for (int dir = 0; dir < 2; dir++)
          g.t.push_back({dir, 1 - dir, es, kP2PCounts[ci], kP2PCounts[ci], rng.below(2) ? 0 : 1 + rng.below(3)});
    s.groups.push_back(g);
    for (int es = 1; es <= 8; es *= 2) {
      Group big{{}, rng.next()};
      const uint64_t c = kP2PCounts[4];
      big.t.push_back({0, 1, es, c, c, es == 2 ? 1 : 0});
      big.t.push_back({1, 0, es, c, c, 0});
      s.groups.push_back(big);
    }
    v.push_back(s);
  }
  for (int n : {3, 4}) {
    // Rings to the right, to the left, both at once, with self sends.
    Scenario s = base(n == 3 ? "p2pring3" : "p2pring4", "p2pring", n, 4, n == 3 ? 1 : 3, 16, 1024);
    for (int shape = 0; shape < 4; shape++) {
      Group g{{}, rng.next()};
      const int es = 1 << rng.below(4);
      const uint64_t c = kP2PCounts[1 + rng.below(3)] + (uint64_t)rng.below(3);
      for (int r = 0; r < n; r++) {
        if (shape != 1) g.t.push_back({r, (r + 1) % n, es, c, c, rng.below(2)});
        if (shape >= 1) g.t.push_back({r, (r + n - 1) % n, es, c, c, 0});
        if (shape == 3) g.t.push_back({r, r, es, c, c, rng.below(2)});
      }
      s.groups.push_back(g);
    }
    v.push_back(s);
  }
  for (int n : {3, 4, 8}) {
    // All pairs at once (self included), random counts with zeros, then
    // 2 transfers a pair with one pair repeated past a launch's share.
    Scenario s = base(n == 3 ? "p2pall3" : n == 4 ? "p2pall4" : "p2pall8", "p2pall", n, 2, n == 8 ? 1 : 2,
                      n == 8 ? 4 : 16, 2048);
    for (int round = 0; round < 3; round++) {
      Group g{{}, rng.next()};
      for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
          for (int k = 0; k < (round == 2 ? 2 : 1); k++) {
            const int es = 1 << rng.below(4);
            const uint64_t c = rng.below(5) == 0 ? 0 : 1 + (uint64_t)rng.below(n == 8 ? 700 : 3000);
            g.t.push_back({a, b, es, c, c, rng.below(2)});
          }
      if (round == 2)
        for (int k = 0; k < goccl::kP2PLaneOps + 3; k++) g.t.push_back({0, n - 1, 4, (uint64_t)(5 + 64 * k), (uint64_t)(5 + 64 * k), 0});
      s.groups.push_back(g);
    }
    v.push_back(s);
  }
  {
    // A rank that never comes: the others block in every kind of wait.
    Scenario s = base("p2pabort", "p2pabort", 3, 4, 2, 16, 1024);
    Group g{{}, rng.next()};
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++) g.t.push_back({a, b, 4, 20000, 20000, 0});
    s.groups.push_back(g);
    s.missing = 0;
    v.push_back(s);
  }
  for (int m = 0; m < 3; m++) {
    // A pair that disagrees (0 against 1, 1 against 0, 100 against 104
    // bytes) among pairs that agree; ranks 0 and 1 see it.
    static const uint64_t kS[] = {0, 1, 25}, kR[] = {1, 0, 26};
    Scenario s = base(m == 0 ? "p2pmismatch0" : m == 1 ? "p2pmismatch1" : "p2pmismatch2", "p2pmismatch", 2, 4, 2, 16,
                      1024);
    s.eager = false;  // both sides see a rendezvous's mismatch (p2peagermismatch: an eager one)
    Group ok{{}, rng.next()};
    ok.t.push_back({0, 1, 4, 300, 300, 0});
    ok.t.push_back({1, 0, 4, 300, 300, 0});
    s.groups.push_back(ok);
    Group bad{{}, rng.next()};
    bad.t.push_back({1, 0, 4, 77, 77, 0});
    bad.t.push_back({0, 1, 4, kS[m], kR[m], 0});
    s.groups.push_back(bad);
    v.push_back(s);
  }
  {
    // Zero copy at 3 ranks: every pair with random registrations, counts
    // across zcMin, self sends; then the same transfers again (the same
    // launch parameters: a graph replay); then chunks over the channels
    // and one lane alternating both paths past a launch's share.
    Scenario s = base("p2pzc", "p2pzc", 3, 4, 3, 16, 2048);
    s.zcMin = 1024;
    s.eager = false;  // every path exactly as the registrations decide (p2peagerzc: with eager Sends)
    Group g{{}, rng.next()};
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 3; b++)
        for (int k = 0; k < 2; k++) {
          const int es = 1 << rng.below(4);
          const uint64_t c = rng.below(4) == 0 ? (uint64_t)rng.below(3) : 1 + (uint64_t)rng.below(5000);
          Transfer t{a, b, es, c, c, rng.below(2)};
          t.reg = rng.below(3);
          g.t.push_back(t);
        }
    // The last op of every lane takes each path somewhere: a registered
    // large one on 0->1, an unmapped one on 1->2, a small one on 2->0.
    const int last[3][2] = {{1, 1}, {2, 2}, {0, 1}};
    for (int a = 0; a < 3; a++) {
      Transfer t{a, last[a][0], 4, a == 2 ? 100u : 3000u, a == 2 ? 100u : 3000u, 0};
      t.reg = last[a][1];
      g.t.push_back(t);
    }
    s.groups.push_back(g);
    Group replay = g;
    replay.seed = rng.next();
    s.groups.push_back(replay);
    Group big{{}, rng.next()};
    Transfer t01{0, 1, 4, (1 << 18) + 3, (1 << 18) + 3, 1};
    t01.reg = 1;
    big.t.push_back(t01);
    Transfer t10{1, 0, 1, (1 << 20) + 3, (1 << 20) + 3, 0};
    t10.reg = 1;
    big.t.push_back(t10);
    for (int k = 0; k < goccl::kP2PLaneOps + 3; k++) {
      Transfer t{2, 1, 2, (uint64_t)(600 + 97 * k), (uint64_t)(600 + 97 * k), k % 3 == 0};
      t.reg = k % 2;
      big.t.push_back(t);
    }
    s.groups.push_back(big);
    v.push_back(s);
  }
  {
    // Every transfer zero copy, both ways, chunks over two channels and
    // ops past a launch's share: the data arrives and no staging slot is
    // written.
    Scenario s = base("p2pzconly", "p2pzc", 2, 2, 2, 16, 2048);
    s.zcMin = 1;
    s.eager = false;
    s.stagingUntouched = true;
    for (int round = 0; round < 2; round++) {
      Group g{{}, rng.next()};
      for (int k = 0; k < goccl::kP2PLaneOps + 2; k++)
        for (int dir = 0; dir < 2; dir++) {
          const uint64_t c = 1 + (uint64_t)rng.below(round == 0 ? 3000 : 20000);
          Transfer t{dir, 1 - dir, 1 << rng.below(4), c, c, rng.below(2)};
          t.reg = 1;
          g.t.push_back(t);
        }
      s.groups.push_back(g);
    }
    v.push_back(s);
  }
  {
    // A registered receiver whose count disagrees: both sides report it
    // and no byte reaches the receive buffer.
    Scenario s = base("p2pzcmismatch", "p2pzcmismatch", 2, 4, 2, 16, 1024);
    s.zcMin = 1024;
    s.eager = false;
    Group ok{{}, rng.next()};
    Transfer a{0, 1, 4, 3000, 3000, 0}, b{1, 0, 4, 3000, 3000, 0};
    a.reg = b.reg = 1;
    ok.t = {a, b};
    s.groups.push_back(ok);
    Group bad{{}, rng.next()};
    Transfer m{0, 1, 4, 3000, 3001, 0};
    m.reg = 1;
    bad.t = {b, m};
    s.groups.push_back(bad);
    v.push_back(s);
  }
  eager_scenarios(v, rng);
  for (int k = 0; k < 3; k++) {
    // A peer that never comes and raises nothing: a Recv from it, a Send
    // above the eager limit to it, and the 16th of 20 eager Sends (the
    // first with no mailbox entry free) end at the timeout naming the op.
    Scenario s = base(k == 0 ? "p2ptimeoutrecv" : k == 1 ? "p2ptimeoutsend" : "p2ptimeoutcredit", "p2ptimeout", 2, 4, 2, 16,
                      4096);
    s.split = true;
    s.missing = 1;
    s.timeoutMs = 100;
    s.timeoutSend = k != 0;
    s.timeoutOp = k == 2 ? (int)goccl::kP2PEagerQ : 1;
    Group g{{}, rng.next()};
    if (k == 0) g.t.push_back({1, 0, 4, 100, 100, 0});
    if (k == 1) g.t.push_back({0, 1, 4, 1 << 20, 1 << 20, 0});
    for (int i = 0; k == 2 && i < 20; i++) g.t.push_back({0, 1, 1, 1, 1, 0});
    s.groups.push_back(g);
    v.push_back(s);
  }
  return v;
}

// ---- memory ------------------------------------------------------------------------

// Comm: per rank a control page (abort flag, error record), a workspace
// (signals, two staging halves, the LL lines) and a data region, each
// followed by an inaccessible page.
struct Comm {
  int n = 0;
  uint64_t wsBytes = 0, dataBytes = 0, llOffset = 0, eagerOffset = 0;
  char* base = nullptr;
  size_t size = 0;
  char* ctl[goccl::kMaxRanks] = {};
  char* ws[goccl::kMaxRanks] = {};
  char* data[goccl::kMaxRanks] = {};
  std::vector<goccl::ZcEntry> zc[goccl::kMaxRanks];  // each rank's zero-copy table
};

// Placement of one transfer's buffers in the sender's and receiver's regions.
struct Place {
  uint64_t soff, roff;
};

// layout places every group's buffers (each group reuses the regions) and
// returns the bytes a region needs.
uint64_t layout(const Group& g, int n, std::vector<Place>& out) {
  std::vector<uint64_t> at(n, 0);
  out.clear();
  for (const Transfer& t : g.t) {
    Place p;
    at[t.src] = emu_round_up(at[t.src], 16) + 16 + t.misalign * t.es;
    p.soff = at[t.src];
    at[t.src] += t.scount * t.es;
    at[t.dst] = emu_round_up(at[t.dst], 16) + 16 + t.misalign * t.es;
    p.roff = at[t.dst];
    at[t.dst] += t.rcount * t.es;
    out.push_back(p);
  }
  uint64_t m = 0;
  for (uint64_t a : at) m = std::max(m, a);
  return m + 64;
}

bool comm_create(Comm& c, const Scenario& s) {
  const size_t pg = emu_page_size();
  c.n = s.nranks;
  c.llOffset = 2ull * c.n * s.slots * s.slotBytes;
  // The eager area follows the LL lines (collectives/gpu puts the copy
  // engines' landing area between them; no kernel here uses it).
  c.eagerOffset = c.llOffset + 2ull * c.n * kEmuLLMaxBlocks * kEmuLLSlot;
  c.wsBytes = emu_round_up(kSignalSize + c.eagerOffset + (c.n - 1) * goccl::kP2PEagerSrcBytes, pg);
  std::vector<Place> pl;
  c.dataBytes = s.minData;
  for (const Group& g : s.groups) c.dataBytes = std::max(c.dataBytes, layout(g, c.n, pl));
  c.dataBytes = emu_round_up(c.dataBytes, pg);
  c.size = c.n * (3 * pg + c.wsBytes + c.dataBytes + 3 * pg);
  if (!(c.base = emu_map_shared(c.size))) return false;
  char* p = c.base;
  emu_clear_regions();
  for (int r = 0; r < c.n; r++) {
    const std::string rs = "rank " + std::to_string(r);
    c.ctl[r] = p;
    emu_name_region((rs + " abort flag").c_str(), p, pg);
    p += pg;
    mprotect(p, pg, PROT_NONE);
    p += pg;
    c.ws[r] = p;
    emu_name_region((rs + " workspace").c_str(), p, c.wsBytes);
    p += c.wsBytes;
    mprotect(p, pg, PROT_NONE);
    p += pg;
    c.data[r] = p;
    emu_name_region((rs + " data").c_str(), p, c.dataBytes);
    p += c.dataBytes;
    mprotect(p, pg, PROT_NONE);
    p += pg;
  }
  for (int r = 0; r < c.n; r++)
    for (int peer = 0; peer < c.n; peer++)
      for (int ch = 0; ch < goccl::kP2PMaxChannels; ch++) {
        char* rec = c.ws[r] + goccl::kP2POffset + ((uint64_t)peer * goccl::kP2PMaxChannels + ch) * goccl::kP2PRecordBytes;
        *(u32*)(rec + goccl::kRecEHead) = *(u32*)(rec + goccl::kRecEFreed) = s.ringBase;
      }
  // Every rank maps every peer's data region under kZcTag (the entry
  // that kZcStale would take too).
  for (int r = 0; r < c.n; r++) {
    c.zc[r].assign(goccl::kZcSlots, goccl::ZcEntry{});
    goccl::ZcEntry& e = c.zc[r][kZcTag % goccl::kZcSlots];
    e.tag = kZcTag;
    for (int peer = 0; peer < c.n; peer++)
      if (peer != r) e.base[peer] = (u64)c.data[peer];
  }
  return true;
}

// zc_offered: whether the host lets a Recv of transfer t take (its
// descriptor's tag), which the sender may still turn down.
bool zc_offered(const Scenario& s, const Transfer& t) { return t.reg != 0 && s.zcMin != 0 && t.rcount * t.es >= s.zcMin; }

// ---- one rank ------------------------------------------------------------------------

// lanes builds rank me's launches of group g, as collectives/gpu/p2p.go:
// send lanes by peer, recv lanes by peer, then the copy lane; a lane's
// ops in transfer order, kP2PLaneOps of them per launch.
std::vector<P2PParams> launches(const Scenario& s, const Group& g, const std::vector<Place>& pl, const Comm& c, int me,
                                int* maxLanes, const EmuOptions& o, goccl::Stamp* stamp, uint64_t seq) {
  struct Op {
    goccl::P2POp op;
    int lane;
  };
  std::vector<std::vector<goccl::P2POp>> lanes(2 * s.nranks + 1);
  std::vector<int> peerOf(2 * s.nranks + 1), kindOf(2 * s.nranks + 1);
  for (size_t i = 0; i < g.t.size(); i++) {
    const Transfer& t = g.t[i];
    char* d = c.data[me];
    if (t.src == me && t.dst == me) {
      lanes[2 * s.nranks].push_back({(u64)(d + pl[i].soff), (u64)(d + pl[i].roff), t.scount * t.es});
    } else if (t.src == me) {
      lanes[t.dst].push_back({(u64)(d + pl[i].soff), 0, t.scount * t.es});
    } else if (t.dst == me) {
      const u64 zc = zc_offered(s, t) ? (u64)(t.reg == 1 ? kZcTag : kZcStale) << goccl::kZcOffBits | pl[i].roff : 0;
      lanes[s.nranks + t.src].push_back({zc, (u64)(d + pl[i].roff), t.rcount * t.es});
    }
  }
  std::vector<P2PParams> out;
  // batch turns lanes into launches of kP2PLaneOps per lane each.
  auto batch = [&](const std::vector<std::vector<goccl::P2POp>>& lanes, bool flagsEach) {
    const size_t first = out.size();
    for (size_t L = 0;; L++) {
      P2PParams q;
      memset(&q, 0, sizeof q);
      int nops = 0;
      for (int l = 0; l < 2 * s.nranks + 1; l++) {
        const size_t lo = L * goccl::kP2PLaneOps;
        if (lanes[l].size() <= lo) continue;
        const size_t hi = std::min(lanes[l].size(), lo + goccl::kP2PLaneOps);
        goccl::P2PLane& ln = q.lanes[q.nlanes++];
        ln.first = (goccl::u16)nops;
        ln.n = (goccl::u16)(hi - lo);
        ln.peer = (goccl::u8)(l < s.nranks ? l : l < 2 * s.nranks ? l - s.nranks : me);
        ln.kind = (goccl::u8)(l < s.nranks ? goccl::kLaneSend : l < 2 * s.nranks ? goccl::kLaneRecv : goccl::kLaneCopy);
        for (size_t k = lo; k < hi; k++) q.ops[nops++] = lanes[l][k];
      }
      if (q.nlanes == 0) break;
      *maxLanes = std::max(*maxLanes, (int)q.nlanes);
      goccl::Params& p = q.p;
      p.abortFlag = (u64)c.ctl[me];
      p.signals = (u64)c.ws[me];
      for (int r = 0; r < c.n; r++) {
        p.peerSignals[r] = (u64)c.ws[r];
        p.peerStaging[r] = (u64)c.ws[r] + kSignalSize;
      }
      p.slotBytes = s.slotBytes;
      p.blockSlots = (u32)s.slots;
      p.shareBytes = 16;
      p.rank = me;
      p.nranks = s.nranks;
      q.channels = (u32)s.channels;
      q.zcTable = o.inject == "p2pzcnomap" && me == 0 ? 0 : (u64)c.zc[me].data();
      p.reserved[0] = (u64)stamp;
      p.reserved[4] = s.eager && o.inject != "p2pnoeager" ? 0 : goccl::kP2PEagerOff;
      p.reserved[4] |= (u64)s.timeoutMs << goccl::kP2PTimeoutShift;
      p.reserved[5] = c.eagerOffset;
      p.seq = seq;
      out.push_back(q);
    }
    // A group's launches time it together, as collectives/gpu/p2p.go
    // asks: the first claims the Stamp and stores the start, the last the
    // end; a call outside a group is a group of its own.
    for (size_t i = first; i < out.size(); i++) {
      if (i == first || flagsEach) out[i].p.reserved[4] |= goccl::kP2PStampClaim | goccl::kP2PStampStart;
      if (i + 1 == out.size() || flagsEach) out[i].p.reserved[4] |= goccl::kP2PStampEnd;
    }
  };
  if (!s.split) {
    batch(lanes, false);
    return out;
  }
  // Outside a group: one launch per op, the Sends (and self copies) first.
  for (int pass = 0; pass < 2; pass++) {
    const int lo = pass == 0 ? 0 : s.nranks, hi = pass == 0 ? s.nranks : 2 * s.nranks;
    std::vector<size_t> next(2 * s.nranks + 1, 0);
    for (size_t i = 0; i < g.t.size(); i++) {
      const Transfer& t = g.t[i];
      const int l = t.src == me && t.dst == me ? (pass == 0 ? 2 * s.nranks : -1)
                    : t.src == me             ? t.dst
                    : t.dst == me             ? s.nranks + t.src
                                              : -1;
      if (l < 0 || ((l < lo || l >= hi) && l != 2 * s.nranks)) continue;
      std::vector<std::vector<goccl::P2POp>> one(2 * s.nranks + 1);
      one[l].push_back(lanes[l][next[l]++]);
      batch(one, true);
    }
  }
  return out;
}

// mismatched reports whether transfer t's counts disagree.
bool mismatched(const Transfer& t) { return t.scount != t.rcount && t.src != t.dst; }

// eager_fits: whether channel 0's part of an op of `bytes` fits its eager
// ring, so that a sender takes it eagerly unless it takes zero copy.
bool eager_fits(const Scenario& s, uint64_t bytes) {
  P2PParams q;
  memset(&q, 0, sizeof q);
  q.channels = (u32)s.channels;
  q.p.slotBytes = s.slotBytes;
  const goccl::Chunks ck(q, bytes);
  return s.eager && goccl::round_up(ck.part(0, q.channels, bytes), 16) <= goccl::eager_ring(q);
}

int run_rank(const Comm& c, const Scenario& s, int me, const EmuOptions& o) {
  int fails = 0;
  goccl::Stamp* stampp = (goccl::Stamp*)emu_map_shared(emu_page_size());
  if (stampp == nullptr) return kExitCrash;
  // owed: the mismatched eager Send this rank made in the group before,
  // which the receiver rejected after the Send completed: this rank's
  // next group that waits on the receiver must report it.
  const Transfer* owed = nullptr;
  for (size_t gi = 0; gi < s.groups.size(); gi++) {
    const Group& g = s.groups[gi];
    if (me == s.slowRank) usleep(s.slowMs * 1000);
    std::vector<Place> pl;
    layout(g, s.nranks, pl);
    char* d = c.data[me];
    std::vector<uint8_t> want(c.dataBytes, kCanary);
    memset(d, kCanary, c.dataBytes);
    const Transfer* bad = nullptr;
    const Transfer* owedNext = nullptr;
    for (size_t i = 0; i < g.t.size(); i++) {
      const Transfer& t = g.t[i];
      if (mismatched(t) && (t.src == me || t.dst == me)) {
        if ((int)gi == s.eagerBadGroup && t.src == me)
          owedNext = &t;  // its Send completes; the receiver rejects it
        else
          bad = &t;
      }
      if (t.src == me)
        for (uint64_t b = 0; b < t.scount * t.es; b++) d[pl[i].soff + b] = want[pl[i].soff + b] = gen_byte(g.seed + i, t.src, b);
      if (t.dst == me) {
        memset(d + pl[i].roff, kPoison, t.rcount * t.es);
        for (uint64_t b = 0; b < t.rcount * t.es; b++) want[pl[i].roff + b] = mismatched(t) ? kPoison : gen_byte(g.seed + i, t.src, b);
      }
    }
    if (me == s.missing && s.timeoutMs) return kExitOK;
    if (me == s.missing) {
      usleep(300 * 1000);
      for (int r = 0; r < c.n; r++) __atomic_store_n((u32*)c.ctl[r], 1u, __ATOMIC_SEQ_CST);
      return kExitOK;
    }
    int maxLanes = 0;
    // Shared with the block processes, as a host-mapped table is.
    goccl::Stamp& stamp = *stampp;
    memset(stampp, 0, sizeof *stampp);
    const uint64_t seq = 1000 + gi;
    const std::vector<P2PParams> qs = launches(s, g, pl, c, me, &maxLanes, o, stampp, seq);
    char* staging = c.ws[me] + kSignalSize;
    if (s.stagingUntouched) memset(staging, kCanary, c.llOffset);
    const uint64_t t0 = goccl::globaltimer();
    for (size_t li = 0; li < qs.size(); li++) {
      char label[200];
      snprintf(label, sizeof label, "%s group %zu launch %zu rank %d (%d lanes, %d channels, %d threads)", s.name.c_str(), gi,
               li, me, (int)qs[li].nlanes, s.channels, s.threads);
      const P2PParams& q = qs[li];
      const int rc = emu_launch_body([&q] { goccl_p2p(q); }, (int)q.nlanes * s.channels, s.threads, o.timeout, label);
      if (rc != kExitOK) {
        printf("EMU-FATAL %s: %s\n", label, rc == kExitTimeout ? "timed out" : rc == kExitMisaligned ? "misaligned access" : "crashed");
        return rc;
      }
    }
    const uint64_t t1 = goccl::globaltimer();
    if (s.timeoutMs) {
      const u32 ew = *(u32*)(c.ctl[me] + goccl::kErrOffset);
      const u64 op = *(u64*)(c.ctl[me] + goccl::kErrOffset + 8), waited = *(u64*)(c.ctl[me] + goccl::kErrOffset + 16);
      const u32 code = s.timeoutSend ? goccl::kErrSendTimeout : goccl::kErrRecvTimeout;
      const u32 wantw = 1u | code << 1 | (u32)s.missing << 8;
      const u64 bound = (u64)s.timeoutMs * 1000000;
      if (ew != wantw || op != (u64)s.timeoutOp || waited < bound || t1 - t0 < bound ||
          __atomic_load_n((u32*)c.ctl[me], __ATOMIC_SEQ_CST) != 1) {
        printf("FAIL %s rank %d: error record %#x op %llu waited %llu ns (launches took %llu ns), want %#x op %d waited >= %llu\n",
               s.name.c_str(), me, ew, (unsigned long long)op, (unsigned long long)waited, (unsigned long long)(t1 - t0), wantw,
               s.timeoutOp, (unsigned long long)bound);
        return kExitCheck;
      }
      printf("%s rank %d: its %s %llu %s rank %d timed out after %llu ns: reported\n", s.name.c_str(), me,
             s.timeoutSend ? "Send" : "Recv", (unsigned long long)op, s.timeoutSend ? "to" : "from", s.missing,
             (unsigned long long)waited);
      return kExitOK;
    }
    if (s.stagingUntouched)
      for (uint64_t b = 0; b < c.llOffset; b++)
        if ((uint8_t)staging[b] != kCanary) {
          printf("FAIL %s group %zu rank %d: staging byte %llu written on a zero-copy group\n", s.name.c_str(), gi, me,
                 (unsigned long long)b);
          fails++;
          break;
        }
    // The group's timestamps: its number, start and end within its
    // launches' span, the blocks-done counter back at zero (a missing or
    // aborted rank's launches may stop before their end).
    const u32 left = *(volatile u32*)(c.ws[me] + goccl::kStampCountOffset);
    if (s.missing < 0 && !bad && !owed &&
        !(stamp.seq == seq && t0 <= stamp.start && stamp.start <= stamp.end && stamp.end <= t1 && left == 0)) {
      printf("FAIL %s group %zu rank %d: timestamps: seq %llu (want %llu), start %+lld ns and end %+lld ns from the first "
             "launch's start (span %llu ns), %u blocks left counted\n",
             s.name.c_str(), gi, me, (unsigned long long)stamp.seq, (unsigned long long)seq, (long long)(stamp.start - t0),
             (long long)(stamp.end - t0), (unsigned long long)(t1 - t0), left);
      fails++;
    }
    if (o.inject == "p2pcorrupt" && gi == 0 && me == 1)  // one received byte: the check must notice
      for (size_t i = 0; i < g.t.size(); i++)
        if (g.t[i].dst == me && g.t[i].rcount > 0) {
          d[pl[i].roff] ^= 1;
          break;
        }
    const u32 abortv = __atomic_load_n((u32*)c.ctl[me], __ATOMIC_SEQ_CST);
    if (s.missing >= 0) {
      printf("aborted %s rank %d: returned\n", s.name.c_str(), me);
      continue;
    }
    // The error record: set exactly when this rank is in the bad pair.
    const u32 ew = *(u32*)(c.ctl[me] + goccl::kErrOffset);
    const u64 emine = *(u64*)(c.ctl[me] + goccl::kErrOffset + 8), etheirs = *(u64*)(c.ctl[me] + goccl::kErrOffset + 16);
    if (owed) {
      // Found by a wait of this group on the receiver, with both counts.
      const u32 wantw = 1u | (u32)owed->dst << 8;
      const u64 wm = owed->scount * owed->es, wt = owed->rcount * owed->es;
      if (ew != wantw || emine != wm || etheirs != wt || abortv != 1) {
        printf("FAIL %s group %zu rank %d: rejected eager Send: error record %#x mine=%llu theirs=%llu abort=%u, want %#x "
               "mine=%llu theirs=%llu abort=1\n",
               s.name.c_str(), gi, me, ew, (unsigned long long)emine, (unsigned long long)etheirs, abortv, wantw,
               (unsigned long long)wm, (unsigned long long)wt);
        fails++;
      } else {
        printf("%s group %zu rank %d: its eager Send of group %zu, rejected, reported: %llu bytes against %llu\n",
               s.name.c_str(), gi, me, gi - 1, (unsigned long long)emine, (unsigned long long)etheirs);
      }
    } else if (bad) {
      const bool send = bad->src == me;
      const int peer = send ? bad->dst : bad->src;
      const u32 wantw = 1u | (send ? 0u : 2u) | (u32)peer << 8;
      const u64 wm = (send ? bad->scount : bad->rcount) * bad->es, wt = (send ? bad->rcount : bad->scount) * bad->es;
      if (ew != wantw || emine != wm || etheirs != wt || abortv != 1) {
        printf("FAIL %s group %zu rank %d: error record %#x mine=%llu theirs=%llu abort=%u, want %#x mine=%llu theirs=%llu abort=1\n",
               s.name.c_str(), gi, me, ew, (unsigned long long)emine, (unsigned long long)etheirs, abortv, wantw,
               (unsigned long long)wm, (unsigned long long)wt);
        fails++;
      }
    } else if (ew != 0 || abortv != 0) {
      printf("FAIL %s group %zu rank %d: error record %#x, abort flag %u after a group whose counts agree\n", s.name.c_str(), gi,
             me, ew, abortv);
      fails++;
    } else {
      // The path of the last Recv from each peer, as channel 0's record
      // shows it: szero equals the op's number exactly on zero copy.
      for (int peer = 0; peer < s.nranks; peer++) {
        const Transfer* lastT = nullptr;
        for (const Transfer& t : g.t)
          if (t.dst == me && t.src == peer && peer != me) lastT = &t;
        if (!lastT) continue;
        const char* rec = c.ws[me] + goccl::kP2POffset + (uint64_t)peer * goccl::kP2PMaxChannels * goccl::kP2PRecordBytes;
        // Zero copy where offered and mapped, unless the sender found
        // the receiver not there yet and went eager; eager where the
        // part fits; staging otherwise.
        static const char* const kPath[] = {"staging", "zero copy", "eager"};
        const u32 got = *(const u32*)(rec + goccl::kRecRPath);
        const bool fits = eager_fits(s, lastT->rcount * lastT->es), zc = zc_offered(s, *lastT) && lastT->reg == 1;
        const u32 want = zc ? goccl::kPathZc : fits ? goccl::kPathEager : goccl::kPathStaging;
        if (got > 2 || (got != want && !(zc && fits && got == goccl::kPathEager))) {
          printf("FAIL %s group %zu rank %d: last Recv from %d (%llu x %d bytes, registration %d) took %s, want %s\n",
                 s.name.c_str(), gi, me, peer, (unsigned long long)lastT->rcount, lastT->es, lastT->reg,
                 got > 2 ? "?" : kPath[got], kPath[want]);
          fails++;
        }
      }
    }
    // Past a mismatch the kernels stopped where they were: other pairs'
    // data is not defined, only the bad pair's receive buffer is.
    uint64_t nbad = 0, first = 0;
    for (uint64_t b = 0; b < c.dataBytes; b++) {
      if ((uint8_t)d[b] == want[b]) continue;
      if (bad || owed) {
        bool inBad = false;
        for (size_t i = 0; i < g.t.size(); i++)
          if (&g.t[i] == bad && bad->dst == me && b >= pl[i].roff && b < pl[i].roff + bad->rcount * bad->es) inBad = true;
        bool inRecv = false;
        for (size_t i = 0; i < g.t.size(); i++)
          if (g.t[i].dst == me && b >= pl[i].roff && b < pl[i].roff + g.t[i].rcount * g.t[i].es) inRecv = true;
        if (inRecv && !inBad) continue;
      }
      if (nbad++ == 0) first = b;
    }
    if (nbad) {
      std::string where = "outside every buffer";
      for (size_t i = 0; i < g.t.size(); i++) {
        const Transfer& t = g.t[i];
        char w[160];
        if (t.dst == me && first >= pl[i].roff && first < pl[i].roff + t.rcount * t.es) {
          snprintf(w, sizeof w, "recv of transfer %zu (%d->%d, %llu x %d bytes) at byte %llu", i, t.src, t.dst,
                   (unsigned long long)t.rcount, t.es, (unsigned long long)(first - pl[i].roff));
          where = w;
        } else if (t.src == me && first >= pl[i].soff && first < pl[i].soff + t.scount * t.es) {
          snprintf(w, sizeof w, "send buffer of transfer %zu (%d->%d) changed at byte %llu", i, t.src, t.dst,
                   (unsigned long long)(first - pl[i].soff));
          where = w;
        }
      }
      printf("FAIL %s group %zu rank %d: %llu wrong bytes, first at region offset %llu (%s): got 0x%02x, want 0x%02x\n",
             s.name.c_str(), gi, me, (unsigned long long)nbad, (unsigned long long)first, where.c_str(), (uint8_t)d[first],
             want[first]);
      fails++;
    }
    if (bad || owed) break;  // the communicator is aborted
    owed = owedNext;
  }
  fflush(stdout);
  return fails ? kExitCheck : kExitOK;
}

void dump(const Comm& c, const Scenario& s) {
  printf("state of every rank (channel 0 records):\n");
  for (int r = 0; r < c.n; r++)
    for (int peer = 0; peer < c.n; peer++) {
      const char* rec = c.ws[r] + goccl::kP2POffset + (uint64_t)peer * goccl::kP2PMaxChannels * goccl::kP2PRecordBytes;
      auto w = [&](int off) { return *(volatile u32*)(rec + off); };
      printf("  rank %d about %d: posted=%u rready=%u consumed=%u sendOps=%u sendChunks=%u recvOps=%u recvChunks=%u "
             "ehead=%u efreed=%u ebad=%u rpath=%u\n",
             r, peer, w(goccl::kRecPosted), w(goccl::kRecRReady), w(goccl::kRecConsumed), w(goccl::kRecSendOps),
             w(goccl::kRecSendChunks), w(goccl::kRecRecvOps), w(goccl::kRecRecvChunks), w(goccl::kRecEHead),
             w(goccl::kRecEFreed), w(goccl::kRecEBad), w(goccl::kRecRPath));
    }
  (void)s;
}

bool run_scenario(const Scenario& s, const EmuOptions& o) {
  Comm c;
  if (!comm_create(c, s)) return false;
  size_t nt = 0;
  for (const Group& g : s.groups) nt += g.t.size();
  const bool ok = emu_run_ranks(s.nranks, [&](int r) { return run_rank(c, s, r, o); }, [&] { dump(c, s); }, s.name, nt,
                                "transfers");
  munmap(c.base, c.size);
  return ok;
}

// ---- call numbers (common.cuh's Ctx::barrier, ll.cu) ------------------------

// callskip: each staged family and LL at 2 and 3 ranks. Every rank makes
// call 1; then rank 1 makes call 3 (it skipped call 2: left it out, or its
// count was 0 so nothing launched) while the others make call 2, with the
// same arguments, so that the flags alone would pair them. Every kernel
// must return, and every rank must record kErrCall naming a rank that met
// it in another call, with both numbers, and raise its abort flag.
constexpr uint64_t kSkipCount = 1000;  // float32 elements

int skip_rank(const Comm& c, const Scenario& s, int fam, int me, const EmuOptions& o) {
  const int n = s.nranks;
  char* send = c.data[me];
  char* recv = c.data[me] + emu_round_up(n * kSkipCount * 4, 4096);
  for (uint64_t i = 0; i < n * kSkipCount; i++) {
    const float v = (float)(me + 1) + (float)i * 0.5f;
    memcpy(send + 4 * i, &v, 4);
  }
  const uint64_t seqs[2] = {1, me == 1 ? 3u : 2u};
  for (int li = 0; li < 2; li++) {
    goccl::Params p{};
    p.send = (u64)send;
    p.recv = (u64)recv;
    p.count = kSkipCount;
    p.abortFlag = (u64)c.ctl[me];
    p.signals = (u64)c.ws[me];
    for (int r = 0; r < n; r++) {
      p.peerSignals[r] = (u64)c.ws[r];
      p.peerStaging[r] = (u64)c.ws[r] + kSignalSize;
    }
    p.slotBytes = s.slotBytes;
    p.blockSlots = (u32)s.slots;
    p.shareBytes = 16;
    p.rank = me;
    p.nranks = n;
    p.root = 0;
    p.elemSize = 4;
    p.llOffset = c.llOffset;
    p.seq = seqs[li];
    char label[160];
    snprintf(label, sizeof label, "%s call %llu (%s) rank %d", s.name.c_str(), (unsigned long long)p.seq, kFamilyName[fam], me);
    const int rc = emu_launch(kernel_for(fam, kF32, kSum), p, fam == kARL ? 1 : 2, 16, o.timeout, label);
    if (rc != kExitOK) {
      printf("EMU-FATAL %s: %s\n", label, rc == kExitTimeout ? "timed out" : "crashed");
      return rc;
    }
  }
  const u32 ew = *(u32*)(c.ctl[me] + goccl::kErrOffset);
  const u64 mine = *(u64*)(c.ctl[me] + goccl::kErrOffset + 8), theirs = *(u64*)(c.ctl[me] + goccl::kErrOffset + 16);
  const u32 abortv = *(volatile u32*)c.ctl[me];
  const int peer = (int)(ew >> 8);
  const bool peerOK = me == 1 ? peer != 1 && peer < n : peer == 1;
  const u64 wm = me == 1 ? 3 : 2, wt = me == 1 ? 2 : 3;
  if ((ew & 0xff) != (1u | goccl::kErrCall << 1) || !peerOK || mine != wm || theirs != wt || abortv != 1) {
    printf("FAIL %s rank %d: error record %#x (peer %d) mine=%llu theirs=%llu abort=%u, want code %u, mine=%llu theirs=%llu\n",
           s.name.c_str(), me, ew, peer, (unsigned long long)mine, (unsigned long long)theirs, abortv,
           1u | goccl::kErrCall << 1, (unsigned long long)wm, (unsigned long long)wt);
    return kExitCheck;
  }
  printf("%s rank %d: call %llu met rank %d in call %llu: reported\n", s.name.c_str(), me, (unsigned long long)mine, peer,
         (unsigned long long)theirs);
  return kExitOK;
}

bool run_callskip(const EmuOptions& o) {
  bool ok = true;
  for (int n : {2, 3})
    for (int fam = 0; fam < kNumFamilies; fam++) {
      Scenario s = base("", "callskip", n, 4, 1, 16, 1024);
      s.name = std::string("callskip") + std::to_string(n) + "-" + kFamilyName[fam];
      s.minData = 2 * emu_round_up(n * kSkipCount * 4, 4096);
      Comm c;
      if (!comm_create(c, s)) return false;
      ok = emu_run_ranks(n, [&](int r) { return skip_rank(c, s, fam, r, o); }, [&] { dump(c, s); }, s.name, 2, "calls") && ok;
      munmap(c.base, c.size);
    }
  return ok;
}

}  // namespace

std::vector<std::string> p2p_groups() {
  return {"p2p2", "p2pring", "p2pall", "p2pabort", "p2pmismatch", "p2pzc", "p2pzcmismatch", "p2peager", "p2ptimeout", "callskip"};
}

bool p2p_run_group(const std::string& group, const EmuOptions& o) {
  if (group == "callskip") return run_callskip(o);
  bool ok = true;
  for (const Scenario& s : scenarios(o.seed))
    if (s.group == group) ok = run_scenario(s, o) && ok;
  return ok;
}
