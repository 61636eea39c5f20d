package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Buffers in shared memory (the counterpart of NCCL's ncclMemAlloc and
// ncclCommRegister). Alloc is collective: every rank creates a memfd of
// the size asked for, the descriptors travel between the processes as
// the backend's own segments do, and every process maps every rank's
// memory once, its ranks sharing the mapping (allocmem.go). A call whose buffers lie inside such allocations on every rank
// takes the direct path (direct.go): ranks read the peers' inputs and
// write the peers' outputs in place, through their mappings.
//
// The k-th Alloc of every rank names that rank's copy of one logical
// buffer: its id, the same on every rank, is how a rank tells its peers
// which allocation its buffer lies in.
//
// Register of memory not from Alloc returns a registration that enables
// nothing: private memory cannot be mapped by another process, and calls
// on it take the staging path, as NCCL silently falls back for buffers it
// cannot register.

var _ collectives.Registrar = (*backend)(nil)

// maxAlloc bounds one allocation (1 TiB): a size past it is a mistake
// rather than a request.
const maxAlloc = 1 << 40

// allocSizeErr is this rank's own verdict on an Alloc's size (nil: good),
// sent to the others so that every rank fails alike.
func allocSizeErr(size uint64) error {
	if size == 0 || size > maxAlloc {
		return fmt.Errorf("%w: host backend: alloc: size %d (want 1 to %d bytes)", collectives.ErrInvalidArgument, size, uint64(maxAlloc))
	}
	return nil
}

// allocation is one Alloc: every rank's memory as mapped here.
type allocation struct {
	id   uint64 // the Alloc's number, alike on every rank
	seg  *allocMem
	size int     // the size asked for (the mapping is rounded to a page)
	base uintptr // this rank's own mapping
}

// allocReg is the registration Alloc returns; Close unmaps it.
type allocReg struct {
	b *backend
	a *allocation
}

// noReg is Register's registration: it enables nothing.
type noReg struct{}

func (noReg) Close(context.Context) error { return nil }

// Register checks its arguments and returns a registration that enables
// nothing (see above); no exchange with the peers takes place.
func (b *backend) Register(_ context.Context, ptr uintptr, size uint64) (collectives.Registration, error) {
	switch {
	case b.closed.Load():
		return nil, fmt.Errorf("host backend: register: rank %d: %w", b.rank, collectives.ErrClosed)
	case ptr == 0:
		return nil, fmt.Errorf("%w: host backend: register: ptr is 0", collectives.ErrInvalidArgument)
	case size == 0:
		return nil, fmt.Errorf("%w: host backend: register: size is 0", collectives.ErrInvalidArgument)
	}
	return noReg{}, nil
}

// Alloc allocates size bytes of shared memory that every rank of the
// communicator maps (collective; every rank asks for the same size). The
// memory is zero-filled and page-aligned, and stays valid until the
// registration is closed or the backend is. A bad size on any rank, or
// sizes that differ, fail every rank with ErrInvalidArgument; a peer that
// never answers fails it with an error naming that peer, within the
// backend's timeout.
func (b *backend) Alloc(ctx context.Context, size uint64) (uintptr, collectives.Registration, error) {
	if b.closed.Load() {
		return 0, nil, fmt.Errorf("host backend: alloc: rank %d: %w", b.rank, collectives.ErrClosed)
	}
	bad := allocSizeErr(size)
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.interrupted(context.Background()); err != nil {
		return 0, nil, err
	}
	id := b.allocSeq
	b.allocSeq++
	if err := b.agreeAllocSize(ctx, size, bad); err != nil {
		return 0, nil, err
	}
	seg, err := mapAlloc(ctx, b.boot, int(size))
	if err != nil {
		return 0, nil, b.namePeer(fmt.Errorf("host backend: alloc of %d bytes: rank %d: %w", size, b.rank, err))
	}
	a := &allocation{id: id, seg: seg, size: int(size), base: addrOf(seg.Local)}
	b.allocs = append(b.allocs, a)
	if b.dtmp == nil {
		b.dtmp = make([]byte, directChunk)
		b.dsend, b.drecv = make([]uintptr, b.n), make([]uintptr, b.n)
	}
	return a.base, &allocReg{b: b, a: a}, nil
}

// agreeAllocSize allgathers (valid, size) so that every rank returns the
// same verdict before any maps anything.
func (b *backend) agreeAllocSize(ctx context.Context, size uint64, bad error) error {
	var msg [9]byte
	if bad == nil {
		msg[0] = 1
	}
	binary.LittleEndian.PutUint64(msg[1:], size)
	all, err := b.boot.AllGather(ctx, msg[:])
	if bad != nil {
		return bad
	}
	if err != nil {
		return b.namePeer(fmt.Errorf("host backend: alloc: rank %d: agree on the size: %w", b.rank, err))
	}
	for q, m := range all {
		switch {
		case len(m) != len(msg):
			return fmt.Errorf("%w: host backend: alloc: rank %d sent %d bytes, want %d", collectives.ErrInvalidArgument, q, len(m), len(msg))
		case m[0] == 0:
			return fmt.Errorf("%w: host backend: alloc: rank %d gave a bad size", collectives.ErrInvalidArgument, q)
		case binary.LittleEndian.Uint64(m[1:]) != size:
			return fmt.Errorf("%w: host backend: alloc: rank %d asks for %d bytes, rank %d for %d",
				collectives.ErrInvalidArgument, b.rank, size, q, binary.LittleEndian.Uint64(m[1:]))
		}
	}
	return nil
}

// namePeer makes a failed exchange name the peer: the bootstrap's errors
// do where they know it; between two ranks it can only be the other one.
func (b *backend) namePeer(err error) error {
	var pe *collectives.PeerError
	if errors.As(err, &pe) || b.n != 2 {
		return err
	}
	return &collectives.PeerError{Rank: 1 - b.rank, Cause: err}
}

// Close lets go of this rank's hold of every rank's memory (collective by
// the API's rule, though no exchange takes place: a peer's hold, in this
// process or its own mapping elsewhere, keeps the memory alive until it
// lets go too). The memory must not be used by this rank afterwards.
func (r *allocReg) Close(context.Context) error {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, a := range b.allocs {
		if a == r.a {
			b.allocs = append(b.allocs[:i], b.allocs[i+1:]...)
			if err := a.seg.Close(); err != nil {
				return fmt.Errorf("host backend: close allocation: %w", err)
			}
			return nil
		}
	}
	return nil // closed already, or by the backend's Close
}

// closeAllocs unmaps every allocation (the backend's Close; b.mu held).
func (b *backend) closeAllocs() error {
	var errs []error
	for _, a := range b.allocs {
		errs = append(errs, a.seg.Close())
	}
	b.allocs = nil
	return errors.Join(errs...)
}

// findAlloc returns the allocation holding [p, p+n) on this rank and p's
// offset in it; nil when there is none.
func (b *backend) findAlloc(p uintptr, n int) (*allocation, int) {
	for _, a := range b.allocs {
		if p >= a.base && p-a.base <= uintptr(a.size) && uintptr(n) <= uintptr(a.size)-(p-a.base) {
			return a, int(p - a.base)
		}
	}
	return nil, 0
}

// allocByID returns the allocation numbered id; nil when there is none.
func (b *backend) allocByID(id uint64) *allocation {
	for _, a := range b.allocs {
		if a.id == id {
			return a
		}
	}
	return nil
}
