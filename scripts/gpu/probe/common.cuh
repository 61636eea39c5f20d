// common.cuh: no measurement; what every part of probe.cu shares: checked CUDA calls, exactly
// summable test values, the two devices' buffers and streams, and timing
// between events. Included once, by probe.cu.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"

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

// push: src copied to dst, 16 bytes a lane; with dst the peer's (or src,
// pulling), what the link gives to SM stores (loads).
__global__ void __launch_bounds__(512) push(const float4* src, float4* dst, size_t n4) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
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

