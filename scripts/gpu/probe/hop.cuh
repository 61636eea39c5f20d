// hop.cuh: probe.cu's hop part: the latency of one dependency between the
// two GPUs when streams carry it, as the copy-engine paths do (a flag written
// by one stream's cuStreamWriteValue32 into the peer's memory, waited on by
// the peer's cuStreamWaitValue32), beside events (one process only) and
// beside the work a copy-engine call queues behind such a wait, and beside
// two variants of the flags: writes without their memory barrier (enough
// for a flag that publishes no data), and the flag kept in the writer's
// memory with the waiter polling across NVLink. Each row is
// a round trip GPU0 -> GPU1 -> GPU0, enqueued 200 times with no host
// synchronization, time per round.
#pragma once

#include <cuda.h>

#include "check.cuh"

__global__ void touch(unsigned* p, unsigned v) { *p = v; }

// spin_then_write: one thread waits for *wait >= v (written by the peer)
// and then writes v into the peer's *post: the kernels' own flags.
__global__ void spin_then_write(volatile unsigned* wait, volatile unsigned* post, unsigned v, int first) {
  if (first) *post = v;
  while ((int)(*wait - v) < 0) {
  }
  if (!first) *post = v;
}

void probe_hop() {
  printf("== one dependency between the GPUs, round trips (GPU0 -> GPU1 -> GPU0)\n");
  printf("%-44s %10s\n", "mode", "us/round");
  setup(1 * MiB, 0, 1);
  unsigned* flag[2];
  unsigned* scratch[2];
  cudaEvent_t ev[2];
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaMalloc(&flag[g], 4096));
    CK(cudaMemset(flag[g], 0, 4096));
    CK(cudaMalloc(&scratch[g], 1 * MiB));
    CK(cudaEventCreateWithFlags(&ev[g], cudaEventDisableTiming));
  }
  CK(cudaDeviceSynchronize());
  unsigned v = 0;
  // nobar: the write skips its memory barrier (a flag that publishes no
  // data, like the copy-engine paths' ready, needs none).
  bool nobar = false;
  auto post = [&](int g, unsigned* where) {
    CKD(cuStreamWriteValue32((CUstream)dev[g].P, (CUdeviceptr)where, v,
                             nobar ? CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER : CU_STREAM_WRITE_VALUE_DEFAULT));
  };
  auto wait_at = [&](int g, unsigned* where) {
    CKD(cuStreamWaitValue32((CUstream)dev[g].P, (CUdeviceptr)where, v, CU_STREAM_WAIT_VALUE_GEQ));
  };
  auto wait = [&](int g) { wait_at(g, flag[g]); };
  struct Mode {
    const char* name;
    int kind;
  };
  const Mode modes[] = {
      {"stream flags (write peer, wait local)", 0},
      {"events across devices (one process)", 1},
      {"stream flags, a 1-thread kernel behind", 2},
      {"stream flags, a 4 KiB peer copy behind", 3},
      {"stream flags, a 128-block kernel behind", 4},
      {"kernel flags (1 thread spins, no streams)", 5},
      {"stream flags, local only (GPU0 alone)", 6},
      {"stream flags, writes without memory barrier", 7},
      {"the same, a 4 KiB peer copy behind", 8},
      {"stream flags, write local, wait on the peer", 9},
      {"the same, writes without memory barrier", 10},
  };
  // The driver may refuse writes without their barrier (H200 with CUDA 13.0
  // does: invalid argument); their rows are then left out.
  CK(cudaSetDevice(0));
  const bool nobarOK = cuStreamWriteValue32((CUstream)dev[0].P, (CUdeviceptr)flag[0], 0,
                                            CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) == CUDA_SUCCESS;
  CK(cudaDeviceSynchronize());
  for (const Mode& m : modes) {
    nobar = m.kind == 7 || m.kind == 8 || m.kind == 10;
    if (nobar && !nobarOK) {
      printf("%-44s %10s\n", m.name, "refused");
      continue;
    }
    auto round = [&](int) {
      v++;
      switch (m.kind) {
        case 1:
          CK(cudaSetDevice(0));
          CK(cudaEventRecord(ev[0], dev[0].P));
          CK(cudaSetDevice(1));
          CK(cudaStreamWaitEvent(dev[1].P, ev[0], 0));
          CK(cudaEventRecord(ev[1], dev[1].P));
          CK(cudaSetDevice(0));
          CK(cudaStreamWaitEvent(dev[0].P, ev[1], 0));
          break;
        case 5:
          CK(cudaSetDevice(0));
          spin_then_write<<<1, 1, 0, dev[0].P>>>(flag[0], flag[1], v, 1);
          CK(cudaSetDevice(1));
          spin_then_write<<<1, 1, 0, dev[1].P>>>(flag[1], flag[0], v, 0);
          break;
        case 6:
          CK(cudaSetDevice(0));
          post(0, flag[0]);
          wait(0);
          break;
        case 9:
        case 10:
          // Each GPU raises the flag in its own memory; the other's stream
          // polls it across NVLink.
          CK(cudaSetDevice(0));
          post(0, flag[0] + 1);
          wait_at(0, flag[1] + 1);
          CK(cudaSetDevice(1));
          wait_at(1, flag[0] + 1);
          post(1, flag[1] + 1);
          break;
        default:
          CK(cudaSetDevice(0));
          post(0, flag[1]);
          wait(0);
          CK(cudaSetDevice(1));
          wait(1);
          if (m.kind == 2) touch<<<1, 1, 0, dev[1].P>>>(scratch[1], v);
          if (m.kind == 3 || m.kind == 8) CK(cudaMemcpyAsync(scratch[0], scratch[1], 4096, cudaMemcpyDefault, dev[1].P));
          if (m.kind == 4)
            add<<<128, 512, 0, dev[1].P>>>((float4*)scratch[1], (const float4*)scratch[1] + 4096, 4096);
          post(1, flag[0]);
      }
    };
    for (int i = 0; i < 20; i++) round(i);
    const double t = timed(200, round);
    printf("%-44s %10.2f\n", m.name, t);
  }
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceSynchronize());
    CK(cudaFree(flag[g]));
    CK(cudaFree(scratch[g]));
    CK(cudaEventDestroy(ev[g]));
  }
  teardown();
}
