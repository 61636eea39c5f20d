package collectives

import "context"

// Backend executes validated collectives for one rank. The host backend
// (collectives/host) runs them synchronously over shared host memory; the
// GPU backend (collectives/gpu) enqueues kernels on Args.Stream and returns
// without synchronizing.
type Backend interface {
	// Run executes or enqueues one collective. a has been validated.
	Run(ctx context.Context, a *Args) error
	// Abort makes every current and future wait return an error wrapping
	// cause; safe from any goroutine, any number of times.
	Abort(cause error)
	// Close releases every resource. It must be called on every rank.
	Close() error
}

// Registrar is implemented by backends that can expose user buffers to
// peers for zero-copy collectives (the GPU backend).
type Registrar interface {
	// Register makes [ptr, ptr+size) readable by peers; collective.
	Register(ctx context.Context, ptr uintptr, size uint64) (Registration, error)
	// Alloc allocates device memory already registered; collective.
	Alloc(ctx context.Context, size uint64) (ptr uintptr, reg Registration, err error)
}

// Registration is released with Close; collective.
type Registration interface {
	Close(ctx context.Context) error
}
