package gpu

import (
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// A small AllToAll (Comm.AllToAll: equal counts, chunk p of send for rank
// p, rank p's chunk into recv at p) runs as one launch of kernels/
// alltoall.cu's goccl_alltoall_ll: every chunk travels in LL lines, with
// no staging, barrier or per-pair counter, instead of through the
// point-to-point kernel's lanes. It shares the LL AllReduce's lines and
// epochs. Every rank takes the same path: it depends on the group's kind,
// the count, the type and the agreed tuning only.

// defaultA2ALL is the largest AllToAll per peer the one-shot kernel takes.
const defaultA2ALL = 64 << 10

// setupAllToAll looks the kernel up; a fatbin without it leaves every
// AllToAll to the point-to-point kernel.
func (be *Backend) setupAllToAll() {
	fn, err := be.drv.ModuleGetFunction(be.ctx, be.module, "goccl_alltoall_ll")
	if err != nil {
		be.log.Debug("goccl: gpu backend: one-shot AllToAll off: the kernels lack goccl_alltoall_ll", "rank", be.rank, "err", err)
		return
	}
	be.a2a = fn
}

// allToAllShape returns the send and receive bases and the bytes per peer
// of g when it is an AllToAll the one-shot kernel takes (ok false
// otherwise): Comm.AllToAll's layout on one stream, 2 to 8 ranks, up to
// tuning.a2aLL bytes per peer.
func (be *Backend) allToAllShape(g *collectives.Group) (send, recv uintptr, bytes int, ok bool) {
	n := be.nranks
	if be.a2a == 0 || g.Kind != collectives.AllToAllGroup || len(g.Colls) != 0 || n < 2 || len(g.P2P) != 2*n {
		return 0, 0, 0, false
	}
	first := &g.P2P[0]
	bytes = first.Bytes()
	if bytes == 0 || int64(bytes) > be.tune.a2aLL {
		return 0, 0, 0, false
	}
	send, recv = first.Buf, g.P2P[1].Buf
	for p := range n {
		s, r := &g.P2P[2*p], &g.P2P[2*p+1]
		if s.Kind != collectives.SendOp || r.Kind != collectives.RecvOp || s.Peer != p || r.Peer != p ||
			s.Count != first.Count || r.Count != first.Count || s.Type != first.Type || r.Type != first.Type ||
			s.Stream != first.Stream || r.Stream != first.Stream ||
			s.Buf != send+uintptr(p*bytes) || r.Buf != recv+uintptr(p*bytes) {
			return 0, 0, 0, false
		}
	}
	return send, recv, bytes, true
}

// llGrid is the LL kernels' grid for bytes (tuning.shape), less where a
// block would get no line: a block waits for its peers' only through its
// lines, which keeps it from running two launches ahead (ll.cu).
func (be *Backend) llGrid(bytes int64) int {
	g := be.tune.shape(famAllReduceLL, bytes)
	for g > 1 && ((bytes+int64(g)-1)/int64(g)+7)&^7*int64(g-1) >= bytes {
		g--
	}
	return g
}

// tryAllToAllLL launches g as one goccl_alltoall_ll when allToAllShape
// takes it; taken is false when the point-to-point kernel must run it.
func (be *Backend) tryAllToAllLL(g *collectives.Group) (taken bool, err error) {
	send, recv, bytes, ok := be.allToAllShape(g)
	if !ok {
		return false, nil
	}
	if be.aborted.Load() {
		return true, be.abortErr()
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.closed {
		return true, collectives.ErrClosed
	}
	be.prm.setCall(send, recv, uint64(bytes), 0, 1, g.Seq)
	be.prm.u64(offStamp, be.stamps.slot(g.Seq))
	be.last = collectives.Path{Algo: collectives.LL, Transport: be.transport}
	cfg := cuda.LaunchConfig{
		Grid:         cuda.Dim3{X: uint32(be.llGrid(int64(bytes))), Y: 1, Z: 1},
		Block:        cuda.Dim3{X: uint32(be.tune.threads), Y: 1, Z: 1},
		Stream:       cuda.Stream(g.P2P[0].Stream),
		Programmatic: be.pdl,
	}
	if err := be.drv.LaunchKernel(be.ctx, be.a2a, cfg, be.prm[:]); err != nil {
		// The peers' kernels already wait for this rank's lines.
		be.Abort(fmt.Errorf("gpu backend: launch AllToAll: %w", err))
		return true, be.abortErr()
	}
	return true, nil
}
