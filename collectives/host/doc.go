// Package host is the host (CPU) backend: all five collectives over host
// memory shared between the ranks of a node (transport/shm), synchronized
// through atomics in that shared memory, never through the bootstrap. It
// serves CPU-only users and lets every layer above the GPU be tested
// without one.
//
// Each rank maps a segment holding control words (a sleeper count, the
// job's abort word on rank 0, and two boxes, one per step parity, each a
// step counter, the call's descriptor and room for a small call's data in
// the counter's cache line and those after it) and two staging halves of
// Config.StagingBytes, whatever the count: collectives run in rounds of
// at most one half. AllReduce and Reduce run one-shot (every rank stages
// its chunk, one barrier, the reducer reads all) up to Config.OneShotMax
// bytes, and two-shot above (each rank reduces 1/n of each chunk,
// publishes it, and the others gather it, one step per chunk); GOCCL_ALGO
// or Config.Algo forces either. Calls of up to 992 bytes travel in the
// boxes. ReduceScatter stages each destination's block; Broadcast and
// AllGather copy through staging.
//
// Large AllReduce, AllGather, Broadcast and ReduceScatter calls (from
// Config.CMAMin bytes) can skip staging and copy straight between the
// ranks' buffers (cma.go, cma_algos.go): each rank publishes its buffers'
// addresses, AllReduce reduces each rank's part reading the peers' parts,
// then gathers the reduced parts from the peers' receive buffers, and no
// rank returns while a peer may still read it. Ranks of one process read
// each other in place, which they do by default (when every rank has a
// CPU); ranks of several
// processes read through process_vm_readv, only when asked
// (GOCCL_HOST_CMA=1), since the kernel's copy of 4 KiB pages one by one
// is slower than staging that stays in the caches where measured.
//
// Buffers from Alloc (alloc.go) are memfds every rank of the node maps,
// once per process (allocmem.go), as NCCL's ncclMemAlloc plus
// ncclCommRegister. An AllReduce, Reduce, AllGather, Broadcast or
// ReduceScatter (PreMulSum included) whose buffers lie inside such
// allocations on every rank takes the direct path (direct.go): no staging, each rank
// reads the peers' inputs and writes the peers' outputs in place, as many
// bytes as a memcpy of the call. The ranks decide at the call from each
// other's published buffer places; if any rank's buffer lies elsewhere,
// every rank takes the paths above. Register of other memory returns a
// registration that enables nothing (private memory cannot be mapped by
// another process).
//
// Point-to-point operations (RunGroup: Send, Recv, and AllToAll(v),
// Gather and Scatter, which arrive as groups of them) take no part in the
// barriers: each ordered pair of ranks has a ring of slots in the sender's
// segment (the staging size split over the destinations), and a group's
// operations all progress together until every one has finished (p2p.go,
// group.go). A Send returns once its receiver holds the data.
//
// Ranks on several nodes (Config.Nodes, which comm fills from every
// rank's node identity) make the backend two (multinode.go): this
// shared-memory backend among the ranks of each node, built over a
// bootstrap of the node's ranks, and internode/ucx between nodes, loaded
// only then. AllReduce, ReduceScatter and AllGather run hierarchically
// where the nodes have equal sizes (inside the node, along the rail of
// one local rank per node over UCX, inside the node again); averages,
// half types and unequal nodes take a flat path over UCX reduced once in
// rank order; Broadcast and Reduce go through one rank per node; groups
// run over UCX. Alloc there gives node-local shared memory, and the
// hierarchical algorithms' legs inside the node take the direct path on
// it (multinode_alloc.go). docs/multinode.md has the design.
//
// Reductions visit ranks in order on every rank, so results are bitwise
// identical across ranks. Half types accumulate in float32 and round once;
// integer averages divide the exact sum (taken in 64 bits; 64-bit types
// wrap) truncating, as NCCL does; integer overflow wraps.
//
// Buffers are host addresses (Args.Send/Recv as uintptr): the caller keeps
// the memory alive and unmoved during Run (Go callers: runtime.KeepAlive
// the slices after Run; stack memory is not allowed).
//
// A wait that outlasts Config.Timeout, a cancelled context, or Abort on
// any rank aborts the whole job: every rank's current and later calls
// return an error wrapping collectives.ErrTimeout or ErrAborted (with a
// *collectives.PeerError naming the rank when it was another's doing).
package host
