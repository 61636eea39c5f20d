// Package nccl drives NVIDIA's NCCL between the nodes of a GPU job:
// libnccl.so.2 is loaded at run time with dlopen, so goccl builds with Go
// and gcc alone (no NCCL header, no link-time dependency) and a job that
// stays on one node never loads it.
//
// Load looks in order at GOCCL_NCCL_PATH (the library, or a directory
// holding it), at the pip package's copy (nvidia/nccl/lib/libnccl.so.2
// under the Python site-packages directories of the environment, the
// usual prefixes, and what python3 itself names), and at the system's
// libnccl.so.2 through the dynamic linker and the usual directories. It
// never takes goccl's own NCCL-API library (capi/'s libnccl.so.2, whose
// error text names goccl): that one would route the traffic back into
// goccl; where that library is in the process already (a program built
// on goccl's NCCL API), NCCL is opened with RTLD_DEEPBIND so that its
// calls to its own entry points stay NCCL's. It checks the release (2.19
// or newer). Its error names every
// path tried and why each failed, and the setting to use.
//
// InitRank makes one communicator: it sets NCCL_HOSTID to the id the
// caller derives from goccl's node identity for the length of
// ncclCommInitRank, so that NCCL and goccl agree on where the ranks are.
// NCCL reads it at the process's first init and keeps it: every init of
// a process must be given the same id. Inits are serialized within the
// process. Every
// collective and point-to-point call is enqueued on the caller's CUDA
// stream with the caller's CUDA context made current, so that CUDA graph
// capture records it as it records goccl's own kernels.
//
// Built without cgo (CGO_ENABLED=0), Load fails with ErrUnavailable
// saying so (nocgo.go); the errors and value types are the same in both
// builds.
//
// The package sits at the transport level and imports nothing of goccl:
// collectives/gpu composes it with goccl's own transports into the GPU
// backend of jobs that span nodes.
package nccl
