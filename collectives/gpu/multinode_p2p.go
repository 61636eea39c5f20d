package gpu

import (
	"context"
	"fmt"
	"runtime"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internode/nccl"
)

var _ collectives.GroupRunner = (*multi)(nil)

// RunGroup enqueues a group: its collectives in order, then its
// point-to-point operations, those with ranks of this node (this rank
// included) as one group of the node's backend and those with ranks
// elsewhere as one NCCL group on the flat communicator. The two share no
// peer, so neither waits for the other; each keeps the order of its ops
// to one peer, which is all NCCL's matching rule asks.
func (m *multi) RunGroup(ctx context.Context, g *collectives.Group) error {
	for i := range g.Colls {
		if err := m.Run(ctx, &g.Colls[i]); err != nil {
			return err
		}
	}
	if len(g.P2P) == 0 {
		return nil
	}
	if e := m.failure.Load(); e != nil {
		return *e
	}
	for i := range g.P2P {
		if p := g.P2P[i].Peer; p < 0 || p >= m.n {
			return fmt.Errorf("gpu backend: %s: peer %d not in [0,%d): %w", g.P2P[i].Kind, p, m.n, collectives.ErrInvalidPeer)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return collectives.ErrClosed
	}
	lg := &m.lg
	lg.Reset()
	// The node's backend takes fast paths by kind, and only an
	// application's own group may take the copy engines (p2pce.go).
	lg.Kind = g.Kind
	remote := false
	for _, o := range g.P2P {
		if m.nodeOf[o.Peer] == m.node {
			o.Peer = m.localOf[o.Peer]
			lg.P2P = append(lg.P2P, o)
		} else {
			remote = remote || o.Count > 0
		}
	}
	// What this rank can check alone fails the group before anything of
	// it is enqueued, as on one node.
	if err := checkP2P(lg.P2P, m.lrank, m.L0()); err != nil {
		return err
	}
	if len(lg.P2P) > 0 {
		gr, ok := m.local.(collectives.GroupRunner)
		if !ok {
			return fmt.Errorf("gpu backend: the node backend runs no point-to-point operations: %w", collectives.ErrInvalidArgument)
		}
		if err := gr.RunGroup(ctx, lg); err != nil {
			// The peers elsewhere may wait for this group: stop every rank.
			return m.fail(fmt.Errorf("gpu backend: point-to-point inside node %d: %w", m.node, err))
		}
	}
	if !remote {
		return nil
	}
	if err := m.remoteP2P(g.P2P); err != nil {
		return m.fail(err)
	}
	return nil
}

// remoteP2P issues the group's operations with ranks on other nodes as
// one NCCL group.
func (m *multi) remoteP2P(ops []collectives.P2P) error {
	// NCCL keeps its group state per thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := m.eng.GroupStart(); err != nil {
		return fmt.Errorf("gpu backend: point-to-point between nodes: %w", err)
	}
	var first error
	for i := range ops {
		o := &ops[i]
		if m.nodeOf[o.Peer] == m.node || o.Count == 0 {
			continue
		}
		var err error
		if o.Kind == collectives.SendOp {
			err = m.flat.Send(o.Buf, o.Count, nccl.DataType(o.Type), o.Peer, o.Stream)
		} else {
			err = m.flat.Recv(o.Buf, o.Count, nccl.DataType(o.Type), o.Peer, o.Stream)
		}
		if err != nil {
			first = fmt.Errorf("gpu backend: %s with rank %d: %w", o.Kind, o.Peer, err)
			break
		}
	}
	// The group is ended in any case: NCCL's group depth is per thread.
	if err := m.eng.GroupEnd(m.cuctx); err != nil && first == nil {
		first = fmt.Errorf("gpu backend: point-to-point between nodes: %w", err)
	}
	return first
}

// L0 is the size of this rank's node.
func (m *multi) L0() int { return len(m.members[m.node]) }
