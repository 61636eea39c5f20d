package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internode/nccl"
	"github.com/goccl/goccl/topology"
	"github.com/goccl/goccl/transport"
)

// A job whose ranks span nodes runs goccl's own backend among the ranks
// of each node (its transports and kernels, built over nodeBoot) and NCCL
// between nodes:
//   - a rail communicator per local rank (one rank per node, the ranks of
//     one local rank), when every node has as many ranks: the middle leg
//     of the hierarchical AllReduce, ReduceScatter and AllGather, and the
//     cross-node leg of Broadcast and Reduce;
//   - a flat communicator of every rank: point-to-point operations
//     between nodes, and every collective when the nodes' sizes differ.
//
// NCCL's calls are enqueued on the caller's stream, between goccl's, so
// a CUDA graph captures the whole call.

// interComm is what the backend uses of one NCCL communicator
// (*nccl.Comm; a fake in the tests).
type interComm interface {
	AllReduce(send, recv uintptr, count int, t nccl.DataType, op nccl.Op, stream uintptr) error
	ReduceScatter(send, recv uintptr, count int, t nccl.DataType, op nccl.Op, stream uintptr) error
	AllGather(send, recv uintptr, count int, t nccl.DataType, stream uintptr) error
	Broadcast(send, recv uintptr, count int, t nccl.DataType, root int, stream uintptr) error
	Reduce(send, recv uintptr, count int, t nccl.DataType, op nccl.Op, root int, stream uintptr) error
	Send(buf uintptr, count int, t nccl.DataType, peer int, stream uintptr) error
	Recv(buf uintptr, count int, t nccl.DataType, peer int, stream uintptr) error
	CreatePreMulSum(bits uint64, devPtr uintptr, t nccl.DataType) (nccl.Op, error)
	DestroyOp(op nccl.Op) error
	AsyncError() error
	Abort() error
	Destroy() error
}

// interEngine makes the communicators and brackets groups.
type interEngine interface {
	GetUniqueID() (nccl.UniqueID, error)
	InitRank(cuctx uintptr, nranks, rank int, id nccl.UniqueID, hostID string) (interComm, error)
	GroupStart() error
	GroupEnd(cuctx uintptr) error
	Describe() string
}

type ncclEngine struct{ l *nccl.Library }

func (e ncclEngine) GetUniqueID() (nccl.UniqueID, error) { return e.l.GetUniqueID() }
func (e ncclEngine) InitRank(cuctx uintptr, nranks, rank int, id nccl.UniqueID, hostID string) (interComm, error) {
	c, err := e.l.InitRank(cuctx, nranks, rank, id, hostID)
	if err != nil {
		return nil, err
	}
	return c, nil
}
func (e ncclEngine) GroupStart() error            { return e.l.GroupStart() }
func (e ncclEngine) GroupEnd(cuctx uintptr) error { return e.l.GroupEnd(cuctx) }
func (e ncclEngine) Describe() string             { return "NCCL " + e.l.Version() + " (" + e.l.Path() + ")" }

// devMem is the device memory the composed calls need beyond the
// caller's buffers: a scratch buffer, copies and stream order.
type devMem interface {
	alloc(n uint64) (uintptr, error)
	free(p uintptr) error
	copy(dst, src uintptr, n uint64, stream uintptr) error
	// order makes to wait for the work enqueued on from so far.
	order(from, to uintptr) error
	sync() error
}

// backendMem is devMem on the node backend's context.
type backendMem struct {
	be *Backend
	ev cuda.Event
}

func (m *backendMem) alloc(n uint64) (uintptr, error) {
	p, err := m.be.drv.MemAlloc(m.be.ctx, n)
	return uintptr(p), err
}
func (m *backendMem) free(p uintptr) error { return m.be.drv.MemFree(m.be.ctx, cuda.DevicePtr(p)) }
func (m *backendMem) copy(dst, src uintptr, n uint64, s uintptr) error {
	return m.be.drv.MemcpyAsync(m.be.ctx, cuda.DevicePtr(dst), cuda.DevicePtr(src), n, cuda.Stream(s))
}
func (m *backendMem) order(from, to uintptr) error {
	if m.ev == 0 {
		e, err := m.be.drv.EventCreate(m.be.ctx, false)
		if err != nil {
			return err
		}
		m.ev = e
	}
	if err := m.be.drv.EventRecord(m.be.ctx, m.ev, cuda.Stream(from)); err != nil {
		return err
	}
	return m.be.drv.StreamWaitEvent(m.be.ctx, cuda.Stream(to), m.ev)
}
func (m *backendMem) sync() error { return m.be.drv.CtxSynchronize(m.be.ctx) }
func (m *backendMem) close() error {
	if m.ev == 0 {
		return nil
	}
	return m.be.drv.EventDestroy(m.be.ctx, m.ev)
}

// multi is one rank's GPU backend in a job across nodes.
type multi struct {
	rank, n     int
	nodeOf      []int   // every rank's node
	localOf     []int   // every rank's index on its node
	members     [][]int // each node's ranks, ascending
	node, lrank int
	K, L        int  // nodes; ranks per node (when equal)
	equal       bool // every node has L ranks: rails exist
	log         *slog.Logger

	local collectives.Backend // the node's own backend
	mem   devMem
	eng   interEngine
	cuctx uintptr
	rail  interComm // nil unless equal
	flat  interComm

	mu      sync.Mutex // one call at a time; Close waits for it
	subSeq  uint64     // the node backend's call numbers
	la      collectives.Args
	lg      collectives.Group
	scratch uintptr
	scrN    uint64
	scrOld  []uintptr // outgrown scratch buffers, freed at Close (work may still use them)
	scrLast uintptr   // the stream that used the scratch last
	scrUsed bool
	flatLog bool // the flat path's reason was logged

	closed    atomic.Bool
	failure   atomic.Pointer[error]
	stopPoll  chan struct{}
	pollDone  chan struct{}
	abortOnce sync.Once
}

// pollInterval is how often NCCL's asynchronous errors are read.
const pollInterval = 50 * time.Millisecond

// spansNodes reports whether nodes (a key per rank) names several nodes.
func spansNodes(nodes []string) bool {
	for _, k := range nodes {
		if k != nodes[0] {
			return true
		}
	}
	return false
}

// newMulti builds the backend of a job across nodes. Every step that one
// rank may fail alone is agreed over the job's bootstrap, so that every
// rank fails it together, naming the rank.
func newMulti(ctx context.Context, drv cuda.Driver, b transport.Bootstrap, cfg Config, image []byte) (_ collectives.Backend, err error) {
	m := &multi{rank: b.Rank(), n: b.Size(), log: cfg.Logger}
	if len(cfg.Nodes) != m.n {
		return nil, fmt.Errorf("gpu backend: %d node keys for %d ranks: %w", len(cfg.Nodes), m.n, collectives.ErrInvalidArgument)
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.layout(cfg.Nodes)
	layout := m.describe()
	lib, lerr := nccl.Load()
	if err := agreeJob(ctx, b, "loading NCCL", lerr); err != nil {
		return nil, fmt.Errorf("the ranks span %d nodes (%s); between nodes the GPU backend runs over NCCL: %w",
			len(m.members), layout, err)
	}
	lcfg := cfg
	lcfg.Nodes = nil
	nb := &nodeBoot{job: b, members: m.members[m.node], lrank: m.lrank}
	be, lerr := newBackend(ctx, drv, nb, lcfg, image, newMapper)
	if lerr != nil {
		lerr = fmt.Errorf("gpu backend: node %d's own backend: %w", m.node, lerr)
	}
	if err := agreeJob(ctx, b, "the node backends", lerr); err != nil {
		if lerr == nil {
			_ = be.Close()
		}
		return nil, err
	}
	mem := &backendMem{be: be}
	defer func() {
		if err != nil {
			_ = mem.close()
			_ = be.Close()
		}
	}()
	if err := m.connect(ctx, b, ncclEngine{lib}, uintptr(be.ctx), cfg.Nodes[m.rank]); err != nil {
		return nil, err
	}
	m.local, m.mem = be, mem
	m.start()
	how := "hierarchical (goccl inside each node, NCCL rails between nodes)"
	if !m.equal {
		how = "flat over NCCL (nodes of unequal size)"
	}
	m.log.Info("goccl: gpu backend across nodes", "rank", m.rank, "nranks", m.n, "nodes", m.K,
		"layout", layout, "between nodes", m.eng.Describe(), "collectives", how)
	return m, nil
}

// agreeJob tells every rank of the job whether a step failed anywhere.
func agreeJob(ctx context.Context, b transport.Bootstrap, step string, lerr error) error {
	msg := []byte{0}
	if lerr != nil {
		msg = append([]byte{1}, lerr.Error()...)
	}
	all, err := b.AllGather(ctx, msg)
	switch {
	case err != nil:
		return errors.Join(lerr, fmt.Errorf("gpu backend: agree on %s: %w", step, err))
	case lerr != nil:
		return lerr
	}
	for r, x := range all {
		if len(x) > 0 && x[0] == 1 {
			return &collectives.PeerError{Rank: r, Cause: fmt.Errorf("gpu backend: %s: %s", step, x[1:])}
		}
	}
	return nil
}

// connect makes the rail and flat NCCL communicators: each rail's rank on
// node 0 and rank 0 draw the ids, sent over the job's bootstrap. Both are
// made with one NCCL_HOSTID per rank (hostID): NCCL reads it once per
// process, at the first init.
func (m *multi) connect(ctx context.Context, b transport.Bootstrap, eng interEngine, cuctx uintptr, nodeKey string) error {
	m.eng, m.cuctx = eng, cuctx
	var railID, flatID nccl.UniqueID
	var lerr error
	msg := make([]byte, 2, 2+2*nccl.UniqueIDBytes)
	if m.equal && m.node == 0 {
		if railID, lerr = eng.GetUniqueID(); lerr == nil {
			msg[0] = 1
			msg = append(msg, railID[:]...)
		}
	}
	if m.rank == 0 && lerr == nil {
		if flatID, lerr = eng.GetUniqueID(); lerr == nil {
			msg[1] = 1
			msg = append(msg, flatID[:]...)
		}
	}
	if lerr != nil {
		msg = append([]byte{2, 0}, lerr.Error()...)
	}
	all, err := b.AllGather(ctx, msg)
	if err != nil {
		return errors.Join(lerr, fmt.Errorf("gpu backend: exchange NCCL ids: %w", err))
	}
	if lerr != nil {
		return fmt.Errorf("gpu backend: ncclGetUniqueId: %w", lerr)
	}
	for r, x := range all {
		if len(x) >= 2 && x[0] == 2 {
			return &collectives.PeerError{Rank: r, Cause: fmt.Errorf("gpu backend: ncclGetUniqueId: %s", x[2:])}
		}
	}
	if m.equal {
		x := all[m.members[0][m.lrank]]
		if len(x) < 2+nccl.UniqueIDBytes || x[0] != 1 {
			return fmt.Errorf("gpu backend: rank %d sent no NCCL id for rail %d", m.members[0][m.lrank], m.lrank)
		}
		copy(railID[:], x[2:])
	}
	x := all[0]
	if len(x) < 2+nccl.UniqueIDBytes || x[1] != 1 {
		return errors.New("gpu backend: rank 0 sent no NCCL id for the flat communicator")
	}
	copy(flatID[:], x[len(x)-nccl.UniqueIDBytes:])

	// Every rank makes its rail communicator, then the flat one, so the
	// blocking inits meet in the same order everywhere.
	host := hostID(nodeKey, m.lrank)
	if m.equal {
		m.rail, lerr = eng.InitRank(cuctx, m.K, m.node, railID, host)
		if lerr != nil {
			lerr = fmt.Errorf("gpu backend: NCCL rail %d (ranks %v): %w", m.lrank, m.railRanks(), lerr)
		}
	}
	if lerr == nil {
		m.flat, lerr = eng.InitRank(cuctx, m.n, m.rank, flatID, host)
		if lerr != nil {
			lerr = fmt.Errorf("gpu backend: NCCL communicator of all %d ranks: %w", m.n, lerr)
		}
	}
	if err := agreeJob(ctx, b, "the NCCL communicators", lerr); err != nil {
		m.destroyComms(true)
		return err
	}
	return nil
}

// hostID is the NCCL_HOSTID of a rank: its node's key and its local rank,
// so that every rank is a host of its own in NCCL's eyes. NCCL refuses two
// ranks of one communicator on one GPU of one host, which ranks sharing a
// GPU would be on the flat communicator; and ranks of one node never use
// NCCL to reach each other (goccl's own transports carry their traffic),
// so NCCL's transports inside a node are not needed. A rail's ranks are on
// distinct nodes either way. The cost: NCCL cannot route a rank's traffic
// through a peer's NIC on its node (PXN), and where the nodes' sizes
// differ the flat collectives cross the network between ranks of one node
// too. (NCCL reads NCCL_HOSTID once per process, so the rail and the flat
// communicator must be given the same.)
func hostID(nodeKey string, lrank int) string {
	return fmt.Sprintf("goccl-%s-%d", nodeKey, lrank)
}

func (m *multi) railRanks() []int {
	out := make([]int, 0, m.K)
	for _, g := range m.members {
		out = append(out, g[m.lrank])
	}
	return out
}

// layout numbers the nodes in order of their lowest rank.
func (m *multi) layout(nodes []string) {
	m.members, m.nodeOf, m.localOf = topology.Layout(nodes)
	m.node, m.lrank = m.nodeOf[m.rank], m.localOf[m.rank]
	m.K, m.L = len(m.members), len(m.members[0])
	m.equal = true
	for _, g := range m.members {
		m.equal = m.equal && len(g) == m.L
	}
}

func (m *multi) describe() string {
	var parts []string
	for k, g := range m.members {
		parts = append(parts, fmt.Sprintf("node %d: ranks %v", k, g))
	}
	return strings.Join(parts, "; ")
}

// start polls NCCL's asynchronous errors: one turns into goccl's abort.
func (m *multi) start() {
	m.stopPoll, m.pollDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.pollDone)
		t := time.NewTicker(pollInterval)
		defer t.Stop()
		for {
			select {
			case <-m.stopPoll:
				return
			case <-t.C:
			}
			if m.failure.Load() != nil {
				return
			}
			for _, c := range []interComm{m.rail, m.flat} {
				if c == nil {
					continue
				}
				if err := c.AsyncError(); err != nil {
					m.fail(fmt.Errorf("gpu backend: rank %d: NCCL between nodes: %w: %w", m.rank, collectives.ErrAborted, err))
					return
				}
			}
		}
	}()
}

// fail records err (the first wins), aborts the node's backend and, off
// the caller's goroutine, the NCCL communicators.
func (m *multi) fail(err error) error {
	if m.failure.CompareAndSwap(nil, &err) {
		m.log.Info("goccl: gpu backend aborting", "rank", m.rank, "err", err)
		if m.local != nil {
			m.local.Abort(err)
		}
		go m.abortOnce.Do(func() { m.destroyComms(true) })
	}
	return *m.failure.Load()
}

// destroyComms frees the NCCL communicators: aborted (their work
// abandoned) or destroyed (after it).
func (m *multi) destroyComms(abort bool) error {
	var errs []error
	for _, c := range []interComm{m.rail, m.flat} {
		if c == nil {
			continue
		}
		f := c.Destroy
		if abort {
			f = c.Abort
		}
		if err := f(); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: NCCL communicator: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Abort makes every current and future call of this rank fail with an
// error wrapping cause and ErrAborted, and aborts the NCCL communicators.
func (m *multi) Abort(cause error) {
	if cause == nil {
		cause = errors.New("aborted")
	}
	if !errors.Is(cause, collectives.ErrAborted) {
		cause = fmt.Errorf("%w: %w", collectives.ErrAborted, cause)
	}
	m.fail(cause)
}

// Close waits for this rank's work, frees the NCCL communicators, the
// scratch and the node's backend.
func (m *multi) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	close(m.stopPoll)
	<-m.pollDone
	if !m.mu.TryLock() {
		// A call is being enqueued: its peers may never meet it now.
		m.Abort(fmt.Errorf("rank %d closed its communicator during a call: %w", m.rank, collectives.ErrClosed))
		m.mu.Lock()
	}
	defer m.mu.Unlock()
	var errs []error
	if m.failure.Load() == nil {
		if err := m.mem.sync(); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: synchronize: %w", err))
		}
		m.abortOnce.Do(func() { errs = append(errs, m.destroyComms(false)) })
	} else {
		m.abortOnce.Do(func() { m.destroyComms(true) }) // waits for fail's
	}
	if m.failure.Load() == nil {
		for _, p := range append(m.scrOld, m.scratch) {
			if p != 0 {
				if err := m.mem.free(p); err != nil {
					errs = append(errs, fmt.Errorf("gpu backend: free scratch: %w", err))
				}
			}
		}
		m.scrOld, m.scratch = nil, 0
	} // after an abort work may still use it: left to the context's end
	if bm, ok := m.mem.(*backendMem); ok {
		if err := bm.close(); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: destroy event: %w", err))
		}
	}
	errs = append(errs, m.local.Close())
	return errors.Join(errs...)
}

var _ collectives.Registrar = (*multi)(nil)

// Register and Alloc register with the node's backend: its copy-engine
// paths serve the calls inside the node.
func (m *multi) Register(ctx context.Context, ptr uintptr, size uint64) (collectives.Registration, error) {
	r, ok := m.local.(collectives.Registrar)
	if !ok {
		return nil, fmt.Errorf("gpu backend: the node backend registers nothing: %w", collectives.ErrInvalidArgument)
	}
	return r.Register(ctx, ptr, size)
}

// Alloc allocates device memory registered with the node's backend.
func (m *multi) Alloc(ctx context.Context, size uint64) (uintptr, collectives.Registration, error) {
	r, ok := m.local.(collectives.Registrar)
	if !ok {
		return 0, nil, fmt.Errorf("gpu backend: the node backend allocates nothing: %w", collectives.ErrInvalidArgument)
	}
	return r.Alloc(ctx, size)
}

// CheckPointers checks a call's buffers in this rank's context, for
// GOCCL_CHECK, as the one-node backend does (sizes by the job's ranks).
func (m *multi) CheckPointers(a *collectives.Args) error {
	be, ok := m.local.(*Backend)
	if !ok {
		return nil
	}
	return checkPointers(be.drv, be.ctx, int(be.dev), m.rank, m.n, a)
}
