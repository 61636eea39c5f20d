package checktest

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// The fake's point-to-point calls: every Send of a group is queued (a
// copy) on its pair's queue at once, then every Recv takes the oldest
// message of its pair, waiting for it; so a group never deadlocks, and the
// k-th Send pairs with the k-th Recv.

type pairKey struct{ from, to int }

// Group runs ops (bench.PointToPoint).
func (c *Comm) Group(ctx context.Context, ops []collectives.P2P) error {
	for i := range ops {
		if err := ops[i].Validate(c.rank, c.g.n); err != nil {
			return err
		}
	}
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.queues == nil {
		g.queues = map[pairKey][][]byte{}
	}
	for _, o := range ops {
		if o.Kind == collectives.SendOp {
			k := pairKey{c.rank, o.Peer}
			g.queues[k] = append(g.queues[k], append([]byte(nil), mem(o.Buf, o.Bytes())...))
		}
	}
	g.cond.Broadcast()
	var err error
	for _, o := range ops {
		if o.Kind != collectives.RecvOp {
			continue
		}
		k := pairKey{o.Peer, c.rank}
		for len(g.queues[k]) == 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			g.cond.Wait()
		}
		m := g.queues[k][0]
		g.queues[k] = g.queues[k][1:]
		if len(m) != o.Bytes() {
			if err == nil {
				err = fmt.Errorf("%w: rank %d sent %d bytes, rank %d receives %d", ErrMismatch, o.Peer, len(m), c.rank, o.Bytes())
			}
			continue
		}
		if len(m) > 0 {
			g.received++
			if g.CorruptRecv == g.received {
				m[len(m)-1] ^= 0x55
			}
		}
		copy(mem(o.Buf, o.Bytes()), m)
	}
	return err
}

// AllToAll runs as a group: one Send and one Recv per peer.
func (c *Comm) AllToAll(ctx context.Context, send, recv uintptr, count int, dt collectives.DataType, _ uintptr) error {
	es := uintptr(count * dt.Size())
	ops := make([]collectives.P2P, 0, 2*c.g.n)
	for p := 0; p < c.g.n; p++ {
		ops = append(ops, collectives.P2P{Kind: collectives.SendOp, Peer: p, Buf: send + uintptr(p)*es, Count: count, Type: dt},
			collectives.P2P{Kind: collectives.RecvOp, Peer: p, Buf: recv + uintptr(p)*es, Count: count, Type: dt})
	}
	return c.Group(ctx, ops)
}

// AllToAllv runs as a group: one Send and one Recv per peer, at the given displacements.
func (c *Comm) AllToAllv(ctx context.Context, send uintptr, sc, sd []int, recv uintptr, rc, rd []int, dt collectives.DataType, _ uintptr) error {
	es := uintptr(dt.Size())
	ops := make([]collectives.P2P, 0, 2*c.g.n)
	for p := 0; p < c.g.n; p++ {
		ops = append(ops, collectives.P2P{Kind: collectives.SendOp, Peer: p, Buf: send + uintptr(sd[p])*es, Count: sc[p], Type: dt},
			collectives.P2P{Kind: collectives.RecvOp, Peer: p, Buf: recv + uintptr(rd[p])*es, Count: rc[p], Type: dt})
	}
	return c.Group(ctx, ops)
}

// Gather runs as a group: a Send to root, and on root a Recv from every rank.
func (c *Comm) Gather(ctx context.Context, send, recv uintptr, count int, dt collectives.DataType, root int, _ uintptr) error {
	ops := []collectives.P2P{{Kind: collectives.SendOp, Peer: root, Buf: send, Count: count, Type: dt}}
	if c.rank == root {
		for p := 0; p < c.g.n; p++ {
			ops = append(ops, collectives.P2P{Kind: collectives.RecvOp, Peer: p, Buf: recv + uintptr(p*count*dt.Size()), Count: count, Type: dt})
		}
	}
	return c.Group(ctx, ops)
}

// Scatter runs as a group: a Recv from root, and on root a Send to every rank.
func (c *Comm) Scatter(ctx context.Context, send, recv uintptr, count int, dt collectives.DataType, root int, _ uintptr) error {
	ops := []collectives.P2P{{Kind: collectives.RecvOp, Peer: root, Buf: recv, Count: count, Type: dt}}
	if c.rank == root {
		for p := 0; p < c.g.n; p++ {
			ops = append(ops, collectives.P2P{Kind: collectives.SendOp, Peer: p, Buf: send + uintptr(p*count*dt.Size()), Count: count, Type: dt})
		}
	}
	return c.Group(ctx, ops)
}
