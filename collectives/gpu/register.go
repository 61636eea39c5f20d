package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// ErrNotSymmetric: the ranks asked Register or Alloc for buffers of
// different sizes (or one of them gave bad arguments). Registration is
// symmetric, as NCCL's symmetric registration: the k-th Register/Alloc of
// every rank names that rank's copy of one logical buffer, of one size.
// It wraps collectives.ErrInvalidArgument.
var ErrNotSymmetric = fmt.Errorf("registration is not symmetric across ranks: %w", collectives.ErrInvalidArgument)

// registration is a user buffer mapped by every peer. base and size are
// what the caller registered (Alloc: the requested size, not the
// transport's rounding), so that every rank sees the same span.
type registration struct {
	be     *Backend
	region *transport.Region
	base   uintptr
	size   uint64
	owned  bool
	// seq numbers the registrations in the order they were made, which
	// is the same on every rank (Register and Alloc are collective), so
	// that Close frees them in an order every rank shares; it is also the
	// registration's tag in the zero-copy table (p2pzc.go).
	seq uint64
	// zcSlot: r holds its entry of the zero-copy table.
	zcSlot bool
}

// Register exposes [ptr, ptr+size) to peers (collective). Every rank must
// register its corresponding buffer with the same size; a mismatch fails on
// every rank with ErrNotSymmetric before anything is mapped. A Broadcast or
// AllGather whose receive buffer lies inside a registration, at the same
// offset on every rank, may take the copy-engine path (ce.go).
func (be *Backend) Register(ctx context.Context, ptr uintptr, size uint64) (collectives.Registration, error) {
	if err := be.usable(); err != nil {
		return nil, err
	}
	var bad error
	if ptr == 0 || size == 0 {
		bad = fmt.Errorf("gpu backend: register %#x+%d: %w", ptr, size, collectives.ErrInvalidArgument)
	}
	if err := be.agreeSize(ctx, "register", size, bad); err != nil {
		return nil, err
	}
	r, err := be.mapper.Register(ctx, ptr, size)
	if err != nil {
		return nil, fmt.Errorf("gpu backend: register: %w", err)
	}
	return be.track(&registration{be: be, region: r, base: ptr, size: size}), nil
}

// Alloc allocates size bytes of device memory already registered
// (collective; every rank asks for the same size).
func (be *Backend) Alloc(ctx context.Context, size uint64) (uintptr, collectives.Registration, error) {
	if err := be.usable(); err != nil {
		return 0, nil, err
	}
	var bad error
	if size == 0 {
		bad = fmt.Errorf("gpu backend: alloc 0 bytes: %w", collectives.ErrInvalidArgument)
	}
	if err := be.agreeSize(ctx, "alloc", size, bad); err != nil {
		return 0, nil, err
	}
	r, err := be.mapper.Alloc(ctx, size)
	if err != nil {
		return 0, nil, fmt.Errorf("gpu backend: alloc: %w", err)
	}
	return r.Local, be.track(&registration{be: be, region: r, base: r.Local, size: size, owned: true}), nil
}

// usable is the error of a backend that takes no new registrations:
// aborted, or closed (Close has dropped the transport).
func (be *Backend) usable() error {
	if be.aborted.Load() {
		return be.abortErr()
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.closed {
		return collectives.ErrClosed
	}
	return nil
}

// agreeSize allgathers (valid, size) so that every rank returns the same
// verdict: a bad argument or a size mismatch on any rank fails all of them
// before the transport maps anything (a rank returning early alone would
// leave the others waiting in the transport's exchange).
func (be *Backend) agreeSize(ctx context.Context, what string, size uint64, bad error) error {
	var msg [9]byte
	if bad == nil {
		msg[0] = 1
	}
	binary.LittleEndian.PutUint64(msg[1:], size)
	all, err := be.boot.AllGather(ctx, msg[:])
	if err != nil {
		return fmt.Errorf("gpu backend: %s: agree on sizes: %w", what, err)
	}
	if bad != nil {
		return bad
	}
	for r, m := range all {
		if len(m) != len(msg) {
			return fmt.Errorf("gpu backend: %s: rank %d sent %d bytes, want %d: %w", what, r, len(m), len(msg), ErrNotSymmetric)
		}
		if m[0] == 0 {
			return fmt.Errorf("gpu backend: %s: rank %d gave bad arguments: %w", what, r, ErrNotSymmetric)
		}
		if s := binary.LittleEndian.Uint64(m[1:]); s != size {
			return fmt.Errorf("gpu backend: %s: rank %d asks for %d bytes, rank %d for %d: %w", what, be.rank, size, r, s, ErrNotSymmetric)
		}
	}
	return nil
}

// track inserts r into the table, kept sorted by base so that Run finds a
// buffer's registration without allocating.
func (be *Backend) track(r *registration) *registration {
	be.mu.Lock()
	defer be.mu.Unlock()
	be.regSeq++
	r.seq = be.regSeq
	i := len(be.regs)
	for i > 0 && be.regs[i-1].base > r.base {
		i--
	}
	be.regs = append(be.regs, nil)
	copy(be.regs[i+1:], be.regs[i:])
	be.regs[i] = r
	// An entry that cannot be written leaves r to staging (zcPublish).
	_ = be.zcPublish(r)
	return r
}

// untrack removes r; false when it was not there (closed already).
func (be *Backend) untrack(r *registration) bool {
	be.mu.Lock()
	defer be.mu.Unlock()
	for i, x := range be.regs {
		if x == r {
			copy(be.regs[i:], be.regs[i+1:])
			be.regs[len(be.regs)-1] = nil
			be.regs = be.regs[:len(be.regs)-1]
			return true
		}
	}
	return false
}

// PathFacts implements collectives.PathReporter: the registrations tryCE
// looks at for a, and for a reduction into registered buffers whether it
// runs in place (direct mode runs out of place only).
func (be *Backend) PathFacts(a *collectives.Args) collectives.PathFacts {
	be.mu.Lock()
	defer be.mu.Unlock()
	var f collectives.PathFacts
	if a.Coll == collectives.Reduce { // never on the copy engines
		return f
	}
	recv, send := be.callRegs(a)
	f.RecvRegistered, f.SendRegistered = recv != nil, send != nil
	f.InPlace = f.SendRegistered && f.RecvRegistered && a.InPlace(be.rank)
	return f
}

// callRegs returns the registrations holding a's receive buffer and, for a
// reduction, its send buffer (nil where none does): what tryCE chooses by
// and PathFacts reports. be.mu is held.
func (be *Backend) callRegs(a *collectives.Args) (recv, send *registration) {
	recv = be.lookup(a.Recv, uint64(a.RecvBytes(be.nranks)))
	if a.Coll.Reduces() {
		send = be.lookup(a.Send, uint64(a.SendBytes(be.nranks)))
	}
	return recv, send
}

// lookup returns the registration holding [p, p+n), nil when none does.
// be.mu is held. Registrations may overlap (a sub-buffer registered
// inside an Alloc), so it scans down from the last base <= p.
func (be *Backend) lookup(p uintptr, n uint64) *registration {
	lo, hi := 0, len(be.regs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if be.regs[m].base <= p {
			lo = m + 1
		} else {
			hi = m
		}
	}
	for i := lo - 1; i >= 0; i-- {
		r := be.regs[i]
		if off := uint64(p - r.base); off <= r.size && n <= r.size-off {
			return r
		}
	}
	return nil
}

// Close releases the registration (collective). It waits for this rank's
// work first: a copy-engine call may still be writing through the peers'
// mappings that the transport is about to unmap.
func (r *registration) Close(ctx context.Context) error {
	be := r.be
	if !be.untrack(r) {
		return nil
	}
	return r.free(ctx)
}

func (r *registration) free(ctx context.Context) error {
	var errs []error
	if !r.be.aborted.Load() {
		if err := r.be.drv.CtxSynchronize(r.be.ctx); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: synchronize before freeing a registration: %w", err))
		}
	}
	// No Send of this rank goes into the peers' copies any more.
	r.be.mu.Lock()
	if err := r.be.zcRetract(r); err != nil {
		errs = append(errs, err)
	}
	r.be.mu.Unlock()
	if err := r.be.mapper.Free(ctx, r.region); err != nil {
		errs = append(errs, fmt.Errorf("gpu backend: free registration: %w", err))
	}
	return errors.Join(errs...)
}
