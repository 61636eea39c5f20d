// Package ucx moves host memory between the ranks of a job that spans
// nodes, through UCX's protocol layer (libucp), loaded at run time with
// dlopen: goccl builds with Go and gcc alone, and a job that stays on one
// node never loads it.
//
// Load finds libucp.so.0 (GOCCL_UCX_PATH, else the dynamic linker's
// search, else the usual directories) and checks its version (1.13 or
// newer: the few parameter structs goccl fills are declared in shim.c
// from that release's public ABI, and only fields a field mask names are
// read). New makes one worker per rank, exchanges the workers' addresses
// through the communicator's bootstrap (one AllGather, which also carries
// each rank's load error so that all fail together, naming the rank) and
// connects an endpoint to every other rank with peer error handling, so
// that a peer that dies or a link that goes down fails its endpoint.
//
// Sends and receives are tagged and matched exactly (the caller's tags
// name the sender and the call). Wait progresses the worker and polls
// completion; it also polls the caller's abort and context (WaitPolicy),
// the timeout, peers known to have closed, and the endpoints' failures,
// and ends with an error naming the rank. UCX picks its transports itself
// (TCP where that is all there is, RDMA verbs where the machine has them,
// shared memory between processes of one machine); UCX_TLS and
// UCX_NET_DEVICES restrict them, as for any UCX program.
//
// Built without cgo (CGO_ENABLED=0), Load and New fail with
// ErrUnavailable saying so (nocgo.go); the errors and WaitPolicy are the
// same in both builds.
//
// The package sits at the transport level: it imports transport (for
// the Bootstrap) only, and collectives/host composes it with its own
// shared-memory path into the multi-node host backend.
package ucx
