package gpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internode/nccl"
)

// The composed collectives. With every node holding L ranks (K nodes,
// rank (k, l) the l-th rank of node k) and B a rank's block of bytes:
//   - AllReduce: the node's ReduceScatter into this rank's shard of recv,
//     the rail's AllReduce of the shard, the node's AllGather of the
//     shards; the count's last count%L elements by the node's AllReduce
//     then the rail's.
//   - ReduceScatter: send's blocks copied into the scratch by local rank
//     (the K blocks of the ranks of local rank l together), the node's
//     ReduceScatter of it in place, the rail's ReduceScatter of this
//     rank's part into recv.
//   - AllGather: the node's AllGather into its node's part of the scratch
//     (of recv itself where the ranks are numbered node by node), the
//     rail's AllGather in place, the blocks copied to their ranks' slots.
//   - Broadcast: the root's rail broadcasts, then every node from its rank
//     on that rail. Reduce: every node reduces to its rank on the root's
//     rail, then that rail reduces to the root.
// A floating-point Avg averages on each leg (over ranks of equal weight);
// a PreMulSum scales on the first leg inside the node and sums after (on
// the flat communicator NCCL scales, with an operator made per call);
// an integer Avg, which truncates once after the whole sum, runs on NCCL's
// flat communicator, as does every collective where the nodes' sizes
// differ.

// Run enqueues one validated collective on a.Stream.
func (m *multi) Run(ctx context.Context, a *collectives.Args) error {
	if e := m.failure.Load(); e != nil {
		return *e
	}
	if a.Count == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return collectives.ErrClosed
	}
	var err error
	switch {
	case !m.equal:
		err = m.runFlat(a)
	case a.Op == collectives.Avg && !a.Type.IsFloat():
		// An integer average truncates once, after the whole sum: an
		// average of the nodes' averages would truncate twice.
		err = m.runFlat(a)
	default:
		switch a.Coll {
		case collectives.AllReduce:
			err = m.allReduce(ctx, a)
		case collectives.ReduceScatter:
			err = m.reduceScatter(ctx, a)
		case collectives.AllGather:
			err = m.allGather(ctx, a)
		case collectives.Broadcast:
			err = m.broadcast(ctx, a)
		case collectives.Reduce:
			err = m.reduce(ctx, a)
		default:
			return fmt.Errorf("gpu backend: %s: %w", a.Coll, collectives.ErrInvalidArgument)
		}
	}
	if err != nil {
		// Peers elsewhere may already wait in this call: stop everything.
		return m.fail(err)
	}
	return nil
}

// sub runs one call on the node's backend.
func (m *multi) sub(ctx context.Context, coll collectives.Collective, send, recv uintptr, count int, a *collectives.Args, root int) error {
	if count == 0 {
		return nil
	}
	m.subSeq++
	m.la = collectives.Args{Coll: coll, Send: send, Recv: recv, Count: count, Type: a.Type, Op: a.Op, Scalar: a.Scalar, Root: root, Stream: a.Stream, Seq: m.subSeq}
	if err := m.local.Run(ctx, &m.la); err != nil {
		return fmt.Errorf("gpu backend: %s: inside node %d: %w", a.Coll, m.node, err)
	}
	return nil
}

// nt gives a call's type and operator between nodes. A PreMulSum's inputs
// are scaled once, on the leg inside the node that reads them; the rails
// then sum.
func nt(a *collectives.Args) (nccl.DataType, nccl.Op) {
	if a.Op == collectives.PreMulSum {
		return nccl.DataType(a.Type), nccl.Op(collectives.Sum)
	}
	return nccl.DataType(a.Type), nccl.Op(a.Op)
}

func railErr(coll collectives.Collective, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("gpu backend: %s: between nodes: %w", coll, err)
}

func (m *multi) allReduce(ctx context.Context, a *collectives.Args) error {
	size := uintptr(a.Type.Size())
	q := a.Count / m.L
	dt, op := nt(a)
	if q > 0 {
		shard := a.Recv + uintptr(m.lrank*q)*size
		if err := m.sub(ctx, collectives.ReduceScatter, a.Send, shard, q, a, 0); err != nil {
			return err
		}
		if err := railErr(a.Coll, m.rail.AllReduce(shard, shard, q, dt, op, a.Stream)); err != nil {
			return err
		}
		if err := m.sub(ctx, collectives.AllGather, shard, a.Recv, q, a, 0); err != nil {
			return err
		}
	}
	if rem := a.Count - q*m.L; rem > 0 {
		off := uintptr(q*m.L) * size
		if err := m.sub(ctx, collectives.AllReduce, a.Send+off, a.Recv+off, rem, a, 0); err != nil {
			return err
		}
		return railErr(a.Coll, m.rail.AllReduce(a.Recv+off, a.Recv+off, rem, dt, op, a.Stream))
	}
	return nil
}

// scratchFor returns a scratch buffer of n bytes ordered after its last
// use on another stream.
func (m *multi) scratchFor(n uint64, stream uintptr) (uintptr, error) {
	if n > m.scrN {
		p, err := m.mem.alloc(n)
		if err != nil {
			return 0, fmt.Errorf("gpu backend: scratch of %d bytes: %w", n, err)
		}
		if m.scratch != 0 {
			m.scrOld = append(m.scrOld, m.scratch)
		}
		m.scratch, m.scrN = p, n
	}
	if m.scrUsed && m.scrLast != stream {
		if err := m.mem.order(m.scrLast, stream); err != nil {
			return 0, fmt.Errorf("gpu backend: order the scratch's streams: %w", err)
		}
	}
	m.scrLast, m.scrUsed = stream, true
	return m.scratch, nil
}

func (m *multi) reduceScatter(ctx context.Context, a *collectives.Args) error {
	B := uintptr(a.Count * a.Type.Size())
	scr, err := m.scratchFor(uint64(B)*uint64(m.n), a.Stream)
	if err != nil {
		return err
	}
	// scratch[(l*K + k)*B] = send block of rank (k, l).
	for l := range m.L {
		for k := range m.K {
			src := a.Send + uintptr(m.members[k][l])*B
			if err := m.mem.copy(scr+uintptr(l*m.K+k)*B, src, uint64(B), a.Stream); err != nil {
				return fmt.Errorf("gpu backend: %s: copy into the scratch: %w", a.Coll, err)
			}
		}
	}
	part := scr + uintptr(m.lrank*m.K)*B
	if err := m.sub(ctx, collectives.ReduceScatter, scr, part, m.K*a.Count, a, 0); err != nil {
		return err
	}
	dt, op := nt(a)
	return railErr(a.Coll, m.rail.ReduceScatter(part, a.Recv, a.Count, dt, op, a.Stream))
}

// blocked reports whether the ranks are numbered node by node (rank
// (k, l) is k*L + l), so that the AllGather's blocks land in place.
func (m *multi) blocked() bool {
	for k, g := range m.members {
		for l, r := range g {
			if r != k*m.L+l {
				return false
			}
		}
	}
	return true
}

func (m *multi) allGather(ctx context.Context, a *collectives.Args) error {
	B := uintptr(a.Count * a.Type.Size())
	dt, _ := nt(a)
	base := a.Recv
	if !m.blocked() {
		var err error
		if base, err = m.scratchFor(uint64(B)*uint64(m.n), a.Stream); err != nil {
			return err
		}
	}
	mine := base + uintptr(m.node*m.L)*B // this node's L blocks
	if err := m.sub(ctx, collectives.AllGather, a.Send, mine, a.Count, a, 0); err != nil {
		return err
	}
	if err := railErr(a.Coll, m.rail.AllGather(mine, base, m.L*a.Count, dt, a.Stream)); err != nil {
		return err
	}
	if base == a.Recv {
		return nil
	}
	for k, g := range m.members {
		for l, r := range g {
			if err := m.mem.copy(a.Recv+uintptr(r)*B, base+uintptr(k*m.L+l)*B, uint64(B), a.Stream); err != nil {
				return fmt.Errorf("gpu backend: %s: copy from the scratch: %w", a.Coll, err)
			}
		}
	}
	return nil
}

func (m *multi) broadcast(ctx context.Context, a *collectives.Args) error {
	rk, rl := m.nodeOf[a.Root], m.localOf[a.Root]
	dt, _ := nt(a)
	if m.lrank == rl {
		if err := railErr(a.Coll, m.rail.Broadcast(a.Send, a.Recv, a.Count, dt, rk, a.Stream)); err != nil {
			return err
		}
	}
	return m.sub(ctx, collectives.Broadcast, a.Recv, a.Recv, a.Count, a, rl)
}

func (m *multi) reduce(ctx context.Context, a *collectives.Args) error {
	rk, rl := m.nodeOf[a.Root], m.localOf[a.Root]
	dt, op := nt(a)
	dst := uintptr(0)
	if m.lrank == rl {
		if m.rank == a.Root {
			dst = a.Recv
		} else {
			var err error
			if dst, err = m.scratchFor(uint64(a.Count*a.Type.Size()), a.Stream); err != nil {
				return err
			}
		}
	}
	if err := m.sub(ctx, collectives.Reduce, a.Send, dst, a.Count, a, rl); err != nil {
		return err
	}
	if m.lrank != rl {
		return nil
	}
	return railErr(a.Coll, m.rail.Reduce(dst, dst, a.Count, dt, op, rk, a.Stream))
}

// runFlat runs a collective on the flat communicator (nodes of unequal
// size, logged once; or an integer Avg).
func (m *multi) runFlat(a *collectives.Args) error {
	if !m.flatLog && !m.equal {
		m.flatLog = true
		m.log.Info("goccl: gpu backend: collectives run flat over NCCL: the nodes hold unequal numbers of ranks",
			"rank", m.rank, "layout", m.describe())
	}
	dt, op := nt(a)
	if a.Op == collectives.PreMulSum && a.Coll.Reduces() {
		// NCCL reads the inputs itself here: it scales them, with an
		// operator of its own made for this call (NCCL lets one be
		// destroyed once the calls using it are enqueued).
		sop, err := m.flat.CreatePreMulSum(a.Scalar.Bits, a.Scalar.Ptr, dt)
		if err != nil {
			return railErr(a.Coll, err)
		}
		op = sop
		defer func() {
			if err := m.flat.DestroyOp(sop); err != nil {
				m.log.Warn("goccl: gpu backend: ncclRedOpDestroy", "rank", m.rank, "err", err)
			}
		}()
	}
	var err error
	switch a.Coll {
	case collectives.AllReduce:
		err = m.flat.AllReduce(a.Send, a.Recv, a.Count, dt, op, a.Stream)
	case collectives.ReduceScatter:
		err = m.flat.ReduceScatter(a.Send, a.Recv, a.Count, dt, op, a.Stream)
	case collectives.AllGather:
		err = m.flat.AllGather(a.Send, a.Recv, a.Count, dt, a.Stream)
	case collectives.Broadcast:
		err = m.flat.Broadcast(a.Send, a.Recv, a.Count, dt, a.Root, a.Stream)
	case collectives.Reduce:
		err = m.flat.Reduce(a.Send, a.Recv, a.Count, dt, op, a.Root, a.Stream)
	default:
		err = errors.New("unknown collective")
	}
	return railErr(a.Coll, err)
}
