// mix.cu: do SM stores into the peer fill the link where the copy engines
// leave it idle? One process per GPU, as the launcher runs them. Each call
// moves T bytes into the peer (both GPUs at once, as a reduction's pushes
// do) behind a ready handshake and before a done handshake on stream
// flags (goccl's copy-engine pattern): a share by the copy engines (one
// copy, or chunks back to back on one stream, as direct mode cuts them),
// on the calling stream itself or on a stream forked from it and joined
// back, and the rest at the same time by a kernel of G blocks storing
// into the peer's memory, on a stream of its own.
//
// What it showed on 2x H200 (docs/perf.md; docs/perf/2xH200-2026-11-30/
// probes/mix-probe.txt): the fork
// and join cost a copy about 11 us per call; a kernel's share of 2-4 MiB
// makes that up, but beside a copy on the calling stream it gains nothing
// from 8 to 512 MiB; and a kernel alone does no better.
//
// Build and run on the GPU machine (two GPUs; never touches multicast):
//   nvcc -O3 -arch=sm_90 -o /tmp/mix scripts/gpu/probe/mix.cu -lcuda && /tmp/mix
// Output: per size and mode, us per call and GB/s one way (T over the
// slower process's time); every mode's data checked after its timing.
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

// A mode: the kernel's share (a fraction sm16/16 of T, or smMiB MiB when
// sm16 is 0), the copy engines' chunks (for the rest), the kernel's
// blocks, and whether the copies run on the calling stream itself (as
// goccl's AllGather does) rather than on a stream forked from it.
struct Mode {
  const char* name;
  int sm16;
  int smMiB;
  int chunks;
  int grid;
  bool inl;
};
const Mode kModes[] = {
    {"CE on s", 0, 0, 1, 0, true},          {"CE forked", 0, 0, 1, 0, false},
    {"CE on s + SM 4M", 0, 4, 1, 16, true}, {"CE forked + SM 4M", 0, 4, 1, 16, false},
    {"CE on s + SM 1/8", 2, 0, 1, 16, true}, {"CE on s x4", 0, 0, 4, 0, true},
    {"CE on s x4 + SM 4M", 0, 4, 4, 16, true}, {"CE forked x4 + SM 4M", 0, 4, 4, 16, false},
    {"SM only, 64 blocks", 16, 0, 1, 64, true},  {"SM only, 128 blocks", 16, 0, 1, 128, true},
    {"CE on s + SM 1/4", 4, 0, 1, 32, true},     {"CE on s + SM 1/2", 8, 0, 1, 64, true},
};
constexpr int kNModes = sizeof(kModes) / sizeof(kModes[0]);
const size_t kSizes[] = {8 * MiB, 16 * MiB, 64 * MiB, 128 * MiB, 256 * MiB, 512 * MiB};
constexpr int kNSizes = sizeof(kSizes) / sizeof(kSizes[0]);

struct Shared {
  std::atomic<int> barrier[2];
  double result[2][kNSizes * kNModes];
};

__global__ void fillv(unsigned* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (unsigned)i * 2654435761u ^ seed;
}
// Four 16-byte loads in flight per thread before their stores.
__global__ void __launch_bounds__(512) push16(const uint4* src, uint4* dst, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; u++) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; u++) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}
__global__ void countbad(const unsigned* p, size_t n, unsigned seed, unsigned long long* bad) {
  unsigned long long b = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (p[i] != ((unsigned)i * 2654435761u ^ seed)) b++;
  if (b) atomicAdd(bad, b);
}

int run(int g, int sock, Shared* sh) {
  const int p = 1 - g;
  CK(cudaSetDevice(g));
  cudaStream_t s, ce, sm;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&ce, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&sm, cudaStreamNonBlocking));
  cudaEvent_t fork, joinCE, joinSM, t0, t1;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&joinCE, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&joinSM, cudaEventDisableTiming));
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  const size_t maxBytes = 512 * MiB;
  unsigned *in, *out, *flags;
  CK(cudaMalloc(&in, maxBytes));
  CK(cudaMalloc(&out, maxBytes));
  CK(cudaMalloc(&flags, 4096));
  CK(cudaMemset(flags, 0, 4096));
  unsigned long long* bad;
  CK(cudaMalloc(&bad, 8));
  struct Handles {
    cudaIpcMemHandle_t out, flags;
  };
  const Handles mine{export_mem(out), export_mem(flags)};
  Handles theirs;
  if (!swap_with_peer("mix: exchange", sock, mine, theirs)) return 1;
  unsigned* pout = open_mem<unsigned>(theirs.out);
  unsigned* pflags = open_mem<unsigned>(theirs.flags);
  CK(cudaDeviceSynchronize());
  int gen = 0;
  host_barrier(sh, g, gen);
  unsigned fseq = 0;
  auto fl_sync = [&](int k) {
    CKD(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)(pflags + 32 * k + g), fseq, CU_STREAM_WRITE_VALUE_DEFAULT));
    CKD(cuStreamWaitValue32((CUstream)s, (CUdeviceptr)(flags + 32 * k + p), fseq, CU_STREAM_WAIT_VALUE_GEQ));
  };
  int idx = 0;
  for (size_t bytes : kSizes) {
    for (const Mode& m : kModes) {
      fillv<<<264, 512, 0, s>>>(in, bytes / 4, 7 + g);
      CK(cudaMemsetAsync(out, 0xff, maxBytes, s));
      CK(cudaStreamSynchronize(s));
      host_barrier(sh, g, gen);
      const size_t smBytes = m.sm16 ? bytes / 16 * m.sm16 : m.smMiB * MiB, ceBytes = bytes - smBytes;
      auto call = [&]() {
        fseq++;
        fl_sync(0);  // ready
        CK(cudaEventRecord(fork, s));
        // A kernel with no copy beside it runs on the calling stream itself.
        const bool smAlone = ceBytes == 0 && m.inl;
        if (smBytes) {
          cudaStream_t ks = smAlone ? s : sm;
          if (!smAlone) CK(cudaStreamWaitEvent(sm, fork, 0));
          push16<<<m.grid, 512, 0, ks>>>((const uint4*)((const char*)in + ceBytes), (uint4*)((char*)pout + ceBytes),
                                         smBytes / 16);
          CK(cudaGetLastError());
          if (!smAlone) CK(cudaEventRecord(joinSM, sm));
        }
        if (ceBytes) {
          cudaStream_t cs = m.inl ? s : ce;
          if (!m.inl) CK(cudaStreamWaitEvent(ce, fork, 0));
          const size_t piece = ceBytes / m.chunks;
          for (int j = 0; j < m.chunks; j++)
            CK(cudaMemcpyAsync((char*)pout + j * piece, (const char*)in + j * piece, piece, cudaMemcpyDeviceToDevice, cs));
          if (!m.inl) {
            CK(cudaEventRecord(joinCE, ce));
            CK(cudaStreamWaitEvent(s, joinCE, 0));
          }
        }
        if (smBytes && !smAlone) CK(cudaStreamWaitEvent(s, joinSM, 0));
        fl_sync(1);  // done
      };
      for (int i = 0; i < 5; i++) call();
      std::vector<double> ts;
      for (int rep = 0; rep < 5; rep++) {
        CK(cudaEventRecord(t0, s));
        for (int i = 0; i < 20; i++) call();
        CK(cudaEventRecord(t1, s));
        CK(cudaEventSynchronize(t1));
        float ms;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        ts.push_back(1000.0 * ms / 20);
      }
      std::sort(ts.begin(), ts.end());
      CK(cudaMemset(bad, 0, 8));
      host_barrier(sh, g, gen);  // the peer's stores into us are done (its stream synced)
      countbad<<<264, 512>>>(out, bytes / 4, 7 + p, bad);
      unsigned long long b;
      CK(cudaMemcpy(&b, bad, 8, cudaMemcpyDeviceToHost));
      sh->result[g][idx++] = b ? -ts[2] : ts[2];
      host_barrier(sh, g, gen);
    }
  }
  if (g == 0) {
    printf("%-22s", "us | GB/s one way");
    for (size_t bytes : kSizes) printf(" %9zuM      ", bytes / MiB);
    printf("\n");
    for (int mi = 0; mi < kNModes; mi++) {
      printf("%-22s", kModes[mi].name);
      for (int si = 0; si < kNSizes; si++) {
        const double a = sh->result[0][si * kNModes + mi], b = sh->result[1][si * kNModes + mi];
        const double t = std::max(std::abs(a), std::abs(b));
        printf(" %7.1f %6.1f%s", t, kSizes[si] / t / 1e3, a > 0 && b > 0 ? " " : "!");
      }
      printf("\n");
    }
    printf("(! : wrong data)\n");
  }
  CK(cudaDeviceSynchronize());
  return 0;
}

int main() { return two_processes<Shared>("mix", run); }
