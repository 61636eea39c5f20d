// Package shm shares host memory between the ranks of a node: memfd
// segments passed as file descriptors over the bootstrap's Unix sockets and
// mapped by every peer. It backs the host (CPU) backend.
package shm
