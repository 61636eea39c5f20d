package gpu

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// Run enqueues one validated collective on a.Stream and returns without
// synchronizing. A zero count launches nothing.
func (be *Backend) Run(ctx context.Context, a *collectives.Args) error {
	if be.aborted.Load() {
		return be.abortErr()
	}
	if err := be.kernelError(); err != nil {
		return err
	}
	if a.Count == 0 {
		return nil
	}
	if !a.Coll.Valid() || !a.Type.Valid() || (a.Coll.Reduces() && !a.Op.Valid()) {
		return fmt.Errorf("gpu backend: %s %s %s: %w", a.Coll, a.Type, a.Op, collectives.ErrInvalidArgument)
	}
	size := a.Type.Size()
	bytes := int64(a.Count) * int64(size)
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.closed {
		return collectives.ErrClosed
	}
	// The choice is the same on every rank: Choose is pure, and so are
	// the registration lookup and the plan behind a copy-engine choice.
	// PreMulSum never goes to the copy engines: they cannot scale what they
	// move; nor does a reduction whose copy-engine kernel the fatbin lacks.
	premul := a.Coll.Reduces() && a.Op == collectives.PreMulSum
	ceOK := be.ce.ok && !(a.Coll.Reduces() && (premul || be.fns.get(famCEReduce, a.Type, a.Op) == 0))
	algo := be.tune.th.Choose(a.Coll, bytes, be.nranks, be.forced, ceOK)
	be.last = collectives.Path{Algo: algo, Transport: be.transport}
	if algo == collectives.CopyEngine {
		if taken, err := be.tryCE(a, bytes); taken {
			return err
		}
		algo = be.tune.th.Choose(a.Coll, bytes, be.nranks, be.forced, false)
	}
	if fn := be.pickNVLS(a, bytes); fn != 0 {
		be.last = collectives.Path{Algo: collectives.NVLS, Transport: "nvls"}
		return be.runNVLS(a, fn, uint64(bytes))
	}
	if algo == collectives.LL && bytes > llMaxBytes {
		algo = collectives.OneShot // more than the LL kernel's lines hold
	}
	be.last.Algo = algo
	f := familyOf(a.Coll, algo)

	// The blocks of the AllReduce kernels that split the message share one
	// segment of it.
	work := bytes
	if f == famAllReduceTwoShot {
		work = (bytes + int64(be.nranks) - 1) / int64(be.nranks)
	}
	grid := be.tune.shape(f, work)

	fn := be.fns.get(f, a.Type, a.Op)
	if fn == 0 {
		return fmt.Errorf("gpu backend: %s of %s with op %s: the loaded fatbin has no kernel %s (rebuild the kernels): %w",
			a.Coll, a.Type, a.Op, kernelName(f, a.Type, a.Op), collectives.ErrNotSupported)
	}
	be.prm.setCall(a.Send, a.Recv, uint64(a.Count), a.Root, size, a.Seq)
	be.prm.u64(offStamp, be.stamps.slot(a.Seq))
	if premul {
		be.prm.setScalar(a.Scalar)
	}
	cfg := cuda.LaunchConfig{
		Grid:         cuda.Dim3{X: uint32(grid), Y: 1, Z: 1},
		Block:        cuda.Dim3{X: uint32(be.tune.threads), Y: 1, Z: 1},
		Stream:       cuda.Stream(a.Stream),
		Programmatic: be.pdl,
	}
	if f == famAllReduceOneShot && !premul { // (PreMulSum pushes its products: no stash)
		cfg.SharedMem = be.tune.stashFor(uint64(a.Count), int64(size), grid)
	}
	if err := be.drv.LaunchKernel(be.ctx, fn, cfg, be.prm[:]); err != nil {
		// The peers' kernels already wait at a barrier for this rank's:
		// abort so that they leave through the flag instead of spinning.
		be.Abort(fmt.Errorf("gpu backend: launch %s: %w", a.Coll, err))
		return be.abortErr()
	}
	return nil
}

// LastPath implements collectives.PathTeller: the algorithm Run took
// (oneshot, twoshot, ll, ce, nvls; "" for point-to-point) and the
// transport (uva, ipc, vmm; nvls for the multicast kernels).
func (be *Backend) LastPath() collectives.Path {
	be.mu.Lock()
	defer be.mu.Unlock()
	return be.last
}

// tryCE runs a call the thresholds gave the copy engines, where they can
// take it: Broadcast and AllGather into registered buffers; AllReduce and
// ReduceScatter in direct mode (cereduce.go: 2 ranks, both buffers
// registered, out of place), or through staging where forced or given a
// threshold explicitly (AllReduce into registered buffers, ReduceScatter
// into any); a reduction's chunks within the flags' range; and not while
// the stream is being captured (a host-side sequence number would be
// replayed frozen; kernels keep their epochs on the device). taken is false
// when the kernels must serve the call instead.
func (be *Backend) tryCE(a *collectives.Args, bytes int64) (taken bool, err error) {
	reg, send := be.callRegs(a)
	var (
		plan cePlan
		pl   *cePlan // a reduction's plan, nil otherwise
	)
	if a.Coll.Reduces() {
		// Symmetric registration puts both buffers at the same offsets on
		// every rank, so every rank sees the same in-place-ness.
		direct := be.nranks == 2 && be.tune.ceDirect && reg != nil && send != nil && !a.InPlace(be.rank)
		staged := be.forced == collectives.CopyEngine || be.tune.ceExplicit[a.Coll]
		if !direct && !staged {
			return false, nil
		}
		var ok bool
		if plan, ok = be.planCEReduce(a, direct); !ok {
			return false, nil
		}
		pl = &plan
	}
	if reg == nil && (a.Coll != collectives.ReduceScatter || pl.direct) {
		return false, nil
	}
	capturing, err := be.drv.StreamIsCapturing(be.ctx, cuda.Stream(a.Stream))
	if err != nil {
		// The peers may already wait for this call on the copy-engine
		// path: stop them too.
		be.Abort(fmt.Errorf("gpu backend: %s: stream capture status: %w", a.Coll, err))
		return true, be.abortErr()
	}
	if capturing {
		return false, nil
	}
	return true, be.runCE(a, reg, uint64(bytes), pl)
}
