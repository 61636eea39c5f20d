// Package gpu is the GPU backend: collectives as kernels that read and
// write peers' memory over NVLink, through the transport chosen for the
// communicator (uva, ipc, vmm), enqueued on the caller's stream.
package gpu
