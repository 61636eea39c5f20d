package host

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Run executes one collective across nodes. AllReduce, ReduceScatter and
// AllGather are hierarchical when every node has as many ranks (inside
// the node through shared memory, between nodes among the ranks of one
// local rank, the rail, over UCX); Broadcast and Reduce go through one
// rank per node. Averages, half types, and nodes of unequal size take the flat
// path: every rank's data to every rank that needs it, over UCX, reduced
// once in rank order (exact integer averages and one rounding of half
// types, as on one node).
// The paths across nodes, as LastPath names them: shared memory inside
// a node, UCX between; the hierarchical algorithms or the flat ones.
const (
	multiTransport = "shm+ucx"
	multiDirect    = "shm-direct+ucx" // a leg inside the node took the direct path
	algoHier       = collectives.Algorithm("hierarchical")
	algoFlat       = collectives.Algorithm("flat")
)

// LastPath implements collectives.PathTeller.
func (m *multi) LastPath() collectives.Path { return m.last }

func (m *multi) Run(ctx context.Context, a *collectives.Args) error {
	if err := a.Validate(m.rank, m.n); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.run(ctx, a)
}

func (m *multi) run(ctx context.Context, a *collectives.Args) error {
	if m.closed.Load() {
		return fmt.Errorf("host backend: rank %d: %w", m.rank, collectives.ErrClosed)
	}
	m.ctx = ctx
	defer func() { m.ctx = nil }()
	if err := m.check(); err != nil {
		return err
	}
	if a.Count == 0 {
		return nil
	}
	a = scaledArgs(&m.sc.mul, a, m.n) // PreMulSum: a Sum of this rank's scaled input
	m.calls++
	// Averages and half types reduce once, over every rank's input, as on
	// one node: exact integer averages, one rounding of halves.
	once := a.Coll.Reduces() && (a.Op == collectives.Avg || isHalf(a.Type) || a.Type.IsFloat8())
	hier := m.equal && !once
	if !hier && !m.flatLogged && a.Coll != collectives.Broadcast && a.Coll != collectives.Reduce {
		m.flatLogged = true
		why := "an average or a half type (reduced once, in rank order)"
		if !m.equal {
			why = "nodes of unequal size"
		}
		m.cfg.Logger.Info("goccl: host backend: flat path across nodes (logged once)", "rank", m.rank, "call", a.Coll.String(), "why", why)
	}
	esz := a.Type.Size()
	cb := a.Count * esz
	m.last = collectives.Path{Transport: multiTransport}
	switch {
	case a.Coll == collectives.AllReduce && hier,
		(a.Coll == collectives.ReduceScatter || a.Coll == collectives.AllGather) && hier && len(m.members[m.node]) > 1:
		m.last.Algo = algoHier
	case a.Coll != collectives.Broadcast && a.Coll != collectives.Reduce:
		m.last.Algo = algoFlat
	}
	switch a.Coll {
	case collectives.AllReduce:
		if !hier {
			return m.flatAllReduce(a, cb)
		}
		return m.hierAllReduce(ctx, a, cb)
	case collectives.ReduceScatter:
		if !hier || len(m.members[m.node]) == 1 {
			return m.flatReduceScatter(a, cb)
		}
		return m.hierReduceScatter(ctx, a, cb)
	case collectives.AllGather:
		if !hier || len(m.members[m.node]) == 1 {
			return m.flatAllGather(a, cb)
		}
		return m.hierAllGather(ctx, a, cb)
	case collectives.Broadcast:
		return m.broadcast(ctx, a, cb)
	case collectives.Reduce:
		if once {
			return m.flatReduce(a, cb)
		}
		return m.reduce(ctx, a, cb)
	}
	return fmt.Errorf("%w: %d", collectives.ErrUnknownCollective, a.Coll)
}

func isHalf(t collectives.DataType) bool {
	return t == collectives.Float16 || t == collectives.BFloat16
}

// localRun makes one call on the node's shared-memory backend.
func (m *multi) localRun(ctx context.Context, coll collectives.Collective, send, recv uintptr, count int, a *collectives.Args, root int) error {
	m.subs++
	m.la = collectives.Args{Coll: coll, Send: send, Recv: recv, Count: count, Type: a.Type, Op: a.Op, Root: root, Seq: m.subs}
	if err := m.local.Run(ctx, &m.la); err != nil {
		if e := m.failure.Load(); e != nil {
			return *e
		}
		return m.fail(m.globalize(err))
	}
	if m.local.last.Transport == "shm-direct" {
		m.last.Transport = multiDirect
	}
	return nil
}

// ctag is the tag of step s of the current collective, sent by src.
func (m *multi) ctag(src int, s uint64) uint64 { return tag(kindColl, src, m.calls<<4|s) }

// exchange sends src to every rank of peers but this one and receives
// each one's into its slot of into (slot k of width len(src) for
// peers[k]); srcs[k] is then peers[k]'s data (src for this rank).
func (m *multi) exchange(peers []int, me int, src, into []byte, step uint64) error {
	w := len(src)
	for k, p := range peers {
		m.srcs[k] = src
		if k == me {
			continue
		}
		m.srcs[k] = into[k*w : (k+1)*w]
		if err := m.post(true, p, m.ctag(p, step), m.srcs[k]); err != nil {
			return err
		}
		if err := m.post(false, p, m.ctag(m.rank, step), src); err != nil {
			return err
		}
	}
	return m.wait()
}

// reduceInto reduces m.srcs[:k] into dst, in order; dst must not alias
// any source but the first.
func (m *multi) reduceInto(dst []byte, k int, a *collectives.Args) {
	reducer(a.Type, a.Op)(dst, m.srcs[:k], m.n, &m.sc)
	clear(m.srcs[:k])
}

func (m *multi) hierAllReduce(ctx context.Context, a *collectives.Args, cb int) error {
	L, N := len(m.members[m.node]), len(m.members)
	if L == 1 {
		src := hostBytes(a.Send, cb)
		if a.Send == a.Recv {
			src = m.scratch(0, cb)
			copy(src, hostBytes(a.Send, cb))
		}
		return m.railAllReduce(src, hostBytes(a.Recv, cb), a, N)
	}
	if a.Count%L == 0 {
		// Reduce-scatter in the node, all-reduce each shard along its
		// rail, all-gather in the node.
		c := a.Count / L
		sb := c * a.Type.Size()
		s1, s2 := m.nodeScratch(0, sb), m.nodeScratch(1, sb)
		if err := m.localRun(ctx, collectives.ReduceScatter, a.Send, addrOf(s1), c, a, 0); err != nil {
			return err
		}
		if err := m.railAllReduce(s1, s2, a, N); err != nil {
			return err
		}
		return m.localRun(ctx, collectives.AllGather, addrOf(s2), a.Recv, c, a, 0)
	}
	// A count the node's ranks cannot share evenly: all-reduce in the
	// node, then along the rail (every rail reduces the whole buffer).
	if err := m.localRun(ctx, collectives.AllReduce, a.Send, a.Recv, a.Count, a, 0); err != nil {
		return err
	}
	s1 := m.scratch(0, cb)
	recv := hostBytes(a.Recv, cb)
	copy(s1, recv)
	return m.railAllReduce(s1, recv, a, N)
}

// railAllReduce reduces src across this rank's rail into dst (which
// aliases no source), in node order on every rank of the rail.
func (m *multi) railAllReduce(src, dst []byte, a *collectives.Args, N int) error {
	if err := m.exchange(m.rail, m.node, src, m.scratch(2, N*len(src)), 1); err != nil {
		return err
	}
	m.reduceInto(dst, N, a)
	return nil
}

func (m *multi) hierReduceScatter(ctx context.Context, a *collectives.Args, cb int) error {
	L, N := len(m.members[m.node]), len(m.members)
	send := hostBytes(a.Send, m.n*cb)
	// Order the blocks by local rank, then node: the node's reduce-scatter
	// then leaves each local rank the blocks of its rail.
	p := m.nodeScratch(0, m.n*cb)
	for l := 0; l < L; l++ {
		for k := 0; k < N; k++ {
			r := m.members[k][l]
			copy(p[(l*N+k)*cb:(l*N+k+1)*cb], send[r*cb:(r+1)*cb])
		}
	}
	q := m.nodeScratch(1, N*cb)
	if err := m.localRun(ctx, collectives.ReduceScatter, addrOf(p), addrOf(q), N*a.Count, a, 0); err != nil {
		return err
	}
	// q[k] is the node's sum of rail rank k's block: send each its own.
	into := m.scratch(2, N*cb)
	for k, r := range m.rail {
		m.srcs[k] = q[k*cb : (k+1)*cb]
		if k == m.node {
			continue
		}
		m.srcs[k] = into[k*cb : (k+1)*cb]
		if err := m.post(true, r, m.ctag(r, 1), m.srcs[k]); err != nil {
			return err
		}
		if err := m.post(false, r, m.ctag(m.rank, 1), q[k*cb:(k+1)*cb]); err != nil {
			return err
		}
	}
	if err := m.wait(); err != nil {
		return err
	}
	m.srcs[m.node] = q[m.node*cb : (m.node+1)*cb]
	m.reduceInto(hostBytes(a.Recv, cb), N, a)
	return nil
}

func (m *multi) hierAllGather(ctx context.Context, a *collectives.Args, cb int) error {
	L, N := len(m.members[m.node]), len(m.members)
	g := m.nodeScratch(1, N*cb)
	copy(g[m.node*cb:], hostBytes(a.Send, cb))
	if err := m.exchange(m.rail, m.node, g[m.node*cb:(m.node+1)*cb], g, 1); err != nil {
		return err
	}
	clear(m.srcs[:N])
	all := m.nodeScratch(0, m.n*cb)
	if err := m.localRun(ctx, collectives.AllGather, addrOf(g), addrOf(all), N*a.Count, a, 0); err != nil {
		return err
	}
	recv := hostBytes(a.Recv, m.n*cb)
	for l := 0; l < L; l++ {
		for k := 0; k < N; k++ {
			r := m.members[k][l]
			copy(recv[r*cb:(r+1)*cb], all[(l*N+k)*cb:(l*N+k+1)*cb])
		}
	}
	return nil
}

// leader is the rank of node k that takes part between nodes in a rooted
// call: root on its node, the lowest rank elsewhere.
func (m *multi) leader(k, root int) int {
	if m.nodeOf[root] == k {
		return root
	}
	return m.members[k][0]
}

func (m *multi) broadcast(ctx context.Context, a *collectives.Args, cb int) error {
	rn := m.nodeOf[a.Root]
	me := m.leader(m.node, a.Root)
	if m.rank == a.Root {
		for k := range m.members {
			if k != rn {
				if err := m.post(false, m.leader(k, a.Root), m.ctag(m.rank, 1), hostBytes(a.Send, cb)); err != nil {
					return err
				}
			}
		}
		if err := m.localRun(ctx, collectives.Broadcast, a.Send, a.Recv, a.Count, a, m.lrank); err != nil {
			return err
		}
		return m.wait()
	}
	if m.rank == me && m.node != rn {
		if err := m.post(true, a.Root, m.ctag(a.Root, 1), hostBytes(a.Recv, cb)); err != nil {
			return err
		}
		if err := m.wait(); err != nil {
			return err
		}
	}
	return m.localRun(ctx, collectives.Broadcast, a.Recv, a.Recv, a.Count, a, m.localOf[me])
}

func (m *multi) reduce(ctx context.Context, a *collectives.Args, cb int) error {
	rn := m.nodeOf[a.Root]
	me := m.leader(m.node, a.Root)
	part := m.scratch(0, cb)
	if err := m.localRun(ctx, collectives.Reduce, a.Send, addrOf(part), a.Count, a, m.localOf[me]); err != nil {
		return err
	}
	switch {
	case m.rank == a.Root:
		N := len(m.members)
		into := m.scratch(2, N*cb)
		for k := range m.members {
			m.srcs[k] = part
			if k == rn {
				continue
			}
			m.srcs[k] = into[k*cb : (k+1)*cb]
			l := m.leader(k, a.Root)
			if err := m.post(true, l, m.ctag(l, 1), m.srcs[k]); err != nil {
				return err
			}
		}
		if err := m.wait(); err != nil {
			return err
		}
		m.reduceInto(hostBytes(a.Recv, cb), N, a)
	case m.rank == me:
		if err := m.post(false, a.Root, m.ctag(m.rank, 1), part); err != nil {
			return err
		}
		return m.wait()
	}
	return nil
}

// The flat paths: every rank exchanges with every rank over UCX and
// reduces in rank order.

func (m *multi) everyone() []int { return m.all }

func (m *multi) flatAllReduce(a *collectives.Args, cb int) error {
	src := hostBytes(a.Send, cb)
	if a.Send == a.Recv {
		src = m.scratch(0, cb)
		copy(src, hostBytes(a.Send, cb))
	}
	if err := m.exchange(m.everyone(), m.rank, src, m.scratch(2, m.n*cb), 1); err != nil {
		return err
	}
	m.reduceInto(hostBytes(a.Recv, cb), m.n, a)
	return nil
}

func (m *multi) flatReduce(a *collectives.Args, cb int) error {
	if m.rank != a.Root {
		if err := m.post(false, a.Root, m.ctag(m.rank, 1), hostBytes(a.Send, cb)); err != nil {
			return err
		}
		return m.wait()
	}
	into := m.scratch(2, m.n*cb)
	for r := 0; r < m.n; r++ {
		m.srcs[r] = into[r*cb : (r+1)*cb]
		if r == m.rank {
			copy(m.srcs[r], hostBytes(a.Send, cb))
			continue
		}
		if err := m.post(true, r, m.ctag(r, 1), m.srcs[r]); err != nil {
			return err
		}
	}
	if err := m.wait(); err != nil {
		return err
	}
	m.reduceInto(hostBytes(a.Recv, cb), m.n, a)
	return nil
}

func (m *multi) flatReduceScatter(a *collectives.Args, cb int) error {
	send := hostBytes(a.Send, m.n*cb)
	into := m.scratch(2, m.n*cb)
	for r := 0; r < m.n; r++ {
		m.srcs[r] = into[r*cb : (r+1)*cb]
		if r == m.rank {
			copy(m.srcs[r], send[r*cb:(r+1)*cb])
			continue
		}
		if err := m.post(true, r, m.ctag(r, 1), m.srcs[r]); err != nil {
			return err
		}
		if err := m.post(false, r, m.ctag(m.rank, 1), send[r*cb:(r+1)*cb]); err != nil {
			return err
		}
	}
	if err := m.wait(); err != nil {
		return err
	}
	m.reduceInto(hostBytes(a.Recv, cb), m.n, a)
	return nil
}

func (m *multi) flatAllGather(a *collectives.Args, cb int) error {
	recv := hostBytes(a.Recv, m.n*cb)
	own := recv[m.rank*cb : (m.rank+1)*cb]
	copy(own, hostBytes(a.Send, cb)) // memmove: in place is a no-op
	for r := 0; r < m.n; r++ {
		if r == m.rank {
			continue
		}
		if err := m.post(true, r, m.ctag(r, 1), recv[r*cb:(r+1)*cb]); err != nil {
			return err
		}
		if err := m.post(false, r, m.ctag(m.rank, 1), own); err != nil {
			return err
		}
	}
	return m.wait()
}
