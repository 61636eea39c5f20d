// Package comm is goccl's Go API. A program makes one communicator per
// rank (InitFromEnv under goccl run, torchrun, mpirun or srun; InitRank
// with a UniqueID; InitAll for several devices of one process) and calls
// its collectives (AllReduce, Broadcast, Reduce, AllGather, ReduceScatter),
// point-to-point calls (Send, Recv, AllToAll, Gather, Scatter) and Groups
// on device buffers and the caller's CUDA stream, or on host memory with
// BackendHost. docs/guide.md is the user's guide; the Example functions
// are its code.
//
// Inside, the package creates and tears down communicators: the unique
// id, the TCP bootstrap and its rendezvous, the launchers' environment contracts
// (GOCCL_COMM_ID, torchrun, Open MPI, PMI, Slurm), the Unix sockets that
// pass file descriptors between the ranks of a node, and the Comm type
// through which users call collectives. It sits above collectives/ and
// transport/, and implements transport.Bootstrap for them.
//
// Comm.Split and Comm.Shrink make sub-communicators, each with its own
// bootstrap and backend: Split agrees on the groups over the parent's
// bootstrap (split.go); Shrink meets the survivors over the rescue
// listeners every rank opens at init (rescue.go, shrink.go), so that it
// works when the parent's bootstrap died with a rank.
//
// Where goccl chooses a listen address itself (a new unique id, the rescue
// listeners and the children's bootstraps), GOCCL_SOCKET_IFNAME names the
// interface (ifname.go); unset, it is the loopback. At init rank 0 logs
// the node layout at INFO.
package comm
