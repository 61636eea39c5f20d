package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// RunGroup runs a group across nodes: its point-to-point operations all
// at once over UCX (whose shared-memory transports serve peers on this
// node; a rank's own Sends pair with its own Recvs in order, as copies),
// then its collectives in order, as on one node.
func (m *multi) RunGroup(ctx context.Context, g *collectives.Group) error {
	for i := range g.P2P {
		if err := g.P2P[i].Validate(m.rank, m.n); err != nil {
			return fmt.Errorf("host: rank %d: %s: call %d: %w", m.rank, g.Kind, i, err)
		}
	}
	for i := range g.Colls {
		if err := g.Colls[i].Validate(m.rank, m.n); err != nil {
			return fmt.Errorf("host: rank %d: %s: collective %d: %w", m.rank, g.Kind, i, err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = collectives.Path{Transport: multiTransport}
	var p2pErr error
	if len(g.P2P) > 0 {
		p2pErr = m.runPairs(ctx, g.P2P)
		if p2pErr != nil && m.failure.Load() != nil {
			return p2pErr
		}
	}
	for i := range g.Colls {
		if err := m.run(ctx, &g.Colls[i]); err != nil {
			return errors.Join(p2pErr, err)
		}
	}
	return p2pErr
}

func (m *multi) runPairs(ctx context.Context, ops []collectives.P2P) error {
	if m.closed.Load() {
		return fmt.Errorf("host backend: rank %d: %w", m.rank, collectives.ErrClosed)
	}
	m.ctx = ctx
	defer func() { m.ctx = nil }()
	if err := m.check(); err != nil {
		return err
	}
	var mismatch error
	// Own sends pair with own receives in order.
	si, ri := 0, 0
	for {
		for si < len(ops) && !(ops[si].Kind == collectives.SendOp && ops[si].Peer == m.rank && ops[si].Count > 0) {
			si++
		}
		for ri < len(ops) && !(ops[ri].Kind == collectives.RecvOp && ops[ri].Peer == m.rank && ops[ri].Count > 0) {
			ri++
		}
		if si == len(ops) || ri == len(ops) {
			break
		}
		s, r := &ops[si], &ops[ri]
		if s.Bytes() != r.Bytes() || s.Type != r.Type {
			mismatch = fmt.Errorf("%w: host: rank %d sends itself %d %s but receives %d %s",
				collectives.ErrInvalidCount, m.rank, s.Count, s.Type, r.Count, r.Type)
		} else {
			copy(hostBytes(r.Buf, r.Bytes()), hostBytes(s.Buf, s.Bytes()))
		}
		si++
		ri++
	}
	for i := range ops {
		o := &ops[i]
		if o.Count == 0 || o.Peer == m.rank {
			continue
		}
		buf := hostBytes(o.Buf, o.Bytes())
		var err error
		if o.Kind == collectives.SendOp {
			err = m.post(false, o.Peer, tag(kindP2P, m.rank, m.sent[o.Peer]), buf)
			m.sent[o.Peer]++
		} else {
			err = m.post(true, o.Peer, tag(kindP2P, o.Peer, m.rcvd[o.Peer]), buf)
			m.rcvd[o.Peer]++
		}
		if err != nil {
			return err
		}
	}
	if err := m.waitPairs(); err != nil {
		return errors.Join(mismatch, err)
	}
	return mismatch
}
