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

// PeerCloser is implemented by backends that can be told that a peer
// closed its communicator cleanly: a wait for that peer that has not been
// met by then never will be, and ends at once with an error wrapping
// ErrPeerClosed and naming the peer, instead of at the timeout. Safe from
// any goroutine, any number of times, also after Close.
type PeerCloser interface {
	PeerClosed(rank int)
}

// GroupRunner is implemented by backends that run groups of calls
// (point-to-point operations, fused collectives). g has been validated;
// the backend may reorder nothing that NCCL's semantics fix: collectives
// keep their order, point-to-point operations to one peer keep theirs.
type GroupRunner interface {
	RunGroup(ctx context.Context, g *Group) error
}

// Registrar is implemented by backends that can expose user buffers to
// peers for zero-copy collectives (the GPU backend).
type Registrar interface {
	// Register makes [ptr, ptr+size) readable by peers; collective.
	Register(ctx context.Context, ptr uintptr, size uint64) (Registration, error)
	// Alloc allocates device memory already registered; collective.
	Alloc(ctx context.Context, size uint64) (ptr uintptr, reg Registration, err error)
}

// PathFacts are the rank-local facts a backend's choice of path for one
// call depends on, beyond the arguments every rank is given alike.
type PathFacts struct {
	SendRegistered bool // the send buffer lies inside a live registration
	RecvRegistered bool // the receive buffer does
	InPlace        bool // send is this rank's part of recv
}

// PathReporter is implemented by backends whose path for a call depends on
// PathFacts (the GPU backend: registered buffers take the copy engines).
// GOCCL_CHECK compares them across ranks, since ranks that took different
// paths would wait for each other forever.
type PathReporter interface {
	// PathFacts reports the facts that decide the path of a (validated),
	// leaving false those that do not.
	PathFacts(a *Args) PathFacts
}

// Path is how a backend carried a call: the algorithm ("" where the
// backend has one way only) and the transport between the ranks.
type Path struct {
	Algo      Algorithm
	Transport string
}

// PathTeller is implemented by backends that say how they carried the
// last call Run or RunGroup took, for the flight recorder; it is asked
// right after, by the goroutine that issued the call.
type PathTeller interface {
	LastPath() Path
}

// Registration is released with Close; collective.
type Registration interface {
	Close(ctx context.Context) error
}
