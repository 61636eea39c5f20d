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
package gpu
