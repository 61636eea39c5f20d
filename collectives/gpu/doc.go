// Package gpu is the GPU backend: collectives as kernels that read and
// write peers' memory over NVLink, through the transport chosen for the
// communicator (uva, ipc, vmm), enqueued on the caller's stream.
//
// Broadcast and AllGather whose receive buffer is registered (Register or
// Alloc, symmetric across ranks, same offset on every rank) take a
// copy-engine path from the CopyEngine threshold (collectives.Thresholds) (or when
// GOCCL_ALGO=ce): cuMemcpyAsync straight into the peers' buffers, ordered by
// stream memory operations; see ce.go for the protocol and its limits
// (kernels under CUDA-graph capture; waits not abortable mid-wait).
//
// Groups (RunGroup) run their collectives one launch each, then their
// Sends and Recvs as kernels/p2p.cu's goccl_p2p: one launch per group (a
// further one per 8 ops of one peer and direction), each peer and
// direction on several blocks pushing chunks through the receiver's
// staging slots, with credits, per-pair counters kept on the device (CUDA
// graphs replay) and both byte counts of every pair compared in the
// kernel: a disagreement fails the next call on both ranks, naming the
// peer and both counts (p2p.go).
package gpu
