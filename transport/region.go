package transport

import "context"

// Region is a buffer that every rank of a communicator can address from
// this process: Peers[r] is this process's address of rank r's buffer, and
// Peers[Rank()] is the local buffer itself.
type Region struct {
	Size  uint64
	Local uintptr
	Peers []uintptr
	// Priv is the transport's own bookkeeping for Free.
	Priv any
}

// Mapper makes device memory reachable by peers: uva, ipc, vmm and nvls
// implement it. Alloc, Register and Free are collective: every rank calls
// them in the same order with the same size.
type Mapper interface {
	// Name is the transport's name ("uva", "ipc", "vmm", "nvls").
	Name() string
	// Alloc allocates size bytes (rounded up as the transport needs) of
	// device memory and maps every peer's allocation.
	Alloc(ctx context.Context, size uint64) (*Region, error)
	// Register exposes a user allocation [ptr, ptr+size) to peers without
	// copying, where the transport can (ipc: any cuMemAlloc memory; vmm:
	// memory from its own Alloc, or cuMemAlloc memory through IPC handles
	// when no rank's buffer is in one of its Allocs, since VMM can only
	// export what it created).
	Register(ctx context.Context, ptr uintptr, size uint64) (*Region, error)
	// Free unmaps peers' buffers, waits until every peer has done the
	// same, then releases the local one.
	Free(ctx context.Context, r *Region) error
	// Close frees whatever regions remain.
	Close() error
}
