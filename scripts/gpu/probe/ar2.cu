// ar2.cu: where the time of goccl's direct-mode AllReduce goes at 2 ranks,
// and what reshaping it would give. One process per GPU, as the launcher
// runs them, each message split into two pieces: rank r owns piece r. The
// pattern is goccl's (collectives/gpu/cereduce.go, ceDirect): a ready
// handshake on stream flags; on the calling stream, for each chunk, a copy
// of my part of the peer's piece into the peer's receive buffer, its data
// flag written from a signal stream behind an event; on a land stream, the
// wait for the peer's chunk, then a kernel that reduces it in place
// (recv = send + recv); on a spread stream, behind the kernel's event, the
// copy of the reduced chunk into the peer; done on stream flags.
//
// Variants (kModes): other splits of a piece into chunks; the spreads
// queued on the calling stream behind all the pushes rather than on a
// stream of their own; chunk 0 pushed into a staging area before the ready
// wait (safe in goccl, because every AllReduce ends with done, which follows
// the peer's reads of its staging); the reduction kernel's grid; and, for
// timing only (unsafe), without the ready wait or without the done wait.
// One call per marked mode is traced: timing events after each step on
// each stream, in us from the call's start on each rank.
//
// What it showed on 2x H200 (docs/perf.md; docs/perf/2xH200-2026-11-30/
// probes/ar2-probe.txt): at 128 MiB no
// variant passes the runs' spread (about 345-362 GB/s), not even with no
// handshake at all; the link carries a copy from ready to the last
// spread, at about 357 GB/s over the call.
//
// Build and run on the GPU machine (two GPUs; never touches multicast):
//   nvcc -O3 -arch=sm_90 -o /tmp/ar2 scripts/gpu/probe/ar2.cu -lcuda && /tmp/ar2
// Output: the kernel's speed alone; per size and mode, us per call and
// busbw (the slower process's median); the traces. Every mode's data is
// checked against the sum computed here, on both ranks, after its timing.
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"
#include "twoproc.cuh"

constexpr size_t MiB = 1 << 20;
constexpr int kMaxChunks = 6;

// A mode: chunk sizes in 16ths of a piece (0-terminated), where the spreads
// go, chunk 0 into staging, the kernel's blocks, handshakes left out.
struct Mode {
  const char* name;
  int parts[kMaxChunks];
  bool serial;  // spreads on the calling stream, after every push
  bool land;    // chunk 0 into the peer's staging, before the ready wait
  int grid;
  bool noReady, noDone;  // unsafe: timing only
  bool trace;
};
const Mode kModes[] = {
    {"goccl 8/8", {8, 8}, false, false, 64, false, false, true},
    {"g32", {8, 8}, false, false, 32, false, false, false},
    {"g132", {8, 8}, false, false, 132, false, false, false},
    {"9/7", {9, 7}, false, false, 64, false, false, false},
    {"10/6", {10, 6}, false, false, 64, false, false, false},
    {"12/4", {12, 4}, false, false, 64, false, false, false},
    {"8/4/4", {8, 4, 4}, false, false, 64, false, false, false},
    {"serial 8/8", {8, 8}, true, false, 64, false, false, true},
    {"serial 10/6", {10, 6}, true, false, 64, false, false, false},
    {"serial 8/4/4", {8, 4, 4}, true, false, 64, false, false, false},
    {"land 8/8", {8, 8}, false, true, 64, false, false, true},
    {"land 4/6/6", {4, 6, 6}, false, true, 64, false, false, false},
    {"land serial 8/8", {8, 8}, true, true, 64, false, false, false},
    {"g96", {8, 8}, false, false, 96, false, false, false},
    {"serial g132", {8, 8}, true, false, 132, false, false, false},
    {"land serial g132", {8, 8}, true, true, 132, false, false, false},
    {"no ready (unsafe)", {8, 8}, false, false, 64, true, false, false},
    {"no done (unsafe)", {8, 8}, false, false, 64, false, true, false},
    {"neither (unsafe)", {8, 8}, false, false, 64, true, true, false},
};
constexpr int kNModes = sizeof(kModes) / sizeof(kModes[0]);
const size_t kSizes[] = {128 * MiB, 256 * MiB};
constexpr int kNSizes = sizeof(kSizes) / sizeof(kSizes[0]);
constexpr size_t kStage = 64 * MiB;  // the largest chunk 0 that lands: half of a 256 MiB call's piece

constexpr int kMaxRounds = 5;  // AR2_ROUNDS, default 3: the modes alternate round by round

struct Shared {
  std::atomic<int> barrier[2];
  double result[2][kMaxRounds][kNSizes * kNModes];
};

__host__ __device__ inline float val(size_t i, unsigned seed) {
  return (float)(((unsigned)i * 2654435761u ^ seed) & 1023u);
}
__global__ void fillv(float* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = val(i, seed);
}
// out = a + b in float4, each block a contiguous part, as goccl's
// reduce_multi splits a chunk.
__global__ void __launch_bounds__(512) add4(const float4* a, const float4* b, float4* out, size_t n) {
  const size_t per = (n + gridDim.x - 1) / gridDim.x;
  const size_t lo = per * blockIdx.x < n ? per * blockIdx.x : n, hi = lo + per < n ? lo + per : n;
  size_t i = lo + threadIdx.x;
  for (; i + 3 * blockDim.x < hi; i += 4 * blockDim.x) {
    float4 x[4], y[4];
#pragma unroll
    for (int u = 0; u < 4; u++) x[u] = a[i + u * blockDim.x], y[u] = b[i + u * blockDim.x];
#pragma unroll
    for (int u = 0; u < 4; u++)
      out[i + u * blockDim.x] = make_float4(x[u].x + y[u].x, x[u].y + y[u].y, x[u].z + y[u].z, x[u].w + y[u].w);
  }
  for (; i < hi; i += blockDim.x) out[i] = make_float4(a[i].x + b[i].x, a[i].y + b[i].y, a[i].z + b[i].z, a[i].w + b[i].w);
}
__global__ void countbad(const float* p, size_t n, unsigned long long* bad) {
  unsigned long long b = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (p[i] != val(i, 7) + val(i, 8)) b++;
  if (b) atomicAdd(bad, b);
}

// kernelAlone times add4 over 32 MiB of output at several grids (rank 0).
void kernelAlone() {
  const size_t bytes = 32 * MiB;
  float *a, *b, *c;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMalloc(&c, bytes));
  fillv<<<264, 512>>>(a, bytes / 4, 1);
  fillv<<<264, 512>>>(b, bytes / 4, 2);
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  printf("add4 alone, 32 MiB out (96 MiB moved):");
  for (int grid : {32, 64, 132, 264}) {
    for (int i = 0; i < 3; i++) add4<<<grid, 512>>>((float4*)a, (float4*)b, (float4*)c, bytes / 16);
    CK(cudaEventRecord(t0));
    for (int i = 0; i < 20; i++) add4<<<grid, 512>>>((float4*)a, (float4*)b, (float4*)c, bytes / 16);
    CK(cudaEventRecord(t1));
    CK(cudaEventSynchronize(t1));
    float ms;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    const double us = 1000.0 * ms / 20;
    printf("  grid %d: %.1f us (%.0f GB/s)", grid, us, 3 * bytes / us / 1e3);
  }
  printf("\n");
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(c));
}

int run(int g, int sock, Shared* sh) {
  const int p = 1 - g;
  CK(cudaSetDevice(g));
  if (g == 0) kernelAlone();
  cudaStream_t s, land, spread, sig;
  for (cudaStream_t* st : {&s, &land, &spread, &sig}) CK(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking));
  cudaEvent_t fork, joinLand, joinSpread, joinSig, evData[kMaxChunks], evRed[kMaxChunks], t0, t1;
  for (cudaEvent_t* e : {&fork, &joinLand, &joinSpread, &joinSig}) CK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  for (int i = 0; i < kMaxChunks; i++) {
    CK(cudaEventCreateWithFlags(&evData[i], cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&evRed[i], cudaEventDisableTiming));
  }
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  const size_t maxBytes = kSizes[kNSizes - 1];
  float *in, *out, *stage;
  unsigned* flags;
  CK(cudaMalloc(&in, maxBytes));
  CK(cudaMalloc(&out, maxBytes));
  CK(cudaMalloc(&stage, kStage));
  CK(cudaMalloc(&flags, 4096));
  CK(cudaMemset(flags, 0, 4096));
  fillv<<<264, 512>>>(in, maxBytes / 4, 7 + g);
  unsigned long long* bad;
  CK(cudaMalloc(&bad, 8));
  struct Handles {
    cudaIpcMemHandle_t out, stage, flags;
  };
  const Handles mine{export_mem(out), export_mem(stage), export_mem(flags)};
  Handles theirs;
  if (!swap_with_peer("ar2: exchange", sock, mine, theirs)) return 1;
  float* pout = open_mem<float>(theirs.out);
  float* pstage = open_mem<float>(theirs.stage);
  unsigned* pflags = open_mem<unsigned>(theirs.flags);
  CK(cudaDeviceSynchronize());
  int gen = 0;
  host_barrier(sh, g, gen);

  // Flags, one u32 each, written by the peer with the call's number:
  // 0 ready, 1 done, 2+i chunk i's data.
  unsigned seq = 0;
  auto signal = [&](cudaStream_t st, int k) {
    CKD(cuStreamWriteValue32((CUstream)st, (CUdeviceptr)(pflags + k), seq, CU_STREAM_WRITE_VALUE_DEFAULT));
  };
  auto wait = [&](cudaStream_t st, int k) {
    CKD(cuStreamWaitValue32((CUstream)st, (CUdeviceptr)(flags + k), seq, CU_STREAM_WAIT_VALUE_GEQ));
  };
  // The traced call's events: a timing event after a step, with its name.
  std::vector<std::pair<cudaEvent_t, std::string>> marks;
  bool tracing = false;
  auto mark = [&](cudaStream_t st, const std::string& what) {
    if (!tracing) return;
    cudaEvent_t e;
    CK(cudaEventCreate(&e));
    CK(cudaEventRecord(e, st));
    marks.push_back({e, what});
  };

  // settle waits for e, or after 10 s prints the flags and ends the
  // process: a stuck wait says which.
  cudaStream_t dbg;
  CK(cudaStreamCreateWithFlags(&dbg, cudaStreamNonBlocking));
  unsigned* hflags;
  CK(cudaMallocHost(&hflags, 64));
  auto settle = [&](cudaEvent_t e, const char* where) {
    for (int k = 0;; k++) {
      const cudaError_t r = cudaEventQuery(e);
      if (r == cudaSuccess) return;
      if (r != cudaErrorNotReady) CK(r);
      if (k == 10000) {
        CK(cudaMemcpyAsync(hflags, flags, 64, cudaMemcpyDeviceToHost, dbg));
        CK(cudaStreamSynchronize(dbg));
        fprintf(stderr, "ar2: rank %d stuck at %s, call %u: flags", g, where, seq);
        for (int i = 0; i < 2 + kMaxChunks; i++) fprintf(stderr, " %u", hflags[i]);
        fprintf(stderr, "\n");
        _exit(3);
      }
      usleep(1000);
    }
  };
  auto settleAll = [&](const char* where) {
    for (cudaStream_t st : {s, land, spread, sig}) {
      CK(cudaEventRecord(t1, st));
      settle(t1, where);
    }
  };

  const int rounds = std::min(kMaxRounds, std::max(1, getenv("AR2_ROUNDS") ? atoi(getenv("AR2_ROUNDS")) : 3));
  for (int round = 0; round < rounds; round++) {
    int idx = 0;
    for (size_t bytes : kSizes) {
      const size_t piece = bytes / 2;
      for (const Mode& m : kModes) {
        // Chunk bounds within a piece, in bytes (16-byte multiples).
        std::vector<size_t> cut{0};
        for (int i = 0; i < kMaxChunks && m.parts[i]; i++) cut.push_back(cut.back() + piece / 16 * m.parts[i]);
        cut.back() = piece;
        const int nc = (int)cut.size() - 1;
        if (m.land && cut[1] > kStage) {
          fprintf(stderr, "ar2: %s: chunk 0 exceeds the staging\n", m.name);
          return 1;
        }
        CK(cudaMemsetAsync(out, 0xff, maxBytes, s));
        CK(cudaStreamSynchronize(s));
        if (getenv("AR2_DEBUG")) fprintf(stderr, "rank %d: %s, %zu MiB\n", g, m.name, bytes / MiB);
        host_barrier(sh, g, gen);
        auto call = [&]() {
          seq++;
          mark(s, "start");
          signal(s, 0);
          CK(cudaEventRecord(fork, s));
          for (cudaStream_t st : {land, spread, sig}) CK(cudaStreamWaitEvent(st, fork, 0));
          auto push = [&](int i) {
            const size_t lo = cut[i], n = cut[i + 1] - cut[i];
            char* dst = (m.land && i == 0) ? (char*)pstage : (char*)pout + p * piece + lo;
            CK(cudaMemcpyAsync(dst, (const char*)in + p * piece + lo, n, cudaMemcpyDeviceToDevice, s));
            mark(s, "pushed " + std::to_string(i));
            CK(cudaEventRecord(evData[i], s));
            CK(cudaStreamWaitEvent(sig, evData[i], 0));
            signal(sig, 2 + i);
          };
          // The reduced chunk i into the peer, on st behind its kernel.
          auto spreadChunk = [&](int i, cudaStream_t st) {
            const size_t at = g * piece + cut[i], n = cut[i + 1] - cut[i];
            CK(cudaStreamWaitEvent(st, evRed[i], 0));
            CK(cudaMemcpyAsync((char*)pout + at, (const char*)out + at, n, cudaMemcpyDeviceToDevice, st));
            mark(st, "spread " + std::to_string(i));
          };
          if (m.land) push(0);
          if (!m.noReady) wait(s, 0);
          mark(s, "ready");
          for (int i = 0; i < nc; i++) {
            if (!(m.land && i == 0)) push(i);
            const size_t lo = cut[i], n = cut[i + 1] - cut[i];
            float* mineOut = (float*)((char*)out + g * piece + lo);
            const float* other = (m.land && i == 0) ? stage : mineOut;
            wait(land, 2 + i);
            mark(land, "landed " + std::to_string(i));
            add4<<<m.grid, 512, 0, land>>>((const float4*)((const char*)in + g * piece + lo), (const float4*)other,
                                           (float4*)mineOut, n / 16);
            CK(cudaGetLastError());
            mark(land, "reduced " + std::to_string(i));
            CK(cudaEventRecord(evRed[i], land));
            if (!m.serial) spreadChunk(i, spread);
          }
          if (m.serial)
            for (int i = 0; i < nc; i++) spreadChunk(i, s);
          signal(m.serial ? s : spread, 1);
          CK(cudaEventRecord(joinLand, land));
          CK(cudaEventRecord(joinSpread, spread));
          CK(cudaEventRecord(joinSig, sig));
          for (cudaEvent_t e : {joinLand, joinSpread, joinSig}) CK(cudaStreamWaitEvent(s, e, 0));
          if (!m.noDone) wait(s, 1);
          mark(s, "end");
        };
        for (int i = 0; i < 5; i++) call();
        std::vector<double> ts;
        for (int rep = 0; rep < 5; rep++) {
          CK(cudaEventRecord(t0, s));
          for (int i = 0; i < 20; i++) call();
          CK(cudaEventRecord(t1, s));
          settle(t1, "timing");
          float ms;
          CK(cudaEventElapsedTime(&ms, t0, t1));
          ts.push_back(1000.0 * ms / 20);
        }
        std::sort(ts.begin(), ts.end());
        settleAll("timed calls");
        CK(cudaMemset(bad, 0, 8));
        CK(cudaDeviceSynchronize());
        host_barrier(sh, g, gen);  // the peer's copies into us are done (its device synced)
        countbad<<<264, 512>>>(out, bytes / 4, bad);
        unsigned long long b;
        CK(cudaMemcpy(&b, bad, 8, cudaMemcpyDeviceToHost));
        sh->result[g][round][idx++] = b ? -ts[2] : ts[2];
        if (m.trace && round == 0) {
          tracing = true;
          call();
          tracing = false;
          settleAll("trace");
          for (int turn = 0; turn < 2; turn++) {
            if (turn == g) {
              printf("trace %s, %zu MiB, rank %d:", m.name, bytes / MiB, g);
              for (auto& [e, what] : marks) {
                float ms;
                CK(cudaEventElapsedTime(&ms, marks[0].first, e));
                printf(" %s %.1f;", what.c_str(), 1000.0 * ms);
              }
              printf("\n");
              fflush(stdout);
            }
            host_barrier(sh, g, gen);
          }
          for (auto& mk : marks) CK(cudaEventDestroy(mk.first));
          marks.clear();
        }
        host_barrier(sh, g, gen);
      }
    }
  }
  if (g == 0) {
    printf("%-20s", "busbw GB/s by round");
    for (size_t bytes : kSizes) printf(" %8zuM%*s", bytes / MiB, 7 * rounds - 9, "");
    printf("\n");
    for (int mi = 0; mi < kNModes; mi++) {
      printf("%-20s", kModes[mi].name);
      for (int si = 0; si < kNSizes; si++) {
        printf(" ");
        for (int r = 0; r < rounds; r++) {
          const double a = sh->result[0][r][si * kNModes + mi], b = sh->result[1][r][si * kNModes + mi];
          const double t = std::max(std::abs(a), std::abs(b));
          printf(" %5.1f%s", kSizes[si] / t / 1e3, a > 0 && b > 0 ? " " : "!");
        }
      }
      printf("\n");
    }
    printf("(! : wrong data)\n");
  }
  CK(cudaDeviceSynchronize());
  return 0;
}

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return two_processes<Shared>("ar2", run);
}
