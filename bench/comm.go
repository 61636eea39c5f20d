package bench

import (
	"context"
	"fmt"

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

// AllocRegistered takes size bytes that peers can reach: from reg's Alloc
// (fromAlloc, -R 2), or from space and then registered with reg (-R 1, as a
// framework registers its tensors). release undoes the registration and
// frees Alloc's memory; memory from space stays the caller's to free, after
// release, so that the peers unmap it first.
func AllocRegistered(ctx context.Context, reg Registrar, space membuf.Space, size int, fromAlloc bool) (membuf.Buffer, func(context.Context) error, error) {
	if fromAlloc {
		p, rel, err := reg.Alloc(ctx, size)
		if err != nil {
			return membuf.Buffer{}, nil, fmt.Errorf("registered alloc of %d bytes: %w", size, err)
		}
		return membuf.Buffer{Ptr: p, Size: size}, rel, nil
	}
	b, err := space.Alloc(size)
	if err != nil {
		return b, nil, err
	}
	rel, err := reg.Register(ctx, b.Ptr, size)
	if err != nil {
		_ = space.Free(b)
		return membuf.Buffer{}, nil, fmt.Errorf("register %d bytes: %w", size, err)
	}
	return b, rel, nil
}

// Rank is one rank this process drives: its communicator and the space
// its buffers live in (host memory, or its GPU with its stream).
type Rank struct {
	Comm  Comm
	Space membuf.Space
}
