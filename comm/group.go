package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/goccl/goccl/collectives"
)

// Group collects calls on one or several communicators and issues them
// together, as ncclGroupStart/ncclGroupEnd do: Sends and Recvs of a group
// never deadlock whatever their order, and the collectives a group holds on
// one communicator may be fused into fewer launches. Each method checks its
// arguments at once (the error names the argument) and records the call;
// Run issues them all, or none when any call was bad. A Group is reusable
// after Run and holds its storage, so that a loop issuing the same group
// allocates nothing. A Group is used by one goroutine at a time.
type Group struct {
	parts []groupPart
	err   error
}

type groupPart struct {
	c *Comm
	g collectives.Group
}

// NewGroup returns an empty group.
func NewGroup() *Group { return &Group{} }

// Len is the number of calls recorded.
func (g *Group) Len() int {
	n := 0
	for i := range g.parts {
		n += len(g.parts[i].g.Colls) + len(g.parts[i].g.P2P)
	}
	return n
}

// Reset drops every recorded call and error, keeping storage.
func (g *Group) Reset() {
	for i := range g.parts {
		g.parts[i].c = nil
		g.parts[i].g.Reset()
	}
	g.parts = g.parts[:0]
	g.err = nil
}

func (g *Group) part(c *Comm) *collectives.Group {
	for i := range g.parts {
		if g.parts[i].c == c {
			return &g.parts[i].g
		}
	}
	if len(g.parts) < cap(g.parts) {
		g.parts = g.parts[:len(g.parts)+1]
	} else {
		g.parts = append(g.parts, groupPart{})
	}
	p := &g.parts[len(g.parts)-1]
	p.c = c
	p.g.Reset()
	return &p.g
}

// record keeps the first error, which Run returns.
func (g *Group) record(err error) error {
	if err != nil && g.err == nil {
		g.err = err
	}
	return err
}

// Send records a Send of count elements of buf to peer.
func (g *Group) Send(c *Comm, buf uintptr, count int, dt DataType, peer int, stream uintptr) error {
	return g.p2p(c, collectives.P2P{Kind: collectives.SendOp, Peer: peer, Buf: buf, Count: count, Type: dt, Stream: stream})
}

// Recv records a Recv of count elements into buf from peer.
func (g *Group) Recv(c *Comm, buf uintptr, count int, dt DataType, peer int, stream uintptr) error {
	return g.p2p(c, collectives.P2P{Kind: collectives.RecvOp, Peer: peer, Buf: buf, Count: count, Type: dt, Stream: stream})
}

func (g *Group) p2p(c *Comm, op collectives.P2P) error {
	if c == nil {
		return g.record(fmt.Errorf("goccl: %s: %w: nil communicator", op.Kind, collectives.ErrInvalidArgument))
	}
	if err := op.Validate(c.rank, c.size); err != nil {
		return g.record(fmt.Errorf("goccl: rank %d: %w", c.rank, err))
	}
	p := g.part(c)
	p.P2P = append(p.P2P, op)
	return nil
}

// AllReduce records an AllReduce (see Comm.AllReduce).
func (g *Group) AllReduce(c *Comm, send, recv uintptr, count int, dt DataType, op Op, stream uintptr) error {
	return g.coll(c, collectives.Args{Coll: collectives.AllReduce, Send: send, Recv: recv, Count: count, Type: dt, Op: op, Stream: stream})
}

// Broadcast records a Broadcast (see Comm.Broadcast).
func (g *Group) Broadcast(c *Comm, send, recv uintptr, count int, dt DataType, root int, stream uintptr) error {
	return g.coll(c, collectives.Args{Coll: collectives.Broadcast, Send: send, Recv: recv, Count: count, Type: dt, Root: root, Stream: stream})
}

// Reduce records a Reduce (see Comm.Reduce).
func (g *Group) Reduce(c *Comm, send, recv uintptr, count int, dt DataType, op Op, root int, stream uintptr) error {
	return g.coll(c, collectives.Args{Coll: collectives.Reduce, Send: send, Recv: recv, Count: count, Type: dt, Op: op, Root: root, Stream: stream})
}

// AllGather records an AllGather (see Comm.AllGather).
func (g *Group) AllGather(c *Comm, send, recv uintptr, sendcount int, dt DataType, stream uintptr) error {
	return g.coll(c, collectives.Args{Coll: collectives.AllGather, Send: send, Recv: recv, Count: sendcount, Type: dt, Stream: stream})
}

// ReduceScatter records a ReduceScatter (see Comm.ReduceScatter).
func (g *Group) ReduceScatter(c *Comm, send, recv uintptr, recvcount int, dt DataType, op Op, stream uintptr) error {
	return g.coll(c, collectives.Args{Coll: collectives.ReduceScatter, Send: send, Recv: recv, Count: recvcount, Type: dt, Op: op, Stream: stream})
}

func (g *Group) coll(c *Comm, a collectives.Args) error {
	if c == nil {
		return g.record(fmt.Errorf("goccl: %s: %w: nil communicator", a.Coll, collectives.ErrInvalidArgument))
	}
	if err := c.resolveOp(&a); err != nil {
		return g.record(fmt.Errorf("goccl: rank %d: %w", c.rank, err))
	}
	if err := a.Validate(c.rank, c.size); err != nil {
		return g.record(fmt.Errorf("goccl: rank %d: %w", c.rank, err))
	}
	p := g.part(c)
	p.Colls = append(p.Colls, a)
	return nil
}

// Run issues every recorded call and resets the group. On the GPU backend
// it returns once everything is enqueued on the calls' streams; on the
// host backend once everything is done. When a call was recorded with an
// error, Run returns that error and issues nothing. A group spanning
// several communicators (one goroutine driving several ranks, as
// InitAll's users do) issues each communicator's part concurrently, so
// that ranks of one process can pair with each other.
func (g *Group) Run(ctx context.Context) error {
	defer g.Reset()
	if g.err != nil {
		return g.err
	}
	// A context that has ended launches nothing: each part returns
	// ctx.Err() once its calls have taken their numbers.
	switch len(g.parts) {
	case 0:
		return nil
	case 1:
		c := g.parts[0].c
		return c.apiErr(c.runGroup(ctx, &g.parts[0].g))
	}
	errs := make([]error, len(g.parts))
	var wg sync.WaitGroup
	for i := range g.parts {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := g.parts[i].c
			errs[i] = c.apiErr(c.runGroup(ctx, &g.parts[i].g))
		}(i)
	}
	wg.Wait()
	return errors.Join(errs...)
}
