package comm

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Send sends count elements of buf to peer, enqueued on stream. It pairs
// with peer's matching Recv (the k-th Send to a peer with its k-th Recv
// from this rank); the two must agree on count and type. peer may be this
// rank. On the host backend a Send that fits the pair's ring (about 2 MiB
// over the ranks, docs/guide.md) returns without waiting for its Recv, as
// NCCL's small Sends do, and a larger one once peer has the data; on the
// GPU backend a Send up to 256 KiB (the pair's eager rings) completes
// without its Recv, and a larger one waits for its Recv to start. For
// several point-to-point calls that depend on each other, use a Group.
func (c *Comm) Send(ctx context.Context, buf uintptr, count int, dt DataType, peer int, stream uintptr) error {
	return c.oneP2P(ctx, collectives.P2P{Kind: collectives.SendOp, Peer: peer, Buf: buf, Count: count, Type: dt, Stream: stream})
}

// Recv receives count elements into buf from peer, enqueued on stream.
func (c *Comm) Recv(ctx context.Context, buf uintptr, count int, dt DataType, peer int, stream uintptr) error {
	return c.oneP2P(ctx, collectives.P2P{Kind: collectives.RecvOp, Peer: peer, Buf: buf, Count: count, Type: dt, Stream: stream})
}

func (c *Comm) oneP2P(ctx context.Context, op collectives.P2P) error {
	if err := op.Validate(c.rank, c.size); err != nil {
		return fmt.Errorf("goccl: rank %d: %w", c.rank, err)
	}
	return c.withGroup(ctx, collectives.PlainGroup, func(g *collectives.Group) {
		g.P2P = append(g.P2P, op)
	})
}

// AllToAll sends block p (count elements) of send to rank p and receives
// rank p's block for this rank into block p of recv, for every rank p
// (count*Size elements in each buffer), as ncclAlltoAll.
func (c *Comm) AllToAll(ctx context.Context, send, recv uintptr, count int, dt DataType, stream uintptr) error {
	if err := c.checkBlocks("AllToAll", send, recv, count, dt); err != nil {
		return err
	}
	es := uintptr(count) * uintptr(dt.Size())
	return c.withGroup(ctx, collectives.AllToAllGroup, func(g *collectives.Group) {
		for p := 0; p < c.size; p++ {
			g.P2P = append(g.P2P,
				collectives.P2P{Kind: collectives.SendOp, Peer: p, Buf: send + uintptr(p)*es, Count: count, Type: dt, Stream: stream},
				collectives.P2P{Kind: collectives.RecvOp, Peer: p, Buf: recv + uintptr(p)*es, Count: count, Type: dt, Stream: stream})
		}
	})
}

// AllToAllv sends sendCounts[p] elements from send+sendDispls[p] (in
// elements) to rank p and receives recvCounts[p] elements from rank p at
// recv+recvDispls[p]. Each pair's counts must agree (rank a's
// sendCounts[b] is rank b's recvCounts[a]); zeros are allowed.
func (c *Comm) AllToAllv(ctx context.Context, send uintptr, sendCounts, sendDispls []int, recv uintptr, recvCounts, recvDispls []int, dt DataType, stream uintptr) error {
	for _, v := range []struct {
		name string
		s    []int
	}{{"sendCounts", sendCounts}, {"sendDispls", sendDispls}, {"recvCounts", recvCounts}, {"recvDispls", recvDispls}} {
		if len(v.s) != c.size {
			return fmt.Errorf("goccl: rank %d: AllToAllv: %s has %d entries, want %d (one per rank): %w", c.rank, v.name, len(v.s), c.size, collectives.ErrInvalidArgument)
		}
		for p, x := range v.s {
			if x < 0 {
				return fmt.Errorf("goccl: rank %d: AllToAllv: %s[%d] = %d: %w", c.rank, v.name, p, x, collectives.ErrInvalidCount)
			}
		}
	}
	if !dt.Valid() {
		return fmt.Errorf("goccl: rank %d: AllToAllv: datatype %d: %w", c.rank, dt, collectives.ErrUnknownDataType)
	}
	es := uintptr(dt.Size())
	pair := func(p int) (s, r collectives.P2P) {
		s = collectives.P2P{Kind: collectives.SendOp, Peer: p, Buf: send + uintptr(sendDispls[p])*es, Count: sendCounts[p], Type: dt, Stream: stream}
		r = collectives.P2P{Kind: collectives.RecvOp, Peer: p, Buf: recv + uintptr(recvDispls[p])*es, Count: recvCounts[p], Type: dt, Stream: stream}
		return s, r
	}
	// Everything is checked before anything is recorded, so that a bad
	// entry launches nothing.
	for p := 0; p < c.size; p++ {
		s, r := pair(p)
		if (s.Count > 0 && send == 0) || (r.Count > 0 && recv == 0) {
			return fmt.Errorf("goccl: rank %d: AllToAllv: nil buffer with counts to or from rank %d: %w", c.rank, p, collectives.ErrNilPointer)
		}
		if err := s.Validate(c.rank, c.size); err != nil {
			return fmt.Errorf("goccl: rank %d: AllToAllv: %w", c.rank, err)
		}
		if err := r.Validate(c.rank, c.size); err != nil {
			return fmt.Errorf("goccl: rank %d: AllToAllv: %w", c.rank, err)
		}
	}
	return c.withGroup(ctx, collectives.AllToAllvGroup, func(g *collectives.Group) {
		for p := 0; p < c.size; p++ {
			s, r := pair(p)
			g.P2P = append(g.P2P, s, r)
		}
	})
}

// Gather collects every rank's count elements into root's recv, rank p's
// at block p (count*Size elements; recv is used on root only).
func (c *Comm) Gather(ctx context.Context, send, recv uintptr, count int, dt DataType, root int, stream uintptr) error {
	if err := c.checkRoot("Gather", root); err != nil {
		return err
	}
	es := uintptr(count) * uintptr(dt.Size())
	op := collectives.P2P{Kind: collectives.SendOp, Peer: root, Buf: send, Count: count, Type: dt, Stream: stream}
	if err := op.Validate(c.rank, c.size); err != nil {
		return fmt.Errorf("goccl: rank %d: Gather: %w", c.rank, err)
	}
	if c.rank == root && count > 0 && recv == 0 {
		return fmt.Errorf("goccl: rank %d: Gather: recv buffer is nil at the root: %w", c.rank, collectives.ErrNilPointer)
	}
	return c.withGroup(ctx, collectives.GatherGroup, func(g *collectives.Group) {
		g.P2P = append(g.P2P, op)
		if c.rank == root {
			for p := 0; p < c.size; p++ {
				g.P2P = append(g.P2P, collectives.P2P{Kind: collectives.RecvOp, Peer: p, Buf: recv + uintptr(p)*es, Count: count, Type: dt, Stream: stream})
			}
		}
	})
}

// Scatter sends block p (count elements) of root's send to rank p's recv
// (send is used on root only).
func (c *Comm) Scatter(ctx context.Context, send, recv uintptr, count int, dt DataType, root int, stream uintptr) error {
	if err := c.checkRoot("Scatter", root); err != nil {
		return err
	}
	es := uintptr(count) * uintptr(dt.Size())
	op := collectives.P2P{Kind: collectives.RecvOp, Peer: root, Buf: recv, Count: count, Type: dt, Stream: stream}
	if err := op.Validate(c.rank, c.size); err != nil {
		return fmt.Errorf("goccl: rank %d: Scatter: %w", c.rank, err)
	}
	if c.rank == root && count > 0 && send == 0 {
		return fmt.Errorf("goccl: rank %d: Scatter: send buffer is nil at the root: %w", c.rank, collectives.ErrNilPointer)
	}
	return c.withGroup(ctx, collectives.ScatterGroup, func(g *collectives.Group) {
		if c.rank == root {
			for p := 0; p < c.size; p++ {
				g.P2P = append(g.P2P, collectives.P2P{Kind: collectives.SendOp, Peer: p, Buf: send + uintptr(p)*es, Count: count, Type: dt, Stream: stream})
			}
		}
		g.P2P = append(g.P2P, op)
	})
}

func (c *Comm) checkRoot(name string, root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("goccl: rank %d: %s: root %d not in [0,%d): %w", c.rank, name, root, c.size, collectives.ErrInvalidRoot)
	}
	return nil
}

func (c *Comm) checkBlocks(name string, send, recv uintptr, count int, dt DataType) error {
	for _, b := range []struct {
		kind collectives.P2PKind
		buf  uintptr
	}{{collectives.SendOp, send}, {collectives.RecvOp, recv}} {
		op := collectives.P2P{Kind: b.kind, Peer: c.rank, Buf: b.buf, Count: count * c.size, Type: dt}
		if count > 0 && count*c.size/c.size != count {
			return fmt.Errorf("goccl: rank %d: %s: count %d times %d ranks overflows: %w", c.rank, name, count, c.size, collectives.ErrInvalidCount)
		}
		if err := op.Validate(c.rank, c.size); err != nil {
			return fmt.Errorf("goccl: rank %d: %s: %w", c.rank, name, err)
		}
	}
	return nil
}

// withGroup runs the group fill builds, on this communicator's reused
// group (no allocation once warm).
func (c *Comm) withGroup(ctx context.Context, kind collectives.GroupKind, fill func(*collectives.Group)) error {
	if err := c.callErr(ctx); err != nil {
		return err
	}
	c.groupMu.Lock()
	defer c.groupMu.Unlock()
	g := &c.group
	g.Reset()
	g.Kind = kind
	fill(g)
	return c.apiErr(c.runGroup(ctx, g))
}

// runGroup issues one communicator's part of a group: the collectives
// take their numbers, and the backend runs the whole part.
func (c *Comm) runGroup(ctx context.Context, g *collectives.Group) error {
	if err := c.callErr(ctx); err != nil {
		return err
	}
	// Calls every rank makes take numbers, also when the context has ended
	// (as Comm.run's do); a plain group's Sends and Recvs are numbered per
	// pair by the backend.
	k := uint64(len(g.Colls))
	if k == 0 && g.Kind != collectives.PlainGroup {
		k = 1
	}
	c.enterCall(k)
	defer c.leaveCall()
	first := c.seq - k + 1
	if k > 0 {
		g.Seq = first
	}
	for i := range g.Colls {
		g.Colls[i].Seq = first + uint64(i)
	}
	// A context that ended before the call launches nothing and leaves the
	// communicator usable.
	if err := ctx.Err(); err != nil {
		return err
	}
	id := c.rec.BeginGroup(g)
	if len(g.Colls) > 0 || g.Kind != collectives.PlainGroup {
		if err := c.closedBefore(c.seq); err != nil {
			c.rec.End(id, err) // as in runCall
			return c.runFailed(ctx, err)
		}
	}
	c.inP2P = len(g.P2P) > 0
	defer func() { c.inP2P = false }()
	if gr, ok := c.backend.(collectives.GroupRunner); ok {
		err := gr.RunGroup(ctx, g)
		c.endRecord(id, err)
		if err != nil {
			return c.runFailed(ctx, err)
		}
		return nil
	}
	if len(g.P2P) > 0 {
		err := fmt.Errorf("goccl: rank %d: %s: point-to-point: %w (%s)", c.rank, g.Kind, ErrNotSupported, c.backendName)
		c.rec.End(id, err)
		return err
	}
	for i := range g.Colls {
		if err := c.backend.Run(ctx, &g.Colls[i]); err != nil {
			c.endRecord(id, err)
			return c.runFailed(ctx, err)
		}
	}
	c.endRecord(id, nil)
	return nil
}
