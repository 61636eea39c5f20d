package bench

import (
	"context"
	"errors"
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

// PointToPoint is implemented by communicators with point-to-point calls
// and the collectives built on them (comm.Comm through bench/job's
// Adapter). Counts are per peer, as comm's.
type PointToPoint interface {
	// Group runs ops, Sends and Recvs of this rank, as one group.
	Group(ctx context.Context, ops []collectives.P2P) error
	AllToAll(ctx context.Context, send, recv uintptr, count int, dt collectives.DataType, stream uintptr) error
	AllToAllv(ctx context.Context, send uintptr, sendCounts, sendDispls []int, recv uintptr, recvCounts, recvDispls []int, dt collectives.DataType, stream uintptr) error
	Gather(ctx context.Context, send, recv uintptr, count int, dt collectives.DataType, root int, stream uintptr) error
	Scatter(ctx context.Context, send, recv uintptr, count int, dt collectives.DataType, root int, stream uintptr) error
}

// Registrar is implemented by communicators that expose user buffers to
// peers (-R 1: Register existing memory; -R 2: Alloc registered memory).
type Registrar interface {
	Register(ctx context.Context, ptr uintptr, size int) (release func(context.Context) error, err error)
	Alloc(ctx context.Context, size int) (ptr uintptr, release func(context.Context) error, err error)
}

// How Buffers takes its memory (nccl-tests' -R).
const (
	Unregistered = 0 // from the rank's space
	UserMemory   = 1 // from the space, then registered with Register
	FromAlloc    = 2 // from the communicator's Alloc
)

// Buffers takes a rank's buffers from its space, or registered (mode
// UserMemory or FromAlloc, through Reg), and gives them all back in Free:
// the registrations first, so that the peers unmap before the memory under
// them returns to the space. Every rank must ask for the same sizes in the
// same order, as registration is collective and symmetric.
type Buffers struct {
	Space membuf.Space
	Reg   Registrar // needed by the registered modes
	Mode  int

	release []func(context.Context) error
	owned   []membuf.Buffer // from Space
}

// NewBuffers is a rank's Buffers in mode; ok is false when the mode is a
// registered one and comm cannot register (the caller's usage error to
// report, naming its flag).
func NewBuffers(space membuf.Space, comm Comm, mode int) (b Buffers, ok bool) {
	b = Buffers{Space: space, Mode: mode}
	if mode == Unregistered {
		return b, true
	}
	b.Reg, ok = comm.(Registrar)
	return b, ok
}

// Alloc takes size bytes; an empty buffer is never registered.
func (b *Buffers) Alloc(ctx context.Context, size int) (membuf.Buffer, error) {
	if b.Mode == FromAlloc && size > 0 {
		p, rel, err := b.Reg.Alloc(ctx, size)
		if err != nil {
			return membuf.Buffer{}, fmt.Errorf("registered alloc of %d bytes: %w", size, err)
		}
		b.release = append(b.release, rel)
		if h, ok := b.Space.(*membuf.Host); ok {
			return h.Adopt(p, size), nil // the host backend's shared memory
		}
		return membuf.Buffer{Ptr: p, Size: size}, nil
	}
	buf, err := b.Space.Alloc(size)
	if err != nil {
		return buf, err
	}
	if b.Mode == UserMemory && size > 0 {
		rel, err := b.Reg.Register(ctx, buf.Ptr, size)
		if err != nil {
			_ = b.Space.Free(buf)
			return membuf.Buffer{}, fmt.Errorf("register %d bytes: %w", size, err)
		}
		b.release = append(b.release, rel)
	}
	b.owned = append(b.owned, buf)
	return buf, nil
}

// Free undoes every registration, then frees what came from the space.
func (b *Buffers) Free(ctx context.Context) error {
	var errs []error
	for _, rel := range b.release {
		errs = append(errs, rel(ctx))
	}
	for _, buf := range b.owned {
		errs = append(errs, b.Space.Free(buf))
	}
	b.release, b.owned = nil, nil
	return errors.Join(errs...)
}

// Rank is one rank this process drives: its communicator and the space
// its buffers live in (host memory, or its GPU with its stream).
type Rank struct {
	Comm  Comm
	Space membuf.Space
}
