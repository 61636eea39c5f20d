package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internode/ucx"
	"github.com/goccl/goccl/topology"
	"github.com/goccl/goccl/transport"
)

// multi is one rank's host backend in a job whose ranks span nodes: a
// shared-memory backend among the ranks of its node (local) and a UCX
// worker with an endpoint to every rank (w).
type multi struct {
	rank, n     int
	cfg         Config
	nodeOf      []int   // every rank's node
	localOf     []int   // every rank's index on its node
	members     [][]int // each node's ranks, ascending
	node, lrank int
	rail        []int // with equal nodes: the rank of this local rank on each node
	equal       bool  // every node has as many ranks
	all         []int // every rank, in order

	local *backend
	last  collectives.Path // LastPath
	w     *ucx.Worker
	boot  transport.Bootstrap

	calls      uint64   // collectives run: their messages' tags
	subs       uint64   // calls made on local: their Seq
	bootOps    uint64   // node bootstrap operations: their tags
	sent       []uint64 // point-to-point messages to each rank
	rcvd       []uint64 // and from each rank
	la         collectives.Args
	ops        []ucx.Op
	scr        [4][]byte
	srcs       [][]byte
	sc         scratch
	ctx        context.Context // of the Run in progress, for check
	pol        ucx.WaitPolicy
	peerOff    []atomic.Bool // peers that closed their communicator
	flatLogged bool          // the flat path's reason was logged

	// Allocations (multinode_alloc.go); under mu.
	allocs   []*multiReg
	allocOps uint64                   // Alloc's agreements: their tags
	shReg    collectives.Registration // the shared scratch, nil when none
	shFor    uint64                   // the allocation size it is made for
	shScr    [2][]byte                // its big and small parts

	mu      sync.Mutex // one Run at a time; Close waits for it
	closed  atomic.Bool
	failure atomic.Pointer[error]
}

// Message tags: kind | sender rank | counter.
const (
	kindColl = 1
	kindP2P  = 2
	kindBoot = 3
)

func tag(kind, src int, counter uint64) uint64 {
	return uint64(kind)<<60 | uint64(src&0xffff)<<44 | counter&(1<<44-1)
}

// spansNodes reports whether nodes (a key per rank) names several nodes.
func spansNodes(nodes []string) bool {
	for _, k := range nodes {
		if k != nodes[0] {
			return true
		}
	}
	return false
}

// newMulti builds the backend of a job across nodes: UCX first (every
// rank reports whether it could load libucp), then the node's shared
// memory through a bootstrap among the node's ranks that runs over UCX.
func newMulti(ctx context.Context, b transport.Bootstrap, cfg Config) (collectives.Backend, error) {
	rank, n := b.Rank(), b.Size()
	if len(cfg.Nodes) != n {
		return nil, fmt.Errorf("%w: %d node keys for %d ranks", collectives.ErrInvalidArgument, len(cfg.Nodes), n)
	}
	rcfg, err := agreeConfig(ctx, b, cfg)
	if err != nil {
		return nil, err
	}
	m := &multi{rank: rank, n: n, cfg: rcfg, boot: b, sent: make([]uint64, n), rcvd: make([]uint64, n),
		peerOff: make([]atomic.Bool, n), srcs: make([][]byte, n)}
	m.layout(cfg.Nodes)
	m.pol = ucx.WaitPolicy{Check: m.check, Timeout: rcfg.Timeout, Closed: m.peerClosed, Grace: time.Second}
	layout := m.describe()
	if m.w, err = ucx.New(ctx, b, ucx.Load()); err != nil {
		return nil, fmt.Errorf("the ranks span %d nodes (%s); between nodes the host backend runs over UCX: %w",
			len(m.members), layout, err)
	}
	lcfg := cfg
	lcfg.Nodes = nil
	m.ctx = ctx
	be, err := New(ctx, &nodeBoot{m: m}, lcfg)
	m.ctx = nil
	if err != nil {
		m.w.Close()
		return nil, fmt.Errorf("host: node %d's shared memory: %w", m.node, err)
	}
	m.local = be.(*backend)
	how := "hierarchical AllReduce, ReduceScatter and AllGather (nodes of equal size)"
	if !m.equal {
		how = "flat AllReduce, ReduceScatter and AllGather over UCX (nodes of unequal size)"
	}
	rcfg.Logger.Info("goccl: host backend across nodes", "rank", rank, "nranks", n, "nodes", len(m.members),
		"layout", layout, "inside a node", "shm", "between nodes", "UCX "+ucx.Version(), "algorithms", how)
	return m, nil
}

// layout numbers the nodes in order of their lowest rank.
func (m *multi) layout(nodes []string) {
	m.members, m.nodeOf, m.localOf = topology.Layout(nodes)
	m.node, m.lrank = m.nodeOf[m.rank], m.localOf[m.rank]
	m.all = make([]int, m.n)
	for r := range m.all {
		m.all[r] = r
	}
	m.equal = true
	for _, g := range m.members {
		m.equal = m.equal && len(g) == len(m.members[0])
	}
	if m.equal {
		for _, g := range m.members {
			m.rail = append(m.rail, g[m.lrank])
		}
	}
}

func (m *multi) describe() string {
	var parts []string
	for k, g := range m.members {
		parts = append(parts, fmt.Sprintf("node %d: ranks %v", k, g))
	}
	return strings.Join(parts, "; ")
}

// check is the wait policy's poll: this rank's or its node's failure, or
// the context's end.
func (m *multi) check() error {
	if e := m.failure.Load(); e != nil {
		return *e
	}
	ctx := m.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if m.local == nil {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("host: rank %d: %w: %w", m.rank, collectives.ErrAborted, err)
		}
		return nil
	}
	if err := m.local.interrupted(ctx); err != nil {
		return m.fail(m.globalize(err))
	}
	return nil
}

func (m *multi) peerClosed(r int) bool { return m.peerOff[r].Load() }

// globalize names the rank of a node-local error by its rank in the job:
// the node backend numbers its own ranks from 0 and, in the aborts that
// fail passes it, ranks elsewhere from the node's size on.
func (m *multi) globalize(err error) error {
	var pe *collectives.PeerError
	if !errors.As(err, &pe) || pe.Rank < 0 {
		return err
	}
	L := len(m.members[m.node])
	switch {
	case pe.Rank < L:
		return &collectives.PeerError{Rank: m.members[m.node][pe.Rank],
			Cause: fmt.Errorf("on node %d (its rank %d there): %w", m.node, pe.Rank, pe.Cause)}
	case pe.Rank < L+m.n:
		return &collectives.PeerError{Rank: pe.Rank - L, Cause: pe.Cause}
	}
	return err
}

// fromUCX turns a UCX error into goccl's: the rank it names failed, or
// timed out, or closed.
func (m *multi) fromUCX(err error) error {
	var ue *ucx.PeerError
	if !errors.As(err, &ue) {
		return err
	}
	sentinel := collectives.ErrAborted
	switch {
	case errors.Is(err, ucx.ErrTimeout):
		sentinel = collectives.ErrTimeout
	case errors.Is(err, ucx.ErrPeerClosed):
		sentinel = collectives.ErrPeerClosed
	case errors.Is(err, ucx.ErrSizeMismatch):
		sentinel = collectives.ErrInvalidArgument
	}
	return &collectives.PeerError{Rank: ue.Rank, Cause: fmt.Errorf("%w: host: rank %d, over UCX: %w", sentinel, m.rank, err)}
}

// fail records err (the first wins) and aborts the node's shared-memory
// backend, so that this node's ranks stop waiting too.
func (m *multi) fail(err error) error {
	if m.failure.CompareAndSwap(nil, &err) {
		m.cfg.Logger.Info("goccl: host backend aborting", "rank", m.rank, "err", err)
		if m.local != nil {
			// The node's ranks learn the error through shared memory,
			// which names ranks by their index on the node.
			// Ranks elsewhere are numbered after the node's own (see
			// globalize).
			var pe *collectives.PeerError
			switch {
			case !errors.As(err, &pe) || pe.Rank < 0 || pe.Rank >= m.n:
				m.local.Abort(err)
			case m.nodeOf[pe.Rank] == m.node:
				m.local.Abort(&collectives.PeerError{Rank: m.localOf[pe.Rank], Cause: pe.Cause})
			default:
				m.local.Abort(&collectives.PeerError{Rank: len(m.members[m.node]) + pe.Rank, Cause: pe.Cause})
			}
		}
	}
	return *m.failure.Load()
}

// wait completes every posted op. Any failure aborts: ranks whose
// collectives disagree on sizes are in different calls.
func (m *multi) wait() error {
	err := m.w.Wait(m.ops, m.pol)
	m.ops = m.ops[:0]
	if err != nil {
		if e := m.failure.Load(); e != nil {
			return *e
		}
		return m.fail(m.fromUCX(err))
	}
	return nil
}

// waitPairs is wait for point-to-point operations: a Send and its Recv
// that disagree on the size fail the receiver's call (the sender's
// completes), naming both sizes, and leave the communicator usable
// (every other operation has completed).
func (m *multi) waitPairs() error {
	err := m.w.Wait(m.ops, m.pol)
	m.ops = m.ops[:0]
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ucx.ErrSizeMismatch):
		return fmt.Errorf("host: rank %d: %w: %w", m.rank, collectives.ErrInvalidCount, err)
	}
	if e := m.failure.Load(); e != nil {
		return *e
	}
	return m.fail(m.fromUCX(err))
}

// post queues a send (or receive) of buf to (from) peer.
func (m *multi) post(recv bool, peer int, t uint64, buf []byte) error {
	var op ucx.Op
	var err error
	if recv {
		op, err = m.w.Recv(peer, t, addrOf(buf), len(buf))
	} else {
		op, err = m.w.Send(peer, t, addrOf(buf), len(buf))
	}
	if err != nil {
		m.w.Cancel(m.ops)
		m.ops = m.ops[:0]
		return m.fail(m.fromUCX(err))
	}
	m.ops = append(m.ops, op)
	return nil
}

func addrOf(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

// scratch i of at least n bytes; grown, never shrunk.
func (m *multi) scratch(i, n int) []byte {
	if cap(m.scr[i]) < n {
		m.scr[i] = make([]byte, n)
	}
	return m.scr[i][:n]
}

// Abort makes every current and future wait of this rank, and of its
// node's ranks, return an error wrapping cause (and ErrAborted).
func (m *multi) Abort(cause error) {
	if cause == nil {
		cause = errors.New("aborted by the caller")
	}
	if !errors.Is(cause, collectives.ErrAborted) {
		cause = fmt.Errorf("host: rank %d: %w: %w", m.rank, collectives.ErrAborted, cause)
	}
	m.fail(cause)
}

// PeerClosed implements collectives.PeerCloser: a peer on this node is
// told through shared memory; waits on one elsewhere end after a grace.
func (m *multi) PeerClosed(r int) {
	if r < 0 || r >= m.n || r == m.rank {
		return
	}
	m.peerOff[r].Store(true)
	if m.nodeOf[r] == m.node {
		m.local.PeerClosed(m.localOf[r])
	}
}

// Close releases the node's shared memory and the UCX worker; a Run in
// progress is aborted first and waited for.
func (m *multi) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	if !m.mu.TryLock() {
		m.Abort(fmt.Errorf("rank %d closed its communicator during a collective: %w", m.rank, collectives.ErrClosed))
		m.mu.Lock()
	}
	defer m.mu.Unlock()
	err := m.local.Close() // and every allocation with it
	m.allocs, m.shReg, m.shFor, m.shScr = nil, nil, 0, [2][]byte{}
	m.w.Close()
	return err
}

// nodeBoot is the bootstrap of the node's ranks that the shared-memory
// backend is built over: gathers run over UCX among them, descriptors go
// through the job's bootstrap (whose peers on this node can take them).
type nodeBoot struct{ m *multi }

func (nb *nodeBoot) Rank() int { return nb.m.lrank }
func (nb *nodeBoot) Size() int { return len(nb.m.members[nb.m.node]) }

func (nb *nodeBoot) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	m := nb.m
	g := m.members[m.node]
	out := make([][]byte, len(g))
	out[m.lrank] = data
	if len(g) == 1 {
		return out, nil
	}
	m.ctx = ctx
	m.bootOps++
	base := m.bootOps << 1
	// Sizes first, then the data into buffers of those sizes.
	mine := binary.LittleEndian.AppendUint64(nil, uint64(len(data)))
	sizes := make([][]byte, len(g))
	for l, r := range g {
		if l == m.lrank {
			continue
		}
		sizes[l] = make([]byte, 8)
		if err := m.post(true, r, tag(kindBoot, r, base), sizes[l]); err != nil {
			return nil, err
		}
		if err := m.post(false, r, tag(kindBoot, m.rank, base), mine); err != nil {
			return nil, err
		}
	}
	if err := m.wait(); err != nil {
		return nil, err
	}
	pad := []byte{0}
	for l, r := range g {
		if l == m.lrank {
			continue
		}
		sz := binary.LittleEndian.Uint64(sizes[l])
		if sz > 1<<30 {
			return nil, fmt.Errorf("%w: rank %d sent a gather of %d bytes", collectives.ErrInvalidArgument, r, sz)
		}
		out[l] = make([]byte, sz, sz+1)
		if err := m.post(true, r, tag(kindBoot, r, base|1), out[l][:sz+1][:max(sz, 1)]); err != nil {
			return nil, err
		}
		src := data
		if len(src) == 0 {
			src = pad
		}
		if err := m.post(false, r, tag(kindBoot, m.rank, base|1), src); err != nil {
			return nil, err
		}
	}
	err := m.wait()
	runtime.KeepAlive(pad)
	return out, err
}

func (nb *nodeBoot) Broadcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	all, err := nb.AllGather(ctx, data)
	if err != nil {
		return nil, err
	}
	return all[root], nil
}

func (nb *nodeBoot) Barrier(ctx context.Context) error {
	_, err := nb.AllGather(ctx, nil)
	return err
}

func (nb *nodeBoot) SendFDs(ctx context.Context, peer int, fds []int) error {
	return nb.m.boot.SendFDs(ctx, nb.m.members[nb.m.node][peer], fds)
}

func (nb *nodeBoot) RecvFDs(ctx context.Context, peer int, n int) ([]int, error) {
	return nb.m.boot.RecvFDs(ctx, nb.m.members[nb.m.node][peer], n)
}
