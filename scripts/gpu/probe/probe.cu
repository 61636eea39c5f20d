// probe.cu: NVLink speeds by SM and bulk copies, barrier fence and launch
// costs, and cross-GPU hop latency, on two GPUs in one process, without
// goccl (docs/perf.md and docs/kernels.md quote tma, hop and pipe):
//
//   ce   a 2-rank AllReduce / ReduceScatter carried by the copy engines
//        straight into the peer's output buffer, reduced there in place,
//        with the chunk schedules given; and one copy of the whole size as
//        the ceiling.
//   ll128 a one-shot AllReduce whose 128-byte lines carry 120 bytes of data
//        and an 8-byte flag, stored by 8 lanes of a warp in one instruction
//        and read the same way, so that the reader reduces as lines land.
//   pipe the one-shot as goccl's kernel does it (push, barrier, reduce),
//        with and without a fence.sc.sys before the barrier's release
//        store, beside a warp-specialized pipeline (pusher warps and
//        reducer warps, a flag per chunk; PROBE_PIPE_ALL=1 sweeps its
//        shapes) and a bare push.
//   mix  the copy engines and SM stores moving bytes to the peer at once.
//   pdl  the one-shot back to back, eager and in a graph, with and
//        without programmatic dependent launch.
//   tma  copies over NVLink by SM loads/stores against bulk copies (TMA),
//        pushed and pulled, and bulk reductions into the peer (tma.cuh);
//        PROBE_TMA_MIB=64,128 and PROBE_TMA_MODE=ldst-push narrow it.
//   hop  what one dependency between the GPUs costs on streams (flags by
//        stream memory operations, events) and in kernels (hop.cuh).
//
// Build and run on the GPU machine (never touches multicast):
//   nvcc -O3 -arch=sm_90 -o /tmp/probe scripts/gpu/probe/probe.cu -lcuda && /tmp/probe ce ll128 pipe mix pdl tma hop
// Every result is checked against exactly representable sums.
#include "common.cuh"
#include "hop.cuh"
#include "tma.cuh"

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

// ---- the one-shot, its barrier, and a warp-specialized pipeline --------------

// pipe: a 2-rank one-shot AllReduce (rs=0) or ReduceScatter (rs=1) in which
// each block's first np warps push chunks into the peer's ring of `depth`
// slots and flag each one, while the other warps reduce each chunk as its
// flag lands and then hand the slot back. No barrier: a producer waits only
// for a free slot, a consumer only for its chunk. oneshot: goccl's one-shot
// kernel (push a round, barrier, reduce) in the same harness. fence: what
// goes before a flag's release store: 0 nothing, 1 fence.sc.sys, 2
// (oneshot only) fence.acq_rel.sys.
struct PipeArgs {
  const float* send;
  float* recv;
  size_t count;    // AllReduce: elements; ReduceScatter: output elements
  char* ringMine;  // this rank's ring (the peer writes it)
  char* ringPeer;  // the peer's ring
  unsigned* sigMine;
  unsigned* sigPeer;
  int rank, np, rs, fence;
  unsigned slot, depth;  // bytes per slot, slots per ring (a power of 2)
  int pdl;               // oneshot: programmatic dependent launch (wait, then let the next launch start)
};
// Signal words, each [512] by block: ready (written by the peer), freed
// (written by the peer), the pipe's counter, oneshot's epoch, oneshot's
// incoming epoch.
constexpr int kSigReady = 0, kSigFreed = 512, kSigCount = 1024, kSigEpoch = 1536, kSigIn = 2048, kSigWords = 2560;

__device__ __forceinline__ void named_bar(int id, int n) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void st_rel(unsigned* p, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acq(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void fence_sc() { asm volatile("fence.sc.sys;" ::: "memory"); }
__device__ __forceinline__ float4 ldcg(const float4* p) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ float4 add4(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

// pcopy and padd: thread t of nt, four vectors in flight per thread.
__device__ __forceinline__ void pcopy(float4* dst, const float4* src, size_t n4, int t, int nt) {
  size_t i = t;
  for (; i + 3 * nt < n4; i += 4 * nt) {
    float4 a = src[i], b = src[i + nt], c = src[i + 2 * nt], d = src[i + 3 * nt];
    dst[i] = a;
    dst[i + nt] = b;
    dst[i + 2 * nt] = c;
    dst[i + 3 * nt] = d;
  }
  for (; i < n4; i += nt) dst[i] = src[i];
}
__device__ __forceinline__ void padd(float4* out, const float4* mine, const float4* ring, size_t n4, int t, int nt) {
  size_t i = t;
  for (; i + 3 * nt < n4; i += 4 * nt) {
    float4 a[4], b[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      a[u] = mine[i + u * nt];
      b[u] = ldcg(ring + i + u * nt);
    }
#pragma unroll
    for (int u = 0; u < 4; u++) out[i + u * nt] = add4(a[u], b[u]);
  }
  for (; i < n4; i += nt) out[i] = add4(mine[i], ldcg(ring + i));
}

__device__ __forceinline__ size_t pipe_chunk(size_t count, unsigned slot) {
  size_t e = (count + gridDim.x - 1) / gridDim.x;
  e = (e + 3) & ~(size_t)3;
  return e < slot / 4 ? e : slot / 4;
}

__global__ void __launch_bounds__(512) pipe(PipeArgs a) {
  const int b = blockIdx.x, G = gridDim.x, tid = threadIdx.x, peer = 1 - a.rank, P = a.np * 32;
  const size_t E = pipe_chunk(a.count, a.slot), C = (a.count + E - 1) / E;
  const unsigned k = b < (int)C ? (unsigned)((C - b + G - 1) / G) : 0;
  const unsigned base = *(volatile unsigned*)(a.sigMine + kSigCount + b);
  if (tid < P) {
    char* ring = a.ringPeer + (size_t)(a.rank * G + b) * a.depth * a.slot;
    for (unsigned i = 0; i < k; i++) {
      const unsigned seq = base + i + 1;
      if (tid == 0)
        while ((int)(ld_acq(a.sigMine + kSigFreed + b) - (seq - a.depth)) < 0) {
        }
      named_bar(1, P);
      const size_t lo = ((size_t)i * G + b) * E, n = a.count - lo < E ? a.count - lo : E;
      const float* src = a.send + (a.rs ? peer * a.count : 0) + lo;
      pcopy((float4*)(ring + (size_t)(seq & (a.depth - 1)) * a.slot), (const float4*)src, n / 4, tid, P);
      named_bar(1, P);
      if (tid == 0) {
        if (a.fence) fence_sc();
        st_rel(a.sigPeer + kSigReady + b, seq);
      }
    }
  } else {
    const int t = tid - P, NC = blockDim.x - P;
    const char* ring = a.ringMine + (size_t)(peer * G + b) * a.depth * a.slot;
    for (unsigned i = 0; i < k; i++) {
      const unsigned seq = base + i + 1;
      if (t == 0)
        while ((int)(ld_acq(a.sigMine + kSigReady + b) - seq) < 0) {
        }
      named_bar(2, NC);
      const size_t lo = ((size_t)i * G + b) * E, n = a.count - lo < E ? a.count - lo : E;
      const float* mine = a.send + (a.rs ? a.rank * a.count : 0) + lo;
      padd((float4*)(a.recv + lo), (const float4*)mine,
           (const float4*)(ring + (size_t)(seq & (a.depth - 1)) * a.slot), n / 4, t, NC);
      named_bar(2, NC);
      if (t == 0) st_rel(a.sigPeer + kSigFreed + b, seq);
    }
  }
  __syncthreads();
  if (tid == 0) *(volatile unsigned*)(a.sigMine + kSigCount + b) = base + k;
}

__global__ void __launch_bounds__(512) oneshot(PipeArgs a) {
  const int b = blockIdx.x, G = gridDim.x, tid = threadIdx.x, peer = 1 - a.rank;
  if (a.pdl) asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory");
  const size_t E = pipe_chunk(a.count, a.slot);
  unsigned epoch = *(volatile unsigned*)(a.sigMine + kSigEpoch + b);
  for (size_t lo = b * E; lo < a.count; lo += G * E) {
    const size_t n = a.count - lo < E ? a.count - lo : E;
    const unsigned h = (epoch + 1) & 1;
    const float* src = a.send + (a.rs ? peer * a.count : 0) + lo;
    pcopy((float4*)(a.ringPeer + ((h * 2 + a.rank) * G + b) * (size_t)a.slot), (const float4*)src, n / 4, tid,
          blockDim.x);
    __syncthreads();
    epoch++;
    if (tid == 0) {
      if (a.fence == 1) fence_sc();
      if (a.fence == 2) asm volatile("fence.acq_rel.sys;" ::: "memory");
      st_rel(a.sigPeer + kSigIn + b, epoch);
      while ((int)(ld_acq(a.sigMine + kSigIn + b) - epoch) < 0) {
      }
    }
    __syncthreads();
    const float* mine = a.send + (a.rs ? a.rank * a.count : 0) + lo;
    padd((float4*)(a.recv + lo), (const float4*)mine,
         (const float4*)(a.ringMine + ((h * 2 + peer) * G + b) * (size_t)a.slot), n / 4, tid, blockDim.x);
  }
  if (tid == 0) *(volatile unsigned*)(a.sigMine + kSigEpoch + b) = epoch;
}

// Rings: each GPU's ring (or staging) and zeroed signal words, for the
// pipe and pdl parts.
struct Rings {
  char* ring[2];
  unsigned* sig[2];
  explicit Rings(size_t bytes) {
    for (int g = 0; g < 2; g++) {
      CK(cudaSetDevice(g));
      CK(cudaMalloc(&ring[g], bytes));
      CK(cudaMalloc(&sig[g], kSigWords * 4));
      CK(cudaMemset(sig[g], 0, kSigWords * 4));
    }
  }
  void release() {
    for (int g = 0; g < 2; g++) {
      CK(cudaSetDevice(g));
      CK(cudaDeviceSynchronize());
      CK(cudaFree(ring[g]));
      CK(cudaFree(sig[g]));
    }
  }
};

struct PipeCfg {
  int np;
  unsigned slot, depth;
  int fence;
  int base;  // 1: oneshot, 2: push only
  int grid = 128;
};

void probe_pipe() {
  printf("== the one-shot, its barrier, a warp-specialized pipeline (2 ranks, back-to-back launches)\n");
  printf("%-3s %8s %-20s %10s %9s %s\n", "op", "KiB", "config", "us", "busbw", "check");
  const size_t maxBytes = 512 * MiB, ringBytes = 136 * MiB;
  setup(maxBytes, 0, 1);
  Rings rg(ringBytes);
  char** ring = rg.ring;
  unsigned** sig = rg.sig;
  std::vector<PipeCfg> cfgs = {{16, 128 << 10, 2, 1, 1}, {16, 128 << 10, 2, 0, 1}, {16, 128 << 10, 2, 2, 1},
                               {16, 64 << 10, 2, 1, 1},  {16, 64 << 10, 2, 0, 1},  {16, 0, 0, 0, 2}};
  if (getenv("PROBE_PIPE_ALL")) {
    for (int np : {4, 8, 12})
      for (auto sd : std::vector<std::pair<unsigned, unsigned>>{{16 << 10, 8}, {32 << 10, 4}, {64 << 10, 4}})
        for (int fence : {0, 1}) cfgs.push_back({np, sd.first, sd.second, fence, 0});
  }
  if (getenv("PROBE_GRIDS")) {  // the one-shot without the fence on wider grids
    cfgs.clear();
    for (auto gs : std::vector<std::pair<int, unsigned>>{{128, 128 << 10}, {132, 128 << 10}, {256, 64 << 10},
                                                          {264, 64 << 10}, {256, 128 << 10}})
      cfgs.push_back({16, gs.second, 2, 0, 1, gs.first});
    for (int grid : {128, 132, 256, 264}) cfgs.push_back({16, 0, 0, 0, 2, grid});
  }
  auto enq = [&](const PipeCfg& c, size_t count, int rs) {
    for (int g = 0; g < 2; g++) {
      CK(cudaSetDevice(g));
      if (c.base == 2) {
        push<<<c.grid, 512, 0, dev[g].P>>>((const float4*)(dev[g].send + (rs ? (1 - g) * count : 0)),
                                        (float4*)dev[1 - g].recv, count / 4);
        continue;
      }
      PipeArgs a{dev[g].send, dev[g].recv, count, ring[g], ring[1 - g], sig[g], sig[1 - g], g, c.np, rs, c.fence,
                 c.slot, c.depth};
      if (c.base == 1) oneshot<<<c.grid, 512, 0, dev[g].P>>>(a);
      else pipe<<<c.grid, 512, 0, dev[g].P>>>(a);
    }
  };
  for (int rs = 0; rs < 2; rs++) {
    for (size_t bytes : {512 * 1024UL, 2 * MiB, 8 * MiB, 32 * MiB, 128 * MiB, 512 * MiB}) {
      if (rs && bytes < 32 * MiB) continue;
      const size_t count = rs ? bytes / 8 : bytes / 4;  // ReduceScatter: bytes of input, count per rank
      for (auto& c : cfgs) {
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          CK(cudaDeviceSynchronize());
        }
        u64 bad = 0;
        for (int it = 0; c.base != 2 && it < 3; it++) {
          for (int g = 0; g < 2; g++) {
            CK(cudaSetDevice(g));
            fill<<<264, 512, 0, dev[g].P>>>(dev[g].send, bytes / 4, 0, 100 * it + 1 + g);
            poison<<<264, 512, 0, dev[g].P>>>(dev[g].recv, count);
            CK(cudaDeviceSynchronize());
          }
          enq(c, count, rs);
          for (int g = 0; g < 2; g++) {
            CK(cudaSetDevice(g));
            CK(cudaDeviceSynchronize());
            CK(cudaMemset(dev[g].bad, 0, 8));
            check<<<264, 512>>>(dev[g].recv, count, rs ? g * count : 0, 100 * it + 1, 100 * it + 2, dev[g].bad);
            u64 x;
            CK(cudaMemcpy(&x, dev[g].bad, 8, cudaMemcpyDeviceToHost));
            bad += x;
          }
        }
        for (int i = 0; i < 3; i++) enq(c, count, rs);
        const int reps = bytes >= 128 * MiB ? 10 : 50;
        const double t = timed(reps, [&](int) { enq(c, count, rs); });
        char name[64];
        if (c.base == 1) snprintf(name, sizeof name, "oneshot g%d s%uK f%d", c.grid, c.slot >> 10, c.fence);
        else if (c.base == 2) snprintf(name, sizeof name, "push only g%d", c.grid);
        else snprintf(name, sizeof name, "pipe w%d s%uK d%u f%d", c.np, c.slot >> 10, c.depth, c.fence);
        // busbw at 2 ranks: AllReduce moves its bytes each way, ReduceScatter half.
        printf("%-3s %8zu %-20s %10.2f %9.1f %s\n", rs ? "rs" : "ar", bytes / 1024, name, t,
               (rs ? bytes / 2 : bytes) / t / 1e3, c.base == 2 ? "-" : bad ? ("BAD " + std::to_string(bad)).c_str() : "ok");
      }
    }
  }
  rg.release();
  teardown();
}

// ---- copy engines and SMs at once ---------------------------------------------

// mix: does the link carry more when the copy engines and SM stores move
// bytes to the peer at the same time? Both GPUs send at once; a fraction f
// of the bytes goes by cudaMemcpyAsync on one stream, the rest by the push
// kernel on another.
void probe_mix() {
  printf("== copy engines and SM stores at once, both directions (busbw = bytes each way / time)\n");
  printf("%8s %6s %5s %10s %9s\n", "MiB", "ce %", "grid", "us", "GB/s");
  const size_t bytes = 512 * MiB;
  setup(bytes, 0, 1);
  for (int grid : {132, 264}) {
    for (int pct : {0, 40, 50, 60, 70, 80, 100}) {
      if (pct == 100 && grid != 132) continue;
      const size_t ce = (bytes * pct / 100) & ~(size_t)4095, sm = bytes - ce;
      auto enq = [&](int) {
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          Dev& d = dev[g];
          CK(cudaEventRecord(d.start, d.P));
          CK(cudaStreamWaitEvent(d.S, d.start, 0));
          if (ce) CK(cudaMemcpyAsync(dev[1 - g].recv, d.send, ce, cudaMemcpyDefault, d.S));
          if (sm)
            push<<<grid, 512, 0, d.P>>>((const float4*)((char*)d.send + ce), (float4*)((char*)dev[1 - g].recv + ce),
                                        sm / 16);
          CK(cudaEventRecord(d.joinS, d.S));
          CK(cudaStreamWaitEvent(d.P, d.joinS, 0));
        }
      };
      enq(0);
      const double t = timed(10, enq);
      printf("%8zu %6d %5d %10.1f %9.1f\n", bytes / MiB, pct, grid, t, bytes / t / 1e3);
    }
  }
  teardown();
}

// ---- programmatic dependent launch ------------------------------------------

// pdl: the one-shot (without the system fence) launched back to back,
// eagerly and as a CUDA graph of 20, with and without programmatic
// dependent launch, which lets the next launch get onto the SMs while this
// one runs; it waits (griddepcontrol.wait) until this one is complete.
void probe_pdl() {
  printf("== one-shot back to back, with and without programmatic dependent launch (us per op)\n");
  printf("%8s %10s %10s %10s %10s %s\n", "bytes", "eager", "eager pdl", "graph", "graph pdl", "check");
  const size_t ringBytes = 64 * MiB, maxBytes = 32 * MiB;
  setup(maxBytes, 0, 1);
  Rings rg(ringBytes);
  char** ring = rg.ring;
  unsigned** sig = rg.sig;
  auto launch = [&](int g, size_t count, int pdl, cudaStream_t st) {
    PipeArgs a{dev[g].send, dev[g].recv, count, ring[g], ring[1 - g], sig[g], sig[1 - g], g, 16, 0, 0,
               128 << 10, 2, pdl};
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(128);
    cfg.blockDim = dim3(512);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, oneshot, a));
  };
  for (size_t bytes : {16UL, 64 * 1024UL, 512 * 1024UL, 2 * MiB, 8 * MiB, 32 * MiB}) {
    const size_t count = bytes / 4;
    double t[4];
    u64 bad = 0;
    for (int mode = 0; mode < 4; mode++) {
      const int pdl = mode & 1, graph = mode >> 1;
      cudaGraphExec_t exec[2] = {};
      if (graph) {
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          CK(cudaStreamBeginCapture(dev[g].P, cudaStreamCaptureModeThreadLocal));
          for (int i = 0; i < 20; i++) launch(g, count, pdl, dev[g].P);
          cudaGraph_t gr;
          CK(cudaStreamEndCapture(dev[g].P, &gr));
          CK(cudaGraphInstantiate(&exec[g], gr, 0));
          CK(cudaGraphDestroy(gr));
        }
      }
      auto enq = [&](int) {
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          if (graph) CK(cudaGraphLaunch(exec[g], dev[g].P));
          else launch(g, count, pdl, dev[g].P);
        }
      };
      // Correctness: fresh inputs, poisoned output, then the ops.
      for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        fill<<<264, 512, 0, dev[g].P>>>(dev[g].send, count, 0, 7 + mode + 10 * g);
        poison<<<264, 512, 0, dev[g].P>>>(dev[g].recv, count);
        CK(cudaDeviceSynchronize());
      }
      enq(0);
      for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaDeviceSynchronize());
        CK(cudaMemset(dev[g].bad, 0, 8));
        check<<<264, 512>>>(dev[g].recv, count, 0, 7 + mode, 17 + mode, dev[g].bad);
        u64 x;
        CK(cudaMemcpy(&x, dev[g].bad, 8, cudaMemcpyDeviceToHost));
        bad += x;
      }
      for (int i = 0; i < 3; i++) enq(0);
      const int reps = graph ? 20 : 200;
      t[mode] = timed(reps, enq) / (graph ? 20 : 1);
      for (int g = 0; g < 2 && graph; g++) {
        CK(cudaSetDevice(g));
        CK(cudaDeviceSynchronize());
        CK(cudaGraphExecDestroy(exec[g]));
      }
    }
    printf("%8zu %10.2f %10.2f %10.2f %10.2f %s\n", bytes, t[0], t[1], t[2], t[3],
           bad ? ("BAD " + std::to_string(bad)).c_str() : "ok");
  }
  rg.release();
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
    else if (!strcmp(argv[i], "pipe")) probe_pipe();
    else if (!strcmp(argv[i], "mix")) probe_mix();
    else if (!strcmp(argv[i], "pdl")) probe_pdl();
    else if (!strcmp(argv[i], "tma")) probe_tma();
    else if (!strcmp(argv[i], "hop")) probe_hop();
    else {
      fprintf(stderr, "probe: unknown part %s (ce, ll128, pipe, mix, pdl, tma, hop)\n", argv[i]);
      return 2;
    }
  }
  return 0;
}
