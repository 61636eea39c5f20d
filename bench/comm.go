package bench

import (
	"context"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/membuf"
	"github.com/goccl/goccl/transport"
)

// Comm is what the benchmark needs of one rank's communicator; cmd/goccl
// adapts comm.Comm to it.
type Comm interface {
	Rank() int
	Size() int
	// Run enqueues (GPU) or performs (host) one collective.
	Run(ctx context.Context, a *collectives.Args) error
	// Bootstrap carries the timings and check counts to rank 0.
	Bootstrap() transport.Bootstrap
}

// Registrar is implemented by communicators that expose user buffers to
// peers (-R 1: Register existing memory; -R 2: Alloc registered memory).
type Registrar interface {
	Register(ctx context.Context, ptr uintptr, size int) (release func(context.Context) error, err error)
	Alloc(ctx context.Context, size int) (ptr uintptr, release func(context.Context) error, err error)
}

// Rank is one rank this process drives: its communicator and the space
// its buffers live in (host memory, or its GPU with its stream).
type Rank struct {
	Comm  Comm
	Space membuf.Space
}
