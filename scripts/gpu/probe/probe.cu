// probe.cu: stand-alone measurements on two GPUs in one process, taken
// before building a design into goccl (docs/perf.md quotes them):
//
//   ce   a 2-rank AllReduce / ReduceScatter carried by the copy engines
//        straight into the peer's output buffer, reduced there in place,
//        with the chunk schedules given; and one copy of the whole size as
//        the ceiling.
//   ll128 a one-shot AllReduce whose 128-byte lines carry 120 bytes of data
//        and an 8-byte flag, stored by 8 lanes of a warp in one instruction
//        and read the same way, so that the reader reduces as lines land.
//
// Build and run on the GPU machine (never touches multicast):
//   nvcc -O3 -arch=sm_90 -o /tmp/probe scripts/gpu/probe/probe.cu && /tmp/probe ce ll128
// Every result is checked against exactly representable sums.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

typedef unsigned long long u64;
constexpr size_t MiB = 1 << 20;

// val is element i's value for a seed: a multiple of 2^-16 in [-0.5, 0.5),
// so the sum of two is exact in float32.
__host__ __device__ inline float val(size_t i, unsigned seed) {
  unsigned x = (unsigned)i * 2654435761u ^ (unsigned)(i >> 32) ^ seed * 0x9e3779b9u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return (float)(x & 0xffff) / 65536.0f - 0.5f;
}

__global__ void fill(float* p, size_t n, size_t base, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = val(base + i, seed);
}
__global__ void poison(float* p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __int_as_float(0x7fc01234);
}
// check counts the elements of p[0..n) that differ from the sum of both
// seeds' values at base+i.
__global__ void check(const float* p, size_t n, size_t base, unsigned s0, unsigned s1, u64* bad) {
  u64 b = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (p[i] != val(base + i, s0) + val(base + i, s1)) b++;
  if (b) atomicAdd(bad, b);
}
// add: dst[i] += src[i], 16 bytes at a time.
__global__ void add(float4* dst, const float4* src, size_t n4) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
    float4 a = dst[i], b = src[i];
    dst[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
  }
}

struct Dev {
  float *send = nullptr, *recv = nullptr;
  char* lines = nullptr;  // ll128 line buffer, written by the peer
  cudaStream_t P, R, S;
  std::vector<cudaEvent_t> evP, evR;
  cudaEvent_t start, joinR, joinS, end, t0, t1;
  u64* bad;
};
Dev dev[2];

void setup(size_t bytes, size_t lineBytes, int chunks) {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    Dev& d = dev[g];
    CK(cudaMalloc(&d.send, bytes));
    CK(cudaMalloc(&d.recv, bytes));
    if (lineBytes) CK(cudaMalloc(&d.lines, lineBytes));
    if (lineBytes) CK(cudaMemset(d.lines, 0, lineBytes));
    CK(cudaStreamCreateWithFlags(&d.P, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&d.R, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&d.S, cudaStreamNonBlocking));
    d.evP.resize(chunks);
    d.evR.resize(chunks);
    for (int j = 0; j < chunks; j++) {
      CK(cudaEventCreateWithFlags(&d.evP[j], cudaEventDisableTiming));
      CK(cudaEventCreateWithFlags(&d.evR[j], cudaEventDisableTiming));
    }
    for (cudaEvent_t* e : {&d.start, &d.joinR, &d.joinS, &d.end})
      CK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    CK(cudaEventCreate(&d.t0));
    CK(cudaEventCreate(&d.t1));
    CK(cudaMalloc(&d.bad, 8));
    fill<<<264, 512, 0, d.P>>>(d.send, bytes / 4, 0, 1 + g);
    CK(cudaStreamSynchronize(d.P));
  }
}
void teardown() {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceSynchronize());
    Dev& d = dev[g];
    CK(cudaFree(d.send));
    CK(cudaFree(d.recv));
    if (d.lines) CK(cudaFree(d.lines));
    CK(cudaFree(d.bad));
    for (auto e : d.evP) CK(cudaEventDestroy(e));
    for (auto e : d.evR) CK(cudaEventDestroy(e));
    for (auto e : {d.start, d.joinR, d.joinS, d.end, d.t0, d.t1}) CK(cudaEventDestroy(e));
    for (auto s : {d.P, d.R, d.S}) CK(cudaStreamDestroy(s));
    d = Dev();
  }
}

// ---- copy-engine reductions -------------------------------------------------

// enqueue_ce enqueues one 2-rank AllReduce (rs=false) or ReduceScatter of
// `bytes` of input per rank. Rank g owns half g: the peer's copy engine
// lands its half-g input in g's output (AllReduce: at half g of recv;
// ReduceScatter: recv itself), g adds its own input there chunk by chunk,
// and for AllReduce its copy engine spreads each reduced chunk into the
// peer's recv. Each call starts after both ranks ended the previous one.
void enqueue_ce(size_t bytes, const std::vector<size_t>& sched, bool rs, int grid) {
  const size_t half = bytes / 2;
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    Dev& d = dev[g];
    CK(cudaStreamWaitEvent(d.P, dev[1 - g].end, 0));
    CK(cudaEventRecord(d.start, d.P));
    CK(cudaStreamWaitEvent(d.R, d.start, 0));
    CK(cudaStreamWaitEvent(d.S, d.start, 0));
  }
  size_t off = 0;
  for (size_t j = 0; j < sched.size(); j++) {
    const size_t c = sched[j];
    for (int g = 0; g < 2; g++) {
      const int q = 1 - g;
      CK(cudaSetDevice(g));
      Dev& d = dev[g];
      char* land = (char*)dev[q].recv + (rs ? 0 : q * half) + off;
      CK(cudaMemcpyAsync(land, (char*)d.send + q * half + off, c, cudaMemcpyDefault, d.P));
      CK(cudaEventRecord(d.evP[j], d.P));
    }
    for (int g = 0; g < 2; g++) {
      const int q = 1 - g;
      CK(cudaSetDevice(g));
      Dev& d = dev[g];
      char* mine = (char*)d.recv + (rs ? 0 : g * half) + off;
      CK(cudaStreamWaitEvent(d.R, dev[q].evP[j], 0));
      add<<<grid, 512, 0, d.R>>>((float4*)mine, (const float4*)((char*)d.send + g * half + off), c / 16);
      CK(cudaEventRecord(d.evR[j], d.R));
      if (!rs) {
        CK(cudaStreamWaitEvent(d.S, d.evR[j], 0));
        CK(cudaMemcpyAsync((char*)dev[q].recv + g * half + off, mine, c, cudaMemcpyDefault, d.S));
      }
    }
    off += c;
  }
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    Dev& d = dev[g];
    CK(cudaEventRecord(d.joinR, d.R));
    CK(cudaEventRecord(d.joinS, d.S));
    CK(cudaStreamWaitEvent(d.P, d.joinR, 0));
    CK(cudaStreamWaitEvent(d.P, d.joinS, 0));
    CK(cudaEventRecord(d.end, d.P));
  }
}

// timed runs reps calls of enq between events on each device's P stream and
// returns the slower device's time per call in us.
template <typename F>
double timed(int reps, F enq) {
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaEventRecord(dev[g].t0, dev[g].P));
  }
  for (int i = 0; i < reps; i++) enq(i);
  double worst = 0;
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaEventRecord(dev[g].t1, dev[g].P));
    CK(cudaEventSynchronize(dev[g].t1));
    float ms;
    CK(cudaEventElapsedTime(&ms, dev[g].t0, dev[g].t1));
    worst = std::max(worst, 1000.0 * ms / reps);
  }
  return worst;
}

u64 count_bad(int g, const float* p, size_t n, size_t base) {
  CK(cudaSetDevice(g));
  CK(cudaMemset(dev[g].bad, 0, 8));
  check<<<264, 512>>>(p, n, base, 1, 2, dev[g].bad);
  u64 b;
  CK(cudaMemcpy(&b, dev[g].bad, 8, cudaMemcpyDeviceToHost));
  return b;
}

std::vector<size_t> uniform(size_t half, size_t c) {
  std::vector<size_t> s;
  for (size_t o = 0; o < half; o += c) s.push_back(std::min(c, half - o));
  return s;
}
// halving: each chunk half of what remains, down to min.
std::vector<size_t> halving(size_t half, size_t min, int div) {
  std::vector<size_t> s;
  size_t left = half;
  while (left > 0) {
    size_t c = std::max(min, (left / div) & ~(size_t)4095);
    c = std::min(c, left);
    s.push_back(c);
    left -= c;
  }
  return s;
}
std::string describe(const std::vector<size_t>& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 6; i++) out += std::to_string(s[i] / MiB) + (i + 1 < s.size() ? "," : "");
  if (s.size() > 6) out += "..x" + std::to_string(s.size());
  return out;
}

void probe_ce() {
  printf("== copy engines into the peer's output, reduced in place (2 ranks)\n");
  printf("%-3s %6s %-26s %5s %10s %9s %s\n", "op", "MiB", "chunks (MiB)", "grid", "us", "busbw", "check");
  for (size_t bytes : {128 * MiB, 512 * MiB, 1024 * MiB}) {
    const size_t half = bytes / 2;
    std::vector<std::vector<size_t>> scheds = {uniform(half, 8 * MiB),        uniform(half, 32 * MiB),
                                               uniform(half, half),           halving(half, 2 * MiB, 2),
                                               halving(half, 4 * MiB, 2),     halving(half, 8 * MiB, 2),
                                               halving(half, 4 * MiB, 3),     halving(half, 2 * MiB, 4)};
    size_t most = 0;
    for (auto& s : scheds) most = std::max(most, s.size());
    setup(bytes, 0, (int)most);
    // The ceiling: the whole input across in one copy, both ways at once.
    double one = timed(5, [&](int) {
      // Both wait for the previous round's ends before either records anew.
      for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaStreamWaitEvent(dev[g].P, dev[1 - g].end, 0));
      }
      for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaMemcpyAsync(dev[1 - g].recv, dev[g].send, bytes, cudaMemcpyDefault, dev[g].P));
        CK(cudaEventRecord(dev[g].end, dev[g].P));
      }
    });
    printf("%-3s %6zu %-26s %5s %10.1f %9.1f\n", "cp", bytes / MiB, "one copy each way", "", one, bytes / one / 1e3);
    for (int rs = 0; rs < 2; rs++) {
      for (auto& s : scheds) {
        for (int grid : {32, 132}) {
          for (int g = 0; g < 2; g++) {
            CK(cudaSetDevice(g));
            poison<<<264, 512>>>(dev[g].recv, bytes / 4);
            CK(cudaDeviceSynchronize());
          }
          enqueue_ce(bytes, s, rs, grid);
          u64 bad = 0;
          for (int g = 0; g < 2; g++) {
            CK(cudaSetDevice(g));
            CK(cudaDeviceSynchronize());
            bad += rs ? count_bad(g, dev[g].recv, half / 4, g * half / 4) : count_bad(g, dev[g].recv, bytes / 4, 0);
          }
          enqueue_ce(bytes, s, rs, grid);  // warm-up
          double t = timed(5, [&](int) { enqueue_ce(bytes, s, rs, grid); });
          // busbw at 2 ranks: AllReduce moves `bytes` each way, ReduceScatter half.
          const double bw = (rs ? half : bytes) / t / 1e3;
          printf("%-3s %6zu %-26s %5d %10.1f %9.1f %s\n", rs ? "rs" : "ar", bytes / MiB, describe(s).c_str(), grid, t,
                 bw, bad ? ("BAD " + std::to_string(bad)).c_str() : "ok");
        }
      }
    }
    teardown();
  }
}

// ---- LL128 -------------------------------------------------------------------

constexpr size_t kLine = 128, kLineData = 120;

__device__ __forceinline__ void st_line(void* p, u64 a, u64 b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ void ld_line(const void* p, u64& a, u64& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
__device__ __forceinline__ u64 add2(u64 x, u64 y) {
  float2 a = *(float2*)&x, b = *(float2*)&y;
  float2 c = make_float2(a.x + b.x, a.y + b.y);
  return *(u64*)&c;
}

// ll128: one-shot AllReduce of `bytes` (a multiple of 8) of float32 at 2
// ranks. Lanes 8i..8i+7 of a warp hold line i of a 4-line group; lane
// 8i+k (k<7) carries data bytes [16k,16k+16) of the line and lane 8i+7
// carries bytes [112,120) and the flag.
__global__ void __launch_bounds__(512) ll128(const char* send, char* recv, size_t bytes, char* peerLines,
                                             const char* myLines, u64 flag, int rank) {
  const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const size_t W = (size_t)gridDim.x * nw, w = (size_t)blockIdx.x * nw + (threadIdx.x >> 5);
  const size_t lines = (bytes + kLineData - 1) / kLineData, groups = (lines + 3) / 4;
  const int pos = lane & 7;
  for (size_t g = w; g < groups; g += W) {
    const size_t line = 4 * g + (lane >> 3), d = line * kLineData + 16 * pos;
    u64 a = 0, b = 0;
    if (d < bytes) a = *(const u64*)(send + d);
    if (pos < 7 && d + 8 < bytes) b = *(const u64*)(send + d + 8);
    if (pos == 7) b = flag;
    __syncwarp();
    if (line < lines) st_line(peerLines + line * kLine + 16 * pos, a, b);
  }
  for (size_t g = w; g < groups; g += W) {
    const size_t line = 4 * g + (lane >> 3), d = line * kLineData + 16 * pos;
    const bool valid = line < lines;
    u64 a = 0, b = 0;
    for (;;) {
      if (valid) ld_line(myLines + line * kLine + 16 * pos, a, b);
      if (__all_sync(0xffffffffu, !valid || pos != 7 || b == flag)) break;
    }
    // Rank order: rank 0's values first (exact here either way).
    if (d < bytes) {
      u64 mine = *(const u64*)(send + d);
      *(u64*)(recv + d) = rank == 0 ? add2(mine, a) : add2(a, mine);
    }
    if (pos < 7 && d + 8 < bytes) {
      u64 mine = *(const u64*)(send + d + 8);
      *(u64*)(recv + d + 8) = rank == 0 ? add2(mine, b) : add2(b, mine);
    }
  }
}

// push: rank's whole input stored into the peer (no reduction), 16 bytes a
// lane: what the link gives to SM stores at this size.
__global__ void __launch_bounds__(512) push(const float4* src, float4* dst, size_t n4) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

void probe_ll128() {
  printf("== LL128 one-shot AllReduce (2 ranks), back-to-back launches\n");
  printf("%8s %5s %10s %10s %9s %s\n", "KiB", "grid", "ll128 us", "push us", "busbw", "check");
  const size_t maxBytes = 32 * MiB;
  const size_t lineHalf = (maxBytes / kLineData + 4) * kLine;
  setup(maxBytes, 2 * lineHalf, 1);
  u64 launch = 0;
  auto run = [&](size_t bytes, int grid) {
    launch++;
    for (int g = 0; g < 2; g++) {
      CK(cudaSetDevice(g));
      const size_t h = (launch & 1) * lineHalf;
      ll128<<<grid, 512, 0, dev[g].P>>>((const char*)dev[g].send, (char*)dev[g].recv, bytes, dev[1 - g].lines + h,
                                         dev[g].lines + h, launch, g);
    }
  };
  for (size_t bytes : {512 * 1024UL, 2 * MiB, 8 * MiB, 16 * MiB, 32 * MiB}) {
    for (int grid : {64, 128, 132, 264}) {
      // Correctness: 20 calls, each on fresh inputs, output poisoned first.
      u64 bad = 0;
      for (int it = 0; it < 20; it++) {
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          fill<<<264, 512, 0, dev[g].P>>>(dev[g].send, bytes / 4, 0, 100 * it + 1 + g);
          poison<<<264, 512, 0, dev[g].P>>>(dev[g].recv, bytes / 4);
        }
        run(bytes, grid);
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          CK(cudaMemsetAsync(dev[g].bad, 0, 8, dev[g].P));
          check<<<264, 512, 0, dev[g].P>>>(dev[g].recv, bytes / 4, 0, 100 * it + 1, 100 * it + 2, dev[g].bad);
          u64 b;
          CK(cudaMemcpyAsync(&b, dev[g].bad, 8, cudaMemcpyDeviceToHost, dev[g].P));
          CK(cudaStreamSynchronize(dev[g].P));
          bad += b;
        }
      }
      for (int i = 0; i < 5; i++) run(bytes, grid);
      double t = timed(50, [&](int) { run(bytes, grid); });
      double tp = timed(50, [&](int) {
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          push<<<grid, 512, 0, dev[g].P>>>((const float4*)dev[g].send, (float4*)dev[1 - g].recv, bytes / 16);
        }
      });
      printf("%8zu %5d %10.2f %10.2f %9.1f %s\n", bytes / 1024, grid, t, tp, bytes / t / 1e3,
             bad ? ("BAD " + std::to_string(bad)).c_str() : "ok");
    }
  }
  teardown();
}

int main(int argc, char** argv) {
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    fprintf(stderr, "probe: needs 2 GPUs, found %d\n", n);
    return 2;
  }
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceEnablePeerAccess(1 - g, 0));
  }
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "ce")) probe_ce();
    else if (!strcmp(argv[i], "ll128")) probe_ll128();
    else {
      fprintf(stderr, "probe: unknown part %s (ce, ll128)\n", argv[i]);
      return 2;
    }
  }
  return 0;
}
