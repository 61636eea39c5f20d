// ipcev.cu: the floor under goccl's copy-engine AllGather, one process per
// GPU as the launcher runs them. It times the AllGather's pattern (ready,
// copy into the peer, done) with the handshakes on stream flags (goccl's)
// and on interprocess events, with done alone and with none (timing only),
// out of place with the local copy forked at different points, and with
// each call's copy cut into chunks (kModes below).
//
// An interprocess event's wait binds to the most recent record at the time
// of the host's cuStreamWaitEvent call, so the hosts must order a record
// before the peer's wait and a wait before the next record of the same
// event. Here each kind of event is a ring of kRing events and two counters
// per process in shared memory say which round each host recorded and
// waited; a host spins on the peer's counter only when it runs kRing rounds
// ahead.
//
// Build and run on the GPU machine (two GPUs; never touches multicast):
//   nvcc -O3 -arch=sm_90 -o /tmp/ipcev scripts/gpu/probe/ipcev.cu -lcuda && /tmp/ipcev
// Output: per size and mode, us per call and busbw, the slower process's
// time; every mode's data (both slots) checked after its timing.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.cuh"
#include "twoproc.cuh"

constexpr size_t MiB = 1 << 20;
constexpr int kRing = 8;
// Modes: ready and done on flags; on events; done alone on flags (what a
// design that hid ready entirely could reach; unsafe, timing only); no
// handshake at all (the copies back to back).
// Then out of place with flags, the local slot copied on a side stream
// between ready and the peer copy, joined before done: by a copy engine or
// by an SM kernel; and by a copy engine in goccl's order (forked before
// ready, joined after the done wait) and forked after ready but joined late.
// Last, no handshake again, each call's copy in 4 chunks on one stream, and
// alternating between two (do chunk boundaries cost less when the next
// copy is queued on another engine?).
constexpr int kModes = 10;
const char* kModeNames[kModes] = {"flags",         "events",        "done only",     "no sync",
                                  "oop, CE local", "oop, SM local", "oop, CE early", "oop, CE late",
                                  "4 chunks",      "4 chunks, 2 streams"};
enum { kReady, kDone, kKinds };

// Shared between the two processes (mapped before fork).
struct Shared {
  std::atomic<long> rec[2][kKinds];     // last round process g recorded
  std::atomic<long> waited[2][kKinds];  // last round process g waited on the peer's
  std::atomic<int> barrier[2];
  double result[2][64];
};
const size_t kSizes[] = {0, 8 * MiB, 32 * MiB, 128 * MiB, 256 * MiB, 512 * MiB};
static_assert(sizeof(kSizes) / sizeof(kSizes[0]) * kModes <= 64, "Shared::result holds every (size, mode)");

__global__ void fillv(unsigned* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (unsigned)i * 2654435761u ^ seed;
}
__global__ void __launch_bounds__(512) copy16(const uint4* src, uint4* dst, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}
__global__ void countbad(const unsigned* p, size_t n, unsigned seed, unsigned long long* bad) {
  unsigned long long b = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (p[i] != ((unsigned)i * 2654435761u ^ seed)) b++;
  if (b) atomicAdd(bad, b);
}

void spin_until(std::atomic<long>& c, long v) {
  while (c.load(std::memory_order_acquire) < v) {
  }
}

int run(int g, int sock, Shared* sh) {
  const int p = 1 - g;
  CK(cudaSetDevice(g));
  cudaStream_t s, side;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  const size_t maxBytes = 512 * MiB;
  unsigned* out;
  CK(cudaMalloc(&out, maxBytes));
  unsigned* in;  // out of place: our slot's source
  CK(cudaMalloc(&in, maxBytes / 2));
  unsigned* flags;
  CK(cudaMalloc(&flags, 4096));
  CK(cudaMemset(flags, 0, 4096));
  unsigned long long* bad;
  CK(cudaMalloc(&bad, 8));
  cudaEvent_t ev[kKinds][kRing], pev[kKinds][kRing], t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  struct Handles {
    cudaIpcMemHandle_t out, flags;
    cudaIpcEventHandle_t ev[kKinds][kRing];
  } mine, theirs;
  mine.out = export_mem(out);
  mine.flags = export_mem(flags);
  for (int k = 0; k < kKinds; k++)
    for (int i = 0; i < kRing; i++) {
      CK(cudaEventCreateWithFlags(&ev[k][i], cudaEventDisableTiming | cudaEventInterprocess));
      CK(cudaIpcGetEventHandle(&mine.ev[k][i], ev[k][i]));
    }
  if (!swap_with_peer("ipcev: exchange", sock, mine, theirs)) return 1;
  unsigned* pout = open_mem<unsigned>(theirs.out);
  unsigned* pflags = open_mem<unsigned>(theirs.flags);
  for (int k = 0; k < kKinds; k++)
    for (int i = 0; i < kRing; i++) CK(cudaIpcOpenEventHandle(&pev[k][i], theirs.ev[k][i]));
  CK(cudaDeviceSynchronize());
  int gen = 0;
  host_barrier(sh, g, gen);

  unsigned fseq = 0;          // flag values
  long rk[kKinds] = {0, 0};   // event rounds per kind, the same in both processes
  // One handshake of a kind: this process announces, then waits for the peer's.
  auto ev_sync = [&](int k) {
    const long r = ++rk[k];
    const int slot = (int)(r % kRing);
    // Our record of slot replaces round r-kRing's: the peer must have
    // issued its wait on that one.
    spin_until(sh->waited[p][k], r - kRing);
    CK(cudaEventRecord(ev[k][slot], s));
    sh->rec[g][k].store(r, std::memory_order_release);
    spin_until(sh->rec[p][k], r);
    CK(cudaStreamWaitEvent(s, pev[k][slot], 0));
    sh->waited[g][k].store(r, std::memory_order_release);
  };
  // The same by stream memory operations, as goccl does it.
  auto fl_sync = [&](int k) {
    CKD(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)(pflags + 32 * k + g), fseq, CU_STREAM_WRITE_VALUE_DEFAULT));
    CKD(cuStreamWaitValue32((CUstream)s, (CUdeviceptr)(flags + 32 * k + p), fseq, CU_STREAM_WAIT_VALUE_GEQ));
  };
  int idx = 0;
  for (size_t bytes : kSizes) {
    const size_t half = bytes / 2;
    for (int mode = 0; mode < kModes; mode++) {
      const bool oopMode = mode >= 4 && mode <= 7;
      // Poison ours, fill our half (and our input, out of place).
      CK(cudaMemsetAsync(out, 0xff, maxBytes, s));
      if (!oopMode) fillv<<<264, 512, 0, s>>>(out + g * half / 4, half / 4, 7 + g);
      fillv<<<264, 512, 0, s>>>(in, half / 4, 7 + g);
      CK(cudaStreamSynchronize(s));
      host_barrier(sh, g, gen);
      const bool oop = oopMode && half;
      const bool early = mode == 6;             // fork before ready
      const bool late = mode == 6 || mode == 7;  // join after the done wait
      const bool readyF = mode == 0 || oopMode, doneF = mode == 0 || mode == 2 || oopMode;
      const int chunks = mode >= 8 ? 4 : 1;
      const bool alt = mode == 9;  // chunks alternate between two streams
      auto local = [&]() {
        CK(cudaEventRecord(fork, s));
        CK(cudaStreamWaitEvent(side, fork, 0));
        if (mode == 5)
          copy16<<<264, 512, 0, side>>>((const uint4*)in, (uint4*)(out + g * half / 4), half / 16);
        else
          CK(cudaMemcpyAsync(out + g * half / 4, in, half, cudaMemcpyDeviceToDevice, side));
        CK(cudaEventRecord(join, side));
      };
      auto call = [&]() {
        fseq++;
        if (oop && early) local();
        if (readyF) fl_sync(kReady);
        if (mode == 1) ev_sync(kReady);
        if (oop && !early) local();
        const unsigned* src = oopMode ? in : out + g * half / 4;
        if (alt && half) {
          CK(cudaEventRecord(fork, s));
          CK(cudaStreamWaitEvent(side, fork, 0));
        }
        const size_t piece = half / chunks;
        for (int j = 0; j < chunks && half; j++)
          CK(cudaMemcpyAsync(pout + (g * half + j * piece) / 4, src + j * piece / 4, piece, cudaMemcpyDeviceToDevice,
                             alt && j % 2 ? side : s));
        if (alt && half) {
          CK(cudaEventRecord(join, side));
          CK(cudaStreamWaitEvent(s, join, 0));
        }
        if (oop && !late) CK(cudaStreamWaitEvent(s, join, 0));
        if (doneF) fl_sync(kDone);
        if (mode == 1) ev_sync(kDone);
        if (oop && late) CK(cudaStreamWaitEvent(s, join, 0));
      };
      for (int i = 0; i < 5; i++) call();
      const int reps = bytes >= 128 * MiB ? 20 : 200;
      std::vector<double> ts;
      for (int rep = 0; rep < 5; rep++) {
        CK(cudaEventRecord(t0, s));
        for (int i = 0; i < reps; i++) call();
        CK(cudaEventRecord(t1, s));
        CK(cudaEventSynchronize(t1));
        float ms;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        ts.push_back(1000.0 * ms / reps);
      }
      std::sort(ts.begin(), ts.end());
      CK(cudaMemset(bad, 0, 8));
      host_barrier(sh, g, gen);  // the peer's copies into us are done (its stream synced)
      countbad<<<264, 512>>>(out + p * half / 4, half / 4, 7 + p, bad);
      countbad<<<264, 512>>>(out + g * half / 4, half / 4, 7 + g, bad);
      unsigned long long b;
      CK(cudaMemcpy(&b, bad, 8, cudaMemcpyDeviceToHost));
      sh->result[g][idx] = b ? -ts[2] : ts[2];
      idx++;
      host_barrier(sh, g, gen);
    }
  }
  if (g == 0) {
    printf("us per call and busbw GB/s (the slower process)\n%10s", "bytes");
    for (const char* n : kModeNames) printf(" %21s", n);
    printf(" check\n");
    idx = 0;
    for (size_t bytes : kSizes) {
      bool ok = true;
      printf("%10zu", bytes);
      for (int m = 0; m < kModes; m++, idx++) {
        const double a = sh->result[0][idx], b = sh->result[1][idx];
        ok = ok && a > 0 && b > 0;
        const double t = std::max(std::abs(a), std::abs(b));
        printf(" %10.2f %10.1f", t, bytes / 2 / t / 1e3);
      }
      printf(" %s\n", ok ? "ok" : "BAD");
    }
  }
  CK(cudaDeviceSynchronize());
  return 0;
}

int main() { return two_processes<Shared>("ipcev", run); }
