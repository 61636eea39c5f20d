package nvls

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
)

// Config is one rank's part of an NVLS setup. Every rank of the bootstrap
// calls Setup together, each with its own device.
type Config struct {
	Driver cuda.Driver
	Ctx    cuda.Context // this rank's context, on Device
	Device cuda.Device
	// Size is the bytes each rank binds to the multicast object; it must be
	// the same on every rank and is rounded up to the granularities.
	Size uint64
	// Getenv reads the gate's variables; nil means os.Getenv.
	Getenv func(string) string
	Logger *slog.Logger
}

// Region is a multicast team's memory as seen from one rank.
//
// Multicast is the multicast address: a multimem.st there writes every
// rank's memory, a multimem.ld_reduce there reduces across all of them.
// Unicast is this rank's own memory (bound into the team), for ordinary
// loads and stores of its own copy. Both cover Size bytes.
type Region struct {
	Size      uint64
	Align     uint64 // the common granularity Size was rounded to
	Multicast cuda.DevicePtr
	Unicast   cuda.DevicePtr
	Rank      int
	NRanks    int

	b   transport.Bootstrap
	res *resources
	log *slog.Logger
}

// resources is everything Setup made on this rank, each flag set only once
// its step succeeded, so release undoes exactly what exists.
type resources struct {
	drv  cuda.Driver
	ctx  cuda.Context
	dev  cuda.Device
	rank int
	size uint64

	fd      int // exported or received multicast fd, -1 when none
	mc      cuda.MemHandle
	haveMC  bool
	mem     cuda.MemHandle
	haveMem bool
	bound   bool
	mcVA    cuda.DevicePtr
	haveMCV bool
	mcMap   bool
	ucVA    cuda.DevicePtr
	haveUCV bool
	ucMap   bool
}

// Setup builds an NVLS multicast team over the ranks of b: granularity,
// create on rank 0, fd export and import over the bootstrap, add every
// device, a barrier, then bind and map on every rank. After each risky
// phase the ranks exchange their status, so either every rank returns a
// Region or every rank returns an error (and has released everything it
// made), letting callers fall back to another transport together.
//
// Setup calls nothing multicast unless Gate is open on this rank; when any
// rank's gate is closed every rank returns an error wrapping ErrGateClosed
// (closed rank) or ErrPeerFailed (the others).
func Setup(ctx context.Context, b transport.Bootstrap, cfg Config) (*Region, error) {
	me, n := b.Rank(), b.Size()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("transport", "nvls", "rank", me)
	res := &resources{drv: cfg.Driver, ctx: cfg.Ctx, dev: cfg.Device, rank: me, fd: -1}

	// Phase 1: local checks and granularities, then agree on one size.
	facts, lerr := localFacts(cfg, me, n)
	all, err := agree(ctx, b, lerr, facts.marshal())
	if err != nil {
		return nil, err
	}
	size, align, err := agreedLayout(all)
	if err != nil {
		return nil, stepErr(me, StepAgreeSize, err)
	}
	res.size = size
	log.Debug("goccl: nvls size agreed", "requested", cfg.Size, "size", size, "align", align)

	// Phase 2: rank 0 creates the multicast object and exports its fd.
	lerr = nil
	if me == 0 {
		lerr = res.create(n)
	}
	if _, err := agree(ctx, b, lerr, nil); err != nil {
		return nil, fail(res, err)
	}

	// Phase 3: the fd travels to every other rank, which imports it; then
	// every rank adds its device. The agreement after it is also the
	// barrier the driver needs: all devices added before any bind.
	lerr = res.share(ctx, b)
	if lerr == nil {
		if err := res.drv.MulticastAddDevice(res.mc, res.dev); err != nil {
			lerr = stepErr(me, StepAddDevice, err)
		}
	}
	if _, err := agree(ctx, b, lerr, nil); err != nil {
		return nil, fail(res, err)
	}

	// Phase 4: bind this rank's memory and map both views.
	lerr = res.bindAndMap(align)
	if _, err := agree(ctx, b, lerr, nil); err != nil {
		return nil, fail(res, err)
	}
	log.Debug("goccl: nvls team ready", "multicast", uintptr(res.mcVA), "unicast", uintptr(res.ucVA))
	return &Region{
		Size: size, Align: align, Multicast: res.mcVA, Unicast: res.ucVA,
		Rank: me, NRanks: n, b: b, res: res, log: log,
	}, nil
}

// fail releases what this rank made and returns err, with any release
// error joined so that nothing is silently leaked.
func fail(res *resources, err error) error {
	if rerr := res.release(); rerr != nil {
		return fmt.Errorf("%w (and releasing: %w)", err, rerr)
	}
	return err
}

// localFacts validates cfg, checks the gate and reads the granularities.
// A closed gate stops it before any multicast call.
func localFacts(cfg Config, me, n int) (sizeFacts, *StepError) {
	f := sizeFacts{size: cfg.Size}
	switch {
	case cfg.Driver == nil:
		return f, stepErr(me, StepConfig, fmt.Errorf("%w: Driver is nil", ErrConfig))
	case cfg.Size == 0:
		return f, stepErr(me, StepConfig, fmt.Errorf("%w: Size is 0", ErrConfig))
	case n < 1:
		return f, stepErr(me, StepConfig, fmt.Errorf("%w: %d ranks", ErrConfig, n))
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if ok, why := Gate(getenv); !ok {
		return f, stepErr(me, StepGate, fmt.Errorf("%w: %s", ErrGateClosed, why))
	}
	mcProp := cuda.MulticastProp{NumDevices: uint32(n), Size: cfg.Size, HandleTypes: cuda.HandlePosixFD}
	g, err := cfg.Driver.MulticastGetGranularity(&mcProp, true)
	if err != nil {
		return f, stepErr(me, StepMCGranularity, err)
	}
	if g == 0 {
		return f, stepErr(me, StepMCGranularity, fmt.Errorf("%w: zero granularity", ErrConfig))
	}
	f.mcGran = g
	allocProp := cuda.AllocProp{Device: cfg.Device, HandleTypes: cuda.HandlePosixFD}
	g, err = cfg.Driver.MemGetAllocationGranularity(&allocProp, false)
	if err != nil {
		return f, stepErr(me, StepVMMGranularity, err)
	}
	if g == 0 {
		return f, stepErr(me, StepVMMGranularity, fmt.Errorf("%w: zero granularity", ErrConfig))
	}
	f.vmmGran = g
	return f, nil
}

// create runs on rank 0: the multicast object for n devices, exported as a
// POSIX fd for the other ranks.
func (r *resources) create(n int) *StepError {
	prop := cuda.MulticastProp{NumDevices: uint32(n), Size: r.size, HandleTypes: cuda.HandlePosixFD}
	mc, err := r.drv.MulticastCreate(&prop)
	if err != nil {
		return stepErr(r.rank, StepCreate, err)
	}
	r.mc, r.haveMC = mc, true
	if n == 1 {
		return nil // nobody to share with
	}
	fd, err := r.drv.MemExportToFD(r.ctx, mc)
	if err != nil {
		return r.undo(stepErr(r.rank, StepExport, err))
	}
	r.fd = fd
	return nil
}

// share passes rank 0's fd to every other rank and imports it there. The
// fd is closed as soon as it is no longer needed: the imported handle keeps
// the object alive.
// recvFDTimeout bounds a peer's wait for the multicast object's fd when the
// caller gave no deadline.
const recvFDTimeout = 60 * time.Second

func (r *resources) share(ctx context.Context, b transport.Bootstrap) *StepError {
	if b.Size() == 1 {
		return nil
	}
	if r.rank == 0 {
		// Keep sending after a failure: a peer that got its fd is not left
		// waiting, only the one whose send failed (until ctx ends).
		var serr *StepError
		for p := 1; p < b.Size(); p++ {
			if err := b.SendFDs(ctx, p, []int{r.fd}); err != nil && serr == nil {
				serr = stepErr(r.rank, StepSendFD, fmt.Errorf("to rank %d: %w", p, err))
			}
		}
		if err := r.closeFD(); err != nil && serr == nil {
			serr = err
		}
		if serr != nil {
			return r.undo(serr)
		}
		return nil
	}
	// If rank 0's send to this rank failed, nothing will arrive: bound the
	// wait even when the caller's context has no deadline.
	rctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, recvFDTimeout)
		defer cancel()
	}
	fds, err := b.RecvFDs(rctx, 0, 1)
	if err != nil {
		return stepErr(r.rank, StepRecvFD, fmt.Errorf("from rank 0: %w", err))
	}
	r.fd = fds[0]
	mc, err := r.drv.MemImportFromFD(r.ctx, r.fd)
	if err != nil {
		return r.undo(stepErr(r.rank, StepImport, err))
	}
	r.mc, r.haveMC = mc, true
	if err := r.closeFD(); err != nil {
		return r.undo(err)
	}
	return nil
}

// bindAndMap allocates this rank's memory, binds it into the team, maps the
// multicast handle and the memory itself, and grants this device access.
func (r *resources) bindAndMap(align uint64) *StepError {
	prop := cuda.AllocProp{Device: r.dev, HandleTypes: cuda.HandlePosixFD}
	mem, err := r.drv.MemCreate(r.ctx, r.size, &prop)
	if err != nil {
		return r.undo(stepErr(r.rank, StepMemCreate, err))
	}
	r.mem, r.haveMem = mem, true
	if err := r.drv.MulticastBindMem(r.mc, 0, mem, 0, r.size); err != nil {
		return r.undo(stepErr(r.rank, StepBind, err))
	}
	r.bound = true

	devs := []cuda.Device{r.dev}
	va, err := r.drv.MemAddressReserve(r.ctx, r.size, align)
	if err != nil {
		return r.undo(stepErr(r.rank, StepReserveMC, err))
	}
	r.mcVA, r.haveMCV = va, true
	if err := r.drv.MemMap(r.ctx, va, r.size, r.mc); err != nil {
		return r.undo(stepErr(r.rank, StepMapMC, err))
	}
	r.mcMap = true
	if err := r.drv.MemSetAccess(r.ctx, va, r.size, devs); err != nil {
		return r.undo(stepErr(r.rank, StepAccessMC, err))
	}

	va, err = r.drv.MemAddressReserve(r.ctx, r.size, align)
	if err != nil {
		return r.undo(stepErr(r.rank, StepReserveUC, err))
	}
	r.ucVA, r.haveUCV = va, true
	if err := r.drv.MemMap(r.ctx, va, r.size, mem); err != nil {
		return r.undo(stepErr(r.rank, StepMapUC, err))
	}
	r.ucMap = true
	if err := r.drv.MemSetAccess(r.ctx, va, r.size, devs); err != nil {
		return r.undo(stepErr(r.rank, StepAccessUC, err))
	}
	return nil
}

// undo releases everything after a failed step and returns that step's
// error, noting release failures in it.
func (r *resources) undo(e *StepError) *StepError {
	if rerr := r.release(); rerr != nil {
		e.Err = fmt.Errorf("%w (and releasing: %w)", e.Err, rerr)
	}
	return e
}

func (r *resources) closeFD() *StepError {
	if r.fd < 0 {
		return nil
	}
	fd := r.fd
	r.fd = -1
	if err := closeFDImpl(fd); err != nil {
		return stepErr(r.rank, StepCloseFD, err)
	}
	return nil
}
