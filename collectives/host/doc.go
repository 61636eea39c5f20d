// Package host is the host (CPU) backend: all five collectives over host
// memory shared between the ranks of a node (transport/shm), synchronized
// through atomics in that shared memory. It serves CPU-only users and lets
// every layer above the GPU be tested without one.
package host
