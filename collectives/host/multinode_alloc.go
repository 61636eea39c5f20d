package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Alloc across nodes: every rank agrees on the size with every other
// (over UCX), then each node allocates through its shared-memory backend
// (alloc.go), so every rank gets memory its node's ranks map. Calls on it
// run as on any memory; where a call's leg inside the node is a
// collective on the node's backend with every buffer in such memory, that
// leg takes the direct path (direct.go).
//
// The hierarchical algorithms' legs inside a node read or write the
// backend's scratch, not the caller's buffers, so on nodes of more than
// one rank (of equal size: where those algorithms run) the scratch they
// need for buffers inside an allocation lives in the node's shared memory
// too: a big part of the allocation's size and a small one of its
// share per local rank, grown (collectively, inside Alloc) to the largest
// allocation made while any has lived, freed with the last. An Alloc there thus costs about
// twice its size; the private scratch the same calls would grow otherwise
// stays unused.

var _ collectives.Registrar = (*multi)(nil)

// kindAlloc tags Alloc's agreements among every rank.
const kindAlloc = 4

// multiReg is the registration of one Alloc across nodes.
type multiReg struct {
	m   *multi
	reg collectives.Registration // the node backend's
}

// Register checks its arguments as the node backend does; it enables
// nothing (alloc.go).
func (m *multi) Register(ctx context.Context, ptr uintptr, size uint64) (collectives.Registration, error) {
	if m.closed.Load() {
		return nil, fmt.Errorf("host backend: register: rank %d: %w", m.rank, collectives.ErrClosed)
	}
	return m.local.Register(ctx, ptr, size)
}

// Alloc allocates size bytes of shared memory that every rank of this
// rank's node maps (collective across every rank; every rank asks for
// the same size). The memory is zero-filled and page-aligned, and stays
// valid until the registration is closed or the backend is. A bad size
// on any rank, or sizes that differ, fail every rank with
// ErrInvalidArgument; a peer that never answers fails it with an error
// naming that peer, within the backend's timeout; a node that could not
// allocate fails every rank, naming a rank of that node.
func (m *multi) Alloc(ctx context.Context, size uint64) (uintptr, collectives.Registration, error) {
	if m.closed.Load() {
		return 0, nil, fmt.Errorf("host backend: alloc: rank %d: %w", m.rank, collectives.ErrClosed)
	}
	bad := allocSizeErr(size)
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ctx = ctx
	defer func() { m.ctx = nil }()
	if err := m.check(); err != nil {
		return 0, nil, err
	}
	if err := m.agreeAlloc(size, bad); err != nil {
		return 0, nil, err
	}
	p, reg, err := m.local.Alloc(ctx, size)
	var sp uintptr
	var sreg collectives.Registration
	big, small := m.scratchFor(size)
	if err == nil && big > 0 {
		// Every node grows alike: the sizes and what each holds agreed.
		m.ctx = ctx
		sp, sreg, err = m.local.Alloc(ctx, uint64(big+small))
	}
	m.ctx = ctx // the node backend's gathers left theirs, ended now
	if err := m.agreeOutcome(err); err != nil {
		if reg != nil {
			_ = reg.Close(ctx)
		}
		if sreg != nil {
			_ = sreg.Close(ctx)
		}
		return 0, nil, err
	}
	if sreg != nil {
		if m.shReg != nil {
			_ = m.shReg.Close(ctx)
		}
		m.shReg, m.shFor = sreg, size
		m.shScr = [2][]byte{hostBytes(sp, big), hostBytes(sp+uintptr(big), small)}
	}
	r := &multiReg{m: m, reg: reg}
	m.allocs = append(m.allocs, r)
	return p, r, nil
}

// scratchFor is the shared scratch an allocation of size bytes needs
// beyond what is held (bytes of the big and the small part); 0, 0 where
// none is needed, or where it would pass the largest allocation (the
// node legs of such calls then stage through private scratch, rather
// than the Alloc fail quoting a size the caller never asked for).
func (m *multi) scratchFor(size uint64) (big, small int) {
	L := len(m.members[m.node])
	if !m.equal || L == 1 || size <= m.shFor {
		return 0, 0
	}
	line := func(n int) int { return (n + lineBytes - 1) / lineBytes * lineBytes }
	big, small = line(int(size)), line((int(size)+L-1)/L)
	if uint64(big+small) > maxAlloc {
		return 0, 0
	}
	return big, small
}

// agreeAlloc allgathers (valid, size, shared scratch held) among every
// rank so that every rank returns the same verdict before any node
// allocates.
func (m *multi) agreeAlloc(size uint64, bad error) error {
	var msg [17]byte
	if bad == nil {
		msg[0] = 1
	}
	le := binary.LittleEndian
	le.PutUint64(msg[1:], size)
	le.PutUint64(msg[9:], m.shFor)
	all, err := m.gatherAll(msg[:])
	if bad != nil {
		return bad
	}
	if err != nil {
		return fmt.Errorf("host backend: alloc: rank %d: agree on the size: %w", m.rank, err)
	}
	for q, got := range all {
		switch {
		case got[0] == 0:
			return fmt.Errorf("%w: host backend: alloc: rank %d gave a bad size", collectives.ErrInvalidArgument, q)
		case le.Uint64(got[1:]) != size:
			return fmt.Errorf("%w: host backend: alloc: rank %d asks for %d bytes, rank %d for %d",
				collectives.ErrInvalidArgument, m.rank, size, q, le.Uint64(got[1:]))
		case le.Uint64(got[9:]) != m.shFor:
			return fmt.Errorf("%w: host backend: alloc: rank %d holds allocations of up to %d bytes, rank %d of %d (closed on some ranks only?)",
				collectives.ErrInvalidArgument, m.rank, m.shFor, q, le.Uint64(got[9:]))
		}
	}
	return nil
}

// agreeOutcome allgathers whether each node allocated: a node that failed
// fails every rank, so that no rank holds an allocation its peers lack. A
// rank whose backend failed meanwhile (a gather of its node's) takes part
// all the same, so that the other nodes' ranks learn it at once.
func (m *multi) agreeOutcome(local error) error {
	failed := m.failure.Load()
	msg := []byte{0}
	if local != nil || failed != nil {
		msg[0] = 1
	}
	all, err := m.gatherAll(msg)
	switch {
	case failed != nil:
		return *failed
	case local != nil:
		return m.globalize(fmt.Errorf("host backend: alloc on node %d: %w", m.node, local))
	case err != nil:
		return fmt.Errorf("host backend: alloc: rank %d: agree on the outcome: %w", m.rank, err)
	}
	for q, got := range all {
		if got[0] != 0 {
			return &collectives.PeerError{Rank: q, Cause: fmt.Errorf("host backend: alloc: node %d (rank %d's) could not allocate", m.nodeOf[q], q)}
		}
	}
	return nil
}

// gatherAll allgathers msg, of a size every rank sends alike, among every
// rank over UCX.
func (m *multi) gatherAll(msg []byte) ([][]byte, error) {
	m.allocOps++
	out := make([][]byte, m.n)
	for r := range out {
		out[r] = msg
		if r == m.rank {
			continue
		}
		out[r] = make([]byte, len(msg))
		if err := m.post(true, r, tag(kindAlloc, r, m.allocOps), out[r]); err != nil {
			return nil, err
		}
		if err := m.post(false, r, tag(kindAlloc, m.rank, m.allocOps), msg); err != nil {
			return nil, err
		}
	}
	return out, m.wait()
}

// nodeScratch is scratch i of n bytes: in the node's shared memory where
// it has room (0: the big part, 1: the small one), else private.
func (m *multi) nodeScratch(i, n int) []byte {
	if len(m.shScr[i]) >= n {
		return m.shScr[i][:n]
	}
	return m.scratch(i, n)
}

// Close frees this rank's hold of the allocation, and with the last one
// the shared scratch (collective by the API's rule, though no exchange
// takes place: alloc.go). The memory must not be used afterwards.
func (r *multiReg) Close(ctx context.Context) error {
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, a := range m.allocs {
		if a != r {
			continue
		}
		m.allocs = append(m.allocs[:i], m.allocs[i+1:]...)
		err := r.reg.Close(ctx)
		if len(m.allocs) == 0 {
			err = errors.Join(err, m.dropScratch(ctx))
		}
		return err
	}
	return nil // closed already, or by the backend's Close
}

// dropScratch frees the shared scratch (m.mu held).
func (m *multi) dropScratch(ctx context.Context) error {
	var err error
	if m.shReg != nil {
		err = m.shReg.Close(ctx)
	}
	m.shReg, m.shFor, m.shScr = nil, 0, [2][]byte{}
	return err
}
