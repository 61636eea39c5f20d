// emu_ce_streams.cc: the memory of the copy-engine reductions' scenarios
// and the model of the host's copy streams that feed cereduce.cu
// (collectives/gpu/cereduce.go), each stream a process of its own running
// alongside the kernel's blocks:
//
//	push:   for chunk i, for each peer r (rotated): [wait free[r][i-depth]
//	        here] copy my part of r's chunk i into r's staging slot
//	        i % depth (direct: no wait, into r's recv at r's piece offset
//	        (AllReduce) + the chunk's; chunks past the end of r's piece: no
//	        wait, no copy), then data[me] = seq + i into r's flags
//	land:   for chunk i of my piece while it holds data: wait data[r] >=
//	        seq + i here for every peer r (rotated), then landed = seq + i
//	        (direct: landed once for the call; per chunk, launch the kernel
//	        for chunk i alone and wait for it, as the next operation on a
//	        stream waits for a kernel, then record the reduced event: its
//	        word in the control page = seq + i)
//	spread: (AllReduce) for chunk i of my piece while it holds data: wait
//	        reduced[i % kCESlots] (direct: the reduced event) >= seq + i,
//	        copy my reduced chunk i into every peer's output; then
//	        done[me] = seq into every peer's flags
//
// The streams' waits give up when the abort flag is raised: the host's
// cuStreamWaitValue32 cannot poll it, but Abort's rescue releases them by
// overwriting the flags, so the abort scenarios test the kernel's own
// abort path and the streams only need to get out of the way.
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu_ce.h"

namespace emu_ce {

// ---- memory ------------------------------------------------------------------------

bool protocol_word(uint64_t off, int n) {
  const uint64_t f = goccl::kCEFlagOffset;
  auto in = [&](uint64_t at, uint64_t words) { return off >= f + at && off < f + at + 4 * words; };
  if (in(kReadyOff, n) || in(kDoneOff, n) || in(goccl::kCEDataOff, n) || in(goccl::kCELandedOff, 1) ||
      in(goccl::kCEReducedOff, kCESlots) || in(goccl::kCEFreeOff, (uint64_t)n * kCESlots))
    return true;
  return off >= goccl::kCECountOffset && off < goccl::kCECountOffset + 4 * kCESlots;
}

namespace {

uint64_t staging_bytes(const Call& c, int n) { return c.direct ? 0 : (uint64_t)c.depth * n * c.chunk * c.es; }

void sizes(const Call& c, int n, uint64_t* sendB, uint64_t* recvB) {
  *recvB = c.count * c.es;
  *sendB = c.kind == kCeRS ? n * c.count * c.es : c.count * c.es;
}

void put(char* p, uint64_t i, int es, uint64_t v) { memcpy(p + i * es, &v, (size_t)es); }
uint8_t poison(const Call& c) { return c.dt >= kF16 ? 0xff : (uint8_t)(0x80 | ((c.seed >> 8) & 0x7f)); }

}  // namespace

bool mem_create(Mem& m, const CeScenario& s) {
  const size_t pg = emu_page_size();
  m.n = s.n;
  m.sigBytes = round_up(goccl::kCECountOffset + 4 * kCESlots, pg);
  uint64_t stg = 16, buf = 16;
  for (const Call& c : s.calls) {
    uint64_t a, b;
    sizes(c, s.n, &a, &b);
    stg = std::max(stg, staging_bytes(c, s.n));
    buf = std::max(buf, std::max(a, b));
  }
  m.stgRegion = round_up(stg, pg);
  m.regBytes = round_up(buf + 256, pg);
  m.size = 2 * pg + s.n * (m.sigBytes + m.stgRegion + 2 * m.regBytes + 3 * pg);
  if (!(m.base = emu_map_shared(m.size))) return false;
  m.abortFlag = (u32*)m.base;
  m.running = (u32*)(m.base + 64);
  m.finished = (u32*)(m.base + 128);
  m.reducedEvent = (u32*)(m.base + 192);
  for (int r = 0; r < s.n; r++) m.reducedEvent[r] = s.seq0 - 1;  // (as the flags: no chunk has run)
  char* p = m.base + pg;
  mprotect(p, pg, PROT_NONE);
  p += pg;
  emu_clear_regions();
  for (int r = 0; r < s.n; r++) {
    const std::string rs = "rank " + std::to_string(r);
    m.ws[r] = p;
    m.stg[r] = p + m.sigBytes + m.stgRegion - stg;  // the largest staging ends at the guard page
    emu_name_region((rs + " workspace").c_str(), p, m.sigBytes + m.stgRegion);
    memset(p, kCanary, m.sigBytes);
    for (uint64_t off = 0; off < m.sigBytes; off += 4)
      if (protocol_word(off, s.n)) *(u32*)(p + off) = off >= goccl::kCECountOffset ? 0 : s.seq0 - 1;
    p += m.sigBytes + m.stgRegion;
    mprotect(p, pg, PROT_NONE);
    p += pg;
    char** regs[2] = {&m.sendReg[r], &m.recvReg[r]};
    for (int k = 0; k < 2; k++) {
      *regs[k] = p;
      emu_name_region((rs + (k ? " recv region" : " send region")).c_str(), p, m.regBytes);
      p += m.regBytes;
      mprotect(p, pg, PROT_NONE);
      p += pg;
    }
  }
  return true;
}

Bufs place(const Mem& m, const Call& c, int r) {
  Bufs b{};
  sizes(c, m.n, &b.sendB, &b.recvB);
  auto at_end = [&](char* reg, uint64_t bytes) { return reg + m.regBytes - round_up(bytes, 16); };
  if (!c.inplace) {
    b.send = b.liveSend = at_end(m.sendReg[r], b.sendB);
    b.recv = b.liveRecv = at_end(m.recvReg[r], b.recvB);
    b.liveSendB = b.sendB, b.liveRecvB = b.recvB;
  } else if (c.kind == kCeRS) {
    b.send = b.liveRecv = at_end(m.recvReg[r], b.sendB);
    b.recv = b.send + (uint64_t)r * c.count * c.es;
    b.liveRecvB = b.sendB;
  } else {
    b.send = b.recv = b.liveRecv = at_end(m.recvReg[r], b.recvB);
    b.liveRecvB = b.recvB;
  }
  return b;
}

uint64_t get(const char* p, uint64_t i, int es) {
  uint64_t v = 0;
  memcpy(&v, p + i * es, (size_t)es);
  return v;
}

void fill(const Mem& m, const Call& c, const Bufs& b, int me) {
  memset(m.sendReg[me], kCanary, m.regBytes);
  memset(m.recvReg[me], kCanary, m.regBytes);
  if (!c.inplace) memset(b.recv, poison(c), b.recvB);
  for (uint64_t i = 0; i < b.sendB / c.es; i++) put(b.send, i, c.es, gen_elem(c.dt, c.op, c.seed, me, i));
}

// ---- the copy streams --------------------------------------------------------------

int wait_geq(const Mem& m, const u32* f, u32 want, int timeout_s, const char* who, const char* what) {
  const double t0 = emu_now();
  for (unsigned spins = 1;; spins++) {
    const u32 v = load(f);
    if ((int32_t)(v - want) >= 0) return kWaitOK;
    if (__atomic_load_n(m.abortFlag, __ATOMIC_RELAXED) != 0) return kWaitAborted;
    if ((spins & 63) == 0 && emu_now() - t0 > timeout_s) {
      printf("EMU-TIMEOUT %s: waited %d s for %s >= 0x%x (it holds 0x%x)\n", who, timeout_s, what, want, v);
      return kWaitTimeout;
    }
    if (spins < 200)
      sched_yield();
    else
      usleep(20);
  }
}

namespace {

// ce_copy copies like a copy engine: in two parts, with a random pause
// between them, so that readers that do not wait see a partial chunk.
void ce_copy(char* dst, const char* src, uint64_t bytes, Rng& rng) {
  if (bytes == 0) return;
  const uint64_t cut = bytes >= 32 ? 16 * (1 + rng.next() % (bytes / 16 - 1)) : bytes;
  memcpy(dst, src, cut);
  if (rng.below(4) == 0) sched_yield();
  memcpy(dst + cut, src + cut, bytes - cut);
}

int exit_of(int w) { return w == kWaitTimeout ? kExitTimeout : kExitOK; }

}  // namespace

// push: a chunk past the end of r's piece is neither copied nor waited
// for, only signalled, so the kernel cannot count on such chunks arriving
// late. -inject nofreewait: rank 0 skips the wait for the slot's previous
// chunk to be freed. -inject earlydata: rank 0 writes a direct chunk's
// data flag before its copy, which lands only after rank 1's kernel has
// reduced the chunk (a copy engine still busy), so rank 1's land stream
// and kernel run ahead of the data.
// -inject nolandwait (rank 0's land stream does not wait): the peers hold
// each chunk of rank 0's piece back until rank 0's kernel has reduced it,
// so that the kernel runs ahead of the data however the threads are
// scheduled (a delay alone lost that race on a loaded machine).
// Both learn that a staged chunk was reduced from the kernel's reduced
// flag and a direct one from the reduced event (a direct kernel publishes
// nothing), so neither sleeps.
int push(StreamCtx& x) {
  const Call& c = x.c;
  const int n = x.s.n, me = x.me;
  const Bufs b = place(x.m, c, me);
  const uint64_t cb = c.chunk * c.es;
  const bool skipFree = x.o.inject == "nofreewait" && me == 0;
  const bool early = x.o.inject == "earlydata" && me == 0 && c.direct;
  char* peerRecv[goccl::kMaxRanks];
  for (int r = 0; r < n; r++) peerRecv[r] = place(x.m, c, r).recv;
  if (c.lazyRank == me && c.lazyLateUs > 0) usleep((useconds_t)c.lazyLateUs);
  for (u32 i = 0; i < c.chunks; i++) {
    if (c.lazyRank == me && x.rng.below(2) == 0) usleep((useconds_t)x.rng.below(300));
    for (int k = 1; k < n; k++) {
      const int r = (me + k) % n;
      uint64_t lo = 0;
      const uint64_t len = chunk_len(c, r, i, &lo);
      const char* src = b.send + (piece_off(c, r) + lo) * c.es;
      if (x.o.inject == "nolandwait" && r == 0 && len > 0) {
        const int w = c.direct ? x.wait(reduced_event(x.m, 0), c.seq + i, "rank 0's reduced event")
                               : x.wait(reduced_f(x.m, 0, i % kCESlots), c.seq + i,
                                        "rank 0's reduced[" + std::to_string(i % kCESlots) + "]");
        if (w != kWaitOK) return exit_of(w);
      }
      if (len > 0 && c.direct) {
        char* dst = peerRecv[r] + ((c.kind == kCeAR ? piece_off(c, r) : 0) + lo) * c.es;
        if (early) {
          // Copy only once r's kernel has reduced the chunk without it,
          // so that the early flag does its harm however the threads are
          // scheduled.
          store(data_f(x.m, r, me), c.seq + i);
          const int w = x.wait(reduced_event(x.m, r), c.seq + i, "rank " + std::to_string(r) + "'s reduced event");
          if (w != kWaitOK) return exit_of(w);
        }
        ce_copy(dst, src, len * c.es, x.rng);
      } else if (len > 0) {
        if (i >= c.depth && !skipFree) {
          const u32 slot = (i - c.depth) % kCESlots;
          const int w = x.wait(free_f(x.m, me, r, slot), c.seq + i - c.depth,
                               "free[" + std::to_string(r) + "][" + std::to_string(slot) + "]");
          if (w != kWaitOK) return exit_of(w);
        }
        ce_copy(x.m.stg[r] + ((uint64_t)(i % c.depth) * n + me) * cb, src, len * c.es, x.rng);
      }
      store(data_f(x.m, r, me), c.seq + i);
    }
  }
  return kExitOK;
}

Params ce_params(const Mem& m, const CeScenario& s, const Call& c, int me) {
  const Bufs b = place(m, c, me);
  Params p{};
  p.send = (uint64_t)(b.send + piece_off(c, me) * c.es);
  p.recv = (uint64_t)(c.kind == kCeAR ? b.recv + piece_off(c, me) * c.es : b.recv);
  p.count = piece_len(c, me);
  p.abortFlag = (uint64_t)m.abortFlag;
  p.signals = (uint64_t)m.ws[me];
  for (int r = 0; r < s.n; r++) {
    p.peerSignals[r] = (uint64_t)m.ws[r];
    p.peerStaging[r] = c.direct ? 0 : (uint64_t)m.stg[r];  // (direct: nothing is staged)
  }
  p.rank = me;
  p.nranks = s.n;
  p.flags = c.direct ? goccl::kFlagCEDirect : 0;
  p.elemSize = (u32)c.es;
  p.ceChunks = c.chunks;
  p.ceChunk = c.chunk;
  p.ceSeq = c.seq;
  p.ceDepth = c.depth;
  return p;
}

void direct_params(Params& p, const Mem& m, const Call& c, int me, u32 i, uint64_t lo, uint64_t n) {
  const Bufs b = place(m, c, me);
  p.send = (uint64_t)(b.send + (piece_off(c, me) + lo) * c.es);
  p.recv = (uint64_t)(b.recv + ((c.kind == kCeAR ? piece_off(c, me) : 0) + lo) * c.es);
  p.count = n;
  p.ceChunks = 1;
  p.ceChunk = n;
  p.ceSeq = c.seq + i;
  p.ceDepth = 1;
}

// land: the kernel polls landed, never the data flags (on a GPU a flag
// seen by a kernel need not order the peer's data written before it; a
// stream wait orders what follows it). In direct mode it writes landed
// once for the whole call, as the host does (collectives/gpu ceDirect),
// and launches each chunk's kernel behind that chunk's data waits, with
// this rank's slow reader settings, returning the exit code of a kernel
// that failed; once the kernel has returned it records the reduced event
// (the host's ce.reduced: recorded at AllReduce only, for the spread,
// here at ReduceScatter too, for the injections and the checks).
// -inject nolandwait: rank 0 writes landed without waiting, so its kernel
// (direct: the chunk's kernel it then launches) reads chunks that a lazy
// sender has not sent yet.
int land(StreamCtx& x) {
  const Call& c = x.c;
  const int n = x.s.n, me = x.me;
  const bool skipWait = x.o.inject == "nolandwait" && me == 0;
  Params p = ce_params(x.m, x.s, c, me);
  bool late = c.slowRank == me;  // (the first kernel starts late)
  if (c.direct) emu_set_slow(c.slowRank == me ? kSlowUs : 0, c.slowBlock, c.slowBlock >= 0 ? c.delayUs : 0);
  if (c.direct) store(landed_f(x.m, me), c.seq + c.chunks - 1);
  for (u32 i = 0; i < c.chunks; i++) {
    uint64_t lo = 0;
    const uint64_t len = chunk_len(c, me, i, &lo);
    if (len == 0) break;
    for (int k = 1; k < n && !skipWait; k++) {
      const int r = (me + k) % n;
      const int w = x.wait(data_f(x.m, me, r), c.seq + i, "data[" + std::to_string(r) + "]");
      if (w != kWaitOK) return exit_of(w);
    }
    if (!c.direct) {
      store(landed_f(x.m, me), c.seq + i);
      continue;
    }
    if (late) usleep((useconds_t)c.delayUs), late = false;
    direct_params(p, x.m, c, me, i, lo, len);
    const std::string label = x.who + ", chunk " + std::to_string(i) + "'s kernel";
    const int rc = emu_launch(ce_kernel_for(c.dt, c.op), p, c.grid, c.threads, x.o.timeout, label.c_str());
    if (rc != kExitOK) return rc;
    store(reduced_event(x.m, me), c.seq + i);  // (the host records ce.reduced here)
  }
  return kExitOK;
}

int spread(StreamCtx& x) {
  const Call& c = x.c;
  const int n = x.s.n, me = x.me;
  const Bufs b = place(x.m, c, me);
  char* peerRecv[goccl::kMaxRanks];
  for (int r = 0; r < n; r++) peerRecv[r] = place(x.m, c, r).recv;
  for (u32 i = 0; i < c.chunks; i++) {
    uint64_t lo = 0;
    const uint64_t len = chunk_len(c, me, i, &lo);
    if (len == 0) break;
    const u32 slot = i % kCESlots;
    const int w = c.direct ? x.wait(reduced_event(x.m, me), c.seq + i, "the reduced event")
                           : x.wait(reduced_f(x.m, me, slot), c.seq + i, "reduced[" + std::to_string(slot) + "]");
    if (w != kWaitOK) return exit_of(w);
    const uint64_t at = (piece_off(c, me) + lo) * c.es;
    for (int k = 1; k < n; k++) ce_copy(peerRecv[(me + k) % n] + at, b.recv + at, len * c.es, x.rng);
  }
  for (int k = 1; k < n; k++) store(done_f(x.m, (me + k) % n, me), c.seq);
  return kExitOK;
}

// mute: once every rank's kernel has been running (blocked) for a while,
// it raises the abort flag; had a kernel already returned, the scenario
// would test nothing.
int mute(StreamCtx& x) {
  const double t0 = emu_now();
  while (load(x.m.running) != (u32)x.s.n) {
    if (emu_now() - t0 > x.o.timeout) {
      printf("EMU-TIMEOUT %s: the kernels never all started\n", x.who.c_str());
      return kExitTimeout;
    }
    usleep(1000);
  }
  usleep(200 * 1000);
  const u32 running = load(x.m.running);
  __atomic_store_n(x.m.abortFlag, 1u, __ATOMIC_SEQ_CST);
  if (running != (u32)x.s.n) {
    printf("FAIL %s: only %u of %d kernels still waited when the abort flag was raised\n", x.who.c_str(), running,
           x.s.n);
    return kExitCheck;
  }
  return kExitOK;
}

int reap(pid_t pid, const std::string& who, bool killed) {
  if (pid <= 0) return pid == 0 ? kExitOK : kExitCrash;
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (killed) return kExitOK;
  if (WIFSIGNALED(st)) printf("EMU-CRASH %s: died of signal %d\n", who.c_str(), WTERMSIG(st));
  return WIFEXITED(st) ? WEXITSTATUS(st) : kExitCrash;
}

}  // namespace emu_ce
