package nvls

import (
	"context"
	"errors"

	"github.com/goccl/goccl/transport"
)

// release undoes what exists, in the reverse order of Setup: the unicast
// mapping, the multicast mapping, the binding, the memory, the multicast
// handle, the fd. Every step is attempted even when an earlier one fails
// (each failure is reported, and its resource counted as given up, so a
// second release never repeats a call).
func (r *resources) release() error {
	var errs []error
	step := func(s Step, err error) {
		if err != nil {
			errs = append(errs, stepErr(r.rank, s, err))
		}
	}
	if r.ucMap {
		r.ucMap = false
		step(StepUnmapUC, r.drv.MemUnmap(r.ctx, r.ucVA, r.size))
	}
	if r.haveUCV {
		r.haveUCV = false
		step(StepFreeUC, r.drv.MemAddressFree(r.ctx, r.ucVA, r.size))
	}
	if r.mcMap {
		r.mcMap = false
		step(StepUnmapMC, r.drv.MemUnmap(r.ctx, r.mcVA, r.size))
	}
	if r.haveMCV {
		r.haveMCV = false
		step(StepFreeMC, r.drv.MemAddressFree(r.ctx, r.mcVA, r.size))
	}
	if r.bound {
		r.bound = false
		step(StepUnbind, r.drv.MulticastUnbind(r.mc, r.dev, 0, r.size))
	}
	if r.haveMem {
		r.haveMem = false
		step(StepReleaseMem, r.drv.MemRelease(r.ctx, r.mem))
	}
	if r.haveMC {
		r.haveMC = false
		step(StepReleaseMC, r.drv.MemRelease(r.ctx, r.mc))
	}
	if err := r.closeFD(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Close tears the team down on this rank. It is collective: a barrier first
// makes sure no rank unbinds its memory while a peer may still reach it
// through the multicast address (callers must have synchronized their
// streams before). The local release happens even when the barrier fails.
// A second Close returns transport.ErrClosed.
func (g *Region) Close(ctx context.Context) error {
	if g.res == nil {
		return transport.ErrClosed
	}
	res := g.res
	g.res = nil
	var errs []error
	if err := g.b.Barrier(ctx); err != nil {
		errs = append(errs, stepErr(g.Rank, StepCloseBarrier, err))
	}
	if err := res.release(); err != nil {
		errs = append(errs, err)
	}
	g.log.Debug("goccl: nvls team closed", "errors", len(errs))
	return errors.Join(errs...)
}
