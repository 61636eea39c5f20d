// Package shm shares host memory between the ranks of a node: each rank
// creates a sealed memfd, passes its descriptor to every peer over the
// bootstrap's Unix sockets (SCM_RIGHTS, transport.ExchangeFDs), and maps
// every peer's segment MAP_SHARED. It works the same when all ranks live
// in one process. It backs the host (CPU) backend.
package shm
