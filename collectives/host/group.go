package host

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/collectives"
)

// RunGroup runs one rank's share of a group (collectives.GroupRunner).
// The group's point-to-point operations run first, all of them progressing
// together until every one has finished, whatever their order in the
// group: a ring exchange, all pairs at once or a Recv listed before its
// Send never deadlocks. Then the collectives run in call order, each as
// Run runs it. Running the point-to-point part to its end first is safe
// because a group's Sends and Recvs pair with their peers' in the same
// group, and its collectives do not depend on them; a point-to-point
// operation that pairs with one in a later group of its peer (after a
// collective there) deadlocks, as it does in NCCL.
//
// AllToAll, AllToAllv, Gather and Scatter arrive as such groups; every
// pair's messages move at once, through the pairs' rings.
//
// A Send and its Recv that disagree on the size make both return an error
// naming both counts; the pair stays usable and the group's other calls
// (the collectives included, so that no rank waits for this one) still run.
// The sender of an eager Send (p2p.go) returns it from the first group
// that ends after the receiver rejected the message: its own group when
// the receiver was there first or the group's collectives waited for it,
// else a later one.
// Ranks whose numbered calls (AllToAll, AllToAllv, Gather, Scatter) meet
// with different kinds or call numbers abort the communicator with an
// error wrapping collectives.ErrCallMismatch that names both calls.
func (b *backend) RunGroup(ctx context.Context, g *collectives.Group) error {
	b.last = collectives.Path{Transport: "shm"}
	for i := range g.P2P {
		if err := g.P2P[i].Validate(b.rank, b.n); err != nil {
			return fmt.Errorf("host: rank %d: %s: call %d: %w", b.rank, g.Kind, i, err)
		}
	}
	var p2pErr error
	if len(g.P2P) > 0 {
		p2pErr = b.runPairs(ctx, g)
		if p2pErr != nil && b.failure.Load() != nil {
			return p2pErr
		}
	}
	for i := range g.Colls {
		if err := b.Run(ctx, &g.Colls[i]); err != nil {
			return errors.Join(p2pErr, err)
		}
	}
	if len(g.Colls) > 0 {
		// The collectives may have waited for the receivers of its
		// eager Sends.
		b.mu.Lock()
		if !b.closed.Load() && b.p2p.inFlight > 0 {
			p2pErr = errors.Join(p2pErr, b.lateMismatch())
		}
		b.mu.Unlock()
	}
	return p2pErr
}

// runPairs moves every operation of ops to its end. It returns the first
// size mismatch (after finishing everything else) or the failure that
// stopped it.
func (b *backend) runPairs(ctx context.Context, g *collectives.Group) error {
	ops := g.P2P
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return fmt.Errorf("host backend: rank %d: %w", b.rank, collectives.ErrClosed)
	}
	if err := b.interrupted(ctx); err != nil {
		return err
	}
	p := &b.p2p
	p.kind, p.gseq = g.Kind, g.Seq
	st := p.ops[:0]
	for i := range ops {
		op := &ops[i]
		o := pending{op: op, buf: hostBytes(op.Buf, op.Bytes()), total: -1}
		if op.Kind == collectives.SendOp {
			p.sendSeq[op.Peer]++
			o.seq = p.sendSeq[op.Peer]
		} else {
			p.recvSeq[op.Peer]++
			o.seq = p.recvSeq[op.Peer]
		}
		st = append(st, o)
	}
	p.ops = st
	defer clear(p.ops) // drop the group's buffers
	left := len(st)
	var w idleWait
	for left > 0 {
		bell := atomic.LoadUint32(p.bells[b.rank])
		moved := false
		for i := range st {
			o := &st[i]
			if o.done || !p.active(o) {
				continue
			}
			if b.selfCopy(st, o) {
				moved = true
				left -= 2
				continue
			}
			if o.op.Kind == collectives.SendOp {
				moved = b.advanceSend(o) || moved
			} else {
				m, err := b.advanceRecv(o)
				if err != nil {
					return err
				}
				moved = m || moved
			}
			if o.done {
				left--
			}
		}
		if moved {
			w = idleWait{}
			b.clearWait()
			continue
		}
		if err := b.idle(ctx, &w, bell, st); err != nil {
			// A rank whose wait ended without its peers (it timed out,
			// or another's failure aborted it) leaves that wait
			// published: the ranks that time out a moment later follow
			// the chain through it as through a rank still waiting (its
			// last look goes stale in waitFresh), and see a cycle as a
			// cycle. Its next progress withdraws it.
			return err
		}
	}
	b.clearWait()
	for i := range st {
		if st[i].err != nil {
			return errors.Join(st[i].err, b.lateMismatch())
		}
	}
	return b.lateMismatch()
}

// idleWait is where a rank with nothing to do stands in its waiting.
type idleWait struct {
	polls int
	start time.Time
	nap   time.Duration
	// closedSeen: a peer of a pending operation had closed at the last
	// idle; one more pass settles whether it left its part done.
	closedSeen bool
}

// idle waits a little for a peer, as waitSlow does: busy polls (while
// every rank has a CPU), yields, goroutine naps (ranks sharing a process),
// then futex sleeps on this rank's doorbell, which every peer rings when
// it moves a channel this rank uses. Past the spinning it polls the abort
// word, the context and the timeout, which runs from the last progress.
func (b *backend) idle(ctx context.Context, w *idleWait, bell uint32, st []pending) error {
	w.polls++
	if w.polls <= b.spins {
		return nil
	}
	yields := yieldLoops
	if b.spins == 0 {
		yields = 1
	}
	if w.polls <= b.spins+yields {
		runtime.Gosched()
		return nil
	}
	if err := b.interrupted(ctx); err != nil {
		return err
	}
	if q, op := b.closedPeer(st); q >= 0 {
		if !w.closedSeen {
			// The close is told after the peer's last move: one more pass
			// takes whatever it left in the channels.
			w.closedSeen = true
			return nil
		}
		return &collectives.PeerError{Rank: q, Cause: fmt.Errorf(
			"%w with calls still outstanding: host: rank %d waits for it in a %s of %d %s (message %d of the pair, %d of %d bytes moved)",
			collectives.ErrPeerClosed, b.rank, op.op.Kind, op.op.Count, op.op.Type, op.seq, op.off, len(op.buf))}
	}
	now := time.Now()
	if w.start.IsZero() {
		w.start, w.nap = now, minNap
	}
	b.publishWait(st, w.start, now)
	left := w.start.Add(b.cfg.Timeout).Sub(now)
	if left <= 0 {
		err := b.stuck(st)
		if q := firstWaited(st, b); q >= 0 {
			err = b.chainedStuck(err, q, w.start)
		}
		return b.fail(err)
	}
	if now.Sub(w.start) < b.napFor {
		time.Sleep(min(w.nap, left))
		w.nap = min(2*w.nap, maxNap)
		return nil
	}
	p := &b.p2p
	me := b.rank
	atomic.AddUint32(p.bellWait[me], 1)
	if atomic.LoadUint32(p.bells[me]) == bell {
		futexWait(p.bells[me], bell, min(left, maxSleep))
	}
	atomic.AddUint32(p.bellWait[me], ^uint32(0))
	return nil
}

// closedPeer finds a pending operation whose peer closed its
// communicator (its segment's closed word), or -1.
func (b *backend) closedPeer(st []pending) (int, *pending) {
	for i := range st {
		o := &st[i]
		q := o.op.Peer
		if o.done || q == b.rank || !b.p2p.active(o) {
			continue
		}
		if atomic.LoadUint32(word(b.seg.Peer(q), offClosed)) != 0 {
			return q, o
		}
	}
	return -1, nil
}

// firstWaited is the peer of the first operation that could not finish
// (the one stuck names), or -1.
func firstWaited(st []pending, b *backend) int {
	for i := range st {
		if o := &st[i]; !o.done && b.p2p.active(o) {
			return o.op.Peer
		}
	}
	return -1
}

// stuck is the timeout error, naming the peer of the first operation that
// could not finish.
func (b *backend) stuck(st []pending) error {
	for i := range st {
		o := &st[i]
		if o.done || !b.p2p.active(o) {
			continue
		}
		dir := "to"
		if o.op.Kind == collectives.RecvOp {
			dir = "from"
		}
		return &collectives.PeerError{Rank: o.op.Peer, Cause: fmt.Errorf(
			"host: rank %d waited %v for rank %d: %s %s rank %d of %d %s (message %d of the pair, %d of %d bytes moved): %w",
			b.rank, b.cfg.Timeout, o.op.Peer, o.op.Kind, dir, o.op.Peer, o.op.Count, o.op.Type, o.seq, o.off, len(o.buf), collectives.ErrTimeout)}
	}
	return fmt.Errorf("host: rank %d: point-to-point operations made no progress for %v: %w", b.rank, b.cfg.Timeout, collectives.ErrTimeout)
}
