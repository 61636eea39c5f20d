// tma.cuh: probe.cu's tma part: NVLink bandwidth of SM loads/stores against
// bulk copies, both GPUs at once. Can the Hopper bulk-copy engine (TMA,
// cp.async.bulk) move more bytes over NVLink than 16-byte SM loads and
// stores? Both GPUs copy at once, as a 2-rank collective's phases do:
//   ldst  push: 512 threads a block load locally and store into the peer;
//         pull: load from the peer, store locally.
//   bulk  one thread a block streams chunks through S shared-memory stages:
//         global -> shared completing on an mbarrier, shared -> global in
//         bulk groups; push stores into the peer, pull loads from it.
//   red   bulk push whose store is cp.reduce.async.bulk .add.f32: the peer's
//         memory adds what lands (a ReduceScatter with no reduce pass).
#pragma once

__device__ inline unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// bulk_copy moves bytes from src to dst (op 0) or adds them into dst (op 1),
// block b taking chunks b, b+grid, ... of c bytes; a chunk's load is issued
// s-1 chunks ahead, and a stage is refilled once the store that used it has
// finished reading it.
template <int OP>
__global__ void __launch_bounds__(32) bulk_copy(const char* src, char* dst, size_t bytes, unsigned c, int s) {
  extern __shared__ __align__(128) char buf[];
  __shared__ __align__(8) u64 bar[8];
  if (threadIdx.x != 0) return;
  for (int i = 0; i < s; i++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar[i])));
  asm volatile("fence.mbarrier_init.release.cluster;\n\tfence.proxy.async.shared::cta;" ::: "memory");
  const size_t chunks = (bytes + c - 1) / c;
  const size_t n = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  auto off = [&](size_t j) { return (blockIdx.x + j * gridDim.x) * (size_t)c; };
  auto len = [&](size_t j) { return (unsigned)min((size_t)c, bytes - off(j)); };
  auto load = [&](size_t j) {
    const unsigned b = smem_u32(&bar[j % s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(len(j)) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(buf + (j % s) * c)),
                 "l"(src + off(j)), "r"(len(j)), "r"(b)
                 : "memory");
  };
  for (size_t j = 0; j < n && j + 1 < (size_t)s; j++) load(j);
  for (size_t j = 0; j < n; j++) {
    const unsigned b = smem_u32(&bar[j % s]), phase = (j / s) & 1;
    unsigned done;
    do {
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(b), "r"(phase)
          : "memory");
    } while (!done);
    const unsigned from = smem_u32(buf + (j % s) * c);
    if (OP == 0)
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + off(j)), "r"(from),
                   "r"(len(j))
                   : "memory");
    else
      asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst + off(j)),
                   "r"(from), "r"(len(j))
                   : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    if (j + s - 1 < n) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      load(j + s - 1);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// same counts the elements of p[0..n) that differ from seed's values.
__global__ void same(const float* p, size_t n, unsigned seed, u64* bad) {
  u64 b = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (p[i] != val(i, seed)) b++;
  if (b) atomicAdd(bad, b);
}

void probe_tma() {
  printf("== copies over NVLink, both GPUs at once: SM loads/stores vs bulk copies (TMA)\n");
  printf("%-10s %6s %5s %7s %3s %10s %9s %s\n", "mode", "MiB", "grid", "chunkK", "S", "us", "GB/s", "check");
  const size_t maxBytes = 512 * MiB;
  setup(maxBytes, 0, 1);
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaFuncSetAttribute(bulk_copy<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    CK(cudaFuncSetAttribute(bulk_copy<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  }
  struct Mode {
    const char* name;
    int kind;  // 0 ldst, 1 bulk, 2 red
    bool pull;
    int grid;
    unsigned chunkK;
    int stages;
  };
  const Mode modes[] = {
      {"ldst-push", 0, false, 132, 0, 0}, {"ldst-push", 0, false, 264, 0, 0}, {"ldst-pull", 0, true, 132, 0, 0},
      {"ldst-pull", 0, true, 264, 0, 0},  {"bulk-push", 1, false, 132, 32, 4}, {"bulk-push", 1, false, 132, 64, 3},
      {"bulk-push", 1, false, 264, 16, 4}, {"bulk-push", 1, false, 396, 16, 4}, {"bulk-push", 1, false, 264, 32, 3},
      {"bulk-pull", 1, true, 132, 32, 4},  {"bulk-pull", 1, true, 264, 16, 4},  {"bulk-pull", 1, true, 396, 16, 4},
      {"red-push", 2, false, 132, 32, 4},  {"red-push", 2, false, 264, 16, 4},
  };
  // PROBE_TMA_MIB (sizes, comma-separated MiB up to 512) and PROBE_TMA_MODE
  // (a mode name) narrow the sweep.
  std::vector<size_t> sizes = {16 * MiB, 32 * MiB, 128 * MiB, 512 * MiB};
  if (const char* e = getenv("PROBE_TMA_MIB")) {
    sizes.clear();
    for (const char* q = e; *q;) {
      char* end;
      const size_t mib = strtoul(q, &end, 10);
      if (end == q || mib == 0 || mib * MiB > maxBytes) {
        fprintf(stderr, "probe: PROBE_TMA_MIB=%s: want MiB in 1..512, comma-separated\n", e);
        exit(2);
      }
      sizes.push_back(mib * MiB);
      q = *end == ',' ? end + 1 : end;
    }
  }
  const char* only = getenv("PROBE_TMA_MODE");
  for (size_t bytes : sizes) {
    for (const Mode& m : modes) {
      if (only && strcmp(only, m.name) != 0) continue;
      auto run = [&](int) {
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          const float* src = m.pull ? dev[1 - g].send : dev[g].send;
          float* dst = m.pull ? dev[g].recv : dev[1 - g].recv;
          if (m.kind == 0)
            push<<<m.grid, 512, 0, dev[g].P>>>((const float4*)src, (float4*)dst, bytes / 16);
          else if (m.kind == 1)
            bulk_copy<0><<<m.grid, 32, m.stages * m.chunkK * 1024, dev[g].P>>>(
                (const char*)src, (char*)dst, bytes, m.chunkK * 1024, m.stages);
          else
            bulk_copy<1><<<m.grid, 32, m.stages * m.chunkK * 1024, dev[g].P>>>(
                (const char*)src, (char*)dst, bytes, m.chunkK * 1024, m.stages);
          CK(cudaGetLastError());
        }
      };
      // Checked once on fresh output: a copy lands the peer's seed; a
      // reduction adds it to seed 3 already there.
      for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        if (m.kind == 2) fill<<<264, 512, 0, dev[g].P>>>(dev[g].recv, bytes / 4, 0, 3);
        else poison<<<264, 512, 0, dev[g].P>>>(dev[g].recv, bytes / 4);
        CK(cudaStreamSynchronize(dev[g].P));
      }
      run(0);
      u64 bad = 0;
      for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaDeviceSynchronize());
        CK(cudaMemset(dev[g].bad, 0, 8));
        if (m.kind == 2) check<<<264, 512>>>(dev[g].recv, bytes / 4, 0, 3, 2 - g, dev[g].bad);
        else same<<<264, 512>>>(dev[g].recv, bytes / 4, 2 - g, dev[g].bad);
        u64 b;
        CK(cudaMemcpy(&b, dev[g].bad, 8, cudaMemcpyDeviceToHost));
        bad += b;
      }
      for (int i = 0; i < 3; i++) run(i);
      const double t = timed(bytes > 128 * MiB ? 10 : bytes > 32 * MiB ? 20 : 50, run);
      printf("%-10s %6zu %5d %7u %3d %10.1f %9.1f %s\n", m.name, bytes / MiB, m.grid, m.chunkK, m.stages, t,
             bytes / t / 1e3, bad ? ("BAD " + std::to_string(bad)).c_str() : "ok");
    }
  }
  teardown();
}
