package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/transport"
)

// Config selects the device and transport.
type Config struct {
	Device    int    // CUDA device ordinal this rank drives
	Transport string // "", "uva", "ipc", "vmm" (GOCCL_TRANSPORT); "" chooses
	Algo      string // GOCCL_ALGO: "", "oneshot", "twoshot", "ll", "ce", "nvls"
	// MaxBlocks caps the blocks of one launch (0: the default, 128; at
	// most 512; GOCCL_TUNE's grid overrides it). The staging has a slot
	// per block, so fewer blocks get larger slots, up to 128 KiB. Every
	// rank must use the same value: New checks.
	MaxBlocks int
	// Stamps is the size of the table of GPU timestamps the kernels
	// write for the flight recorder (stamps.go): its ring's size; 0 leaves
	// the kernels' timestamps off.
	Stamps int
	// Logger receives the backend's messages (nil: slog's default), so
	// that GOCCL_DEBUG governs them as it does the rest of goccl's.
	Logger *slog.Logger
	// Timeout bounds a point-to-point kernel's every wait for a peer
	// (GOCCL_TIMEOUT; 0: none, a wait lasts until the peer comes or the
	// communicator is aborted): a wait past it fails the rank with an
	// error wrapping collectives.ErrTimeout that names the peer and the
	// op. It is counted in whole milliseconds (rounded up).
	Timeout time.Duration
	// Nodes holds every rank's node key (nil: all on one node). When they
	// name several nodes, goccl's transports run among the ranks of each
	// node and NCCL, loaded at run time, between nodes (multinode.go).
	Nodes []string
	// Check: GOCCL_CHECK is on; the copy-engine point-to-point path then
	// verifies its contract per call (p2pcecheck.go).
	Check bool
	// Env is where the backend's own settings (GOCCL_TUNE,
	// GOCCL_GROUP_FUSE, and GOCCL_ALGO / GOCCL_TRANSPORT where Algo /
	// Transport are empty) are read, as comm's Options.Env; nil: the
	// process environment.
	Env map[string]string
}

// getenv reads setting k from Env, else from the process environment.
func (c Config) getenv(k string) string {
	if c.Env != nil {
		return c.Env[k]
	}
	return os.Getenv(k)
}

// Backend runs collectives as goccl kernels on one device. Run is meant to
// be called from one goroutine at a time per communicator (as NCCL's
// communicators are); Abort may be called from any goroutine.
type Backend struct {
	drv    cuda.Driver
	dev    cuda.Device
	ctx    cuda.Context
	rank   int
	nranks int
	boot   transport.Bootstrap
	log    *slog.Logger

	mapper    transport.Mapper
	workspace *transport.Region
	tune      tuning
	forced    collectives.Algorithm
	// pdl: the collective kernels launch programmatically (tuning.pdl, on
	// a GPU of compute capability 9.0 or later), so that each gets onto the
	// SMs while the one before it on the stream finishes.
	pdl bool

	abortMu   sync.Mutex     // Abort's write of abortHost against its free
	abortHost unsafe.Pointer // host-pinned u32 the kernels poll
	abortDev  cuda.DevicePtr
	module    cuda.Module
	fns       funcTable

	mu sync.Mutex // guards prm and the launch sequence
	// prm is its own allocation: cgo checks that memory handed to C holds
	// no Go pointers, and it checks the whole object a pointer points into.
	prm    *params
	closed bool

	aborted    atomic.Bool
	cause      atomic.Pointer[error]
	abortDrain time.Duration // abortDrain; tests shorten it

	// regs are the live registrations sorted by base (guarded by mu): Run
	// looks a receive buffer up in it for the copy-engine path.
	regs   []*registration
	regSeq uint64 // registrations made so far (registration.seq)
	ce     copyEngine
	nv     nvlsState
	p2p    p2pState
	zc     zcTable // zero-copy point-to-point (p2pzc.go)
	stamps stampTable
	// last is how the last call went (LastPath); transport the mapper's name.
	last      collectives.Path
	transport string
	fuse      fuseState // group fusion (fuse.go)
	// p2pTimeout bounds the point-to-point kernels' waits (Config.Timeout).
	p2pTimeout time.Duration
	a2a        cuda.Function // the one-shot AllToAll (alltoall.go); 0: not in the fatbin
}

var _ collectives.Backend = (*Backend)(nil)
var _ collectives.Registrar = (*Backend)(nil)

// New builds the GPU backend for this rank. It is collective: every rank of
// the communicator calls it.
func New(ctx context.Context, b transport.Bootstrap, cfg Config) (collectives.Backend, error) {
	drv, err := cuda.Load()
	if err != nil {
		return nil, fmt.Errorf("gpu backend: %w", err)
	}
	image, err := kernels.Image()
	if err != nil {
		return nil, fmt.Errorf("gpu backend: %w", err)
	}
	if len(cfg.Nodes) > 0 && spansNodes(cfg.Nodes) {
		return newMulti(ctx, drv, b, cfg, image)
	}
	return newBackend(ctx, drv, b, cfg, image, newMapper)
}

// mapperFunc builds the transport a communicator uses.
type mapperFunc func(ctx context.Context, name string, drv cuda.Driver, b transport.Bootstrap, dev cuda.Device, cctx cuda.Context) (transport.Mapper, error)

func newBackend(ctx context.Context, drv cuda.Driver, b transport.Bootstrap, cfg Config, image []byte, mk mapperFunc) (_ *Backend, err error) {
	nranks := b.Size()
	if nranks < 1 || nranks > maxRanks {
		return nil, fmt.Errorf("gpu backend: %d ranks, the kernels support 1 to %d: %w", nranks, maxRanks, collectives.ErrInvalidArgument)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("gpu backend: timeout %v is negative: %w", cfg.Timeout, collectives.ErrInvalidArgument)
	}
	algo := cfg.Algo
	if algo == "" {
		algo = cfg.getenv("GOCCL_ALGO")
	}
	forced, err := collectives.ParseAlgorithm(algo)
	if err != nil {
		return nil, fmt.Errorf("gpu backend: %w", err)
	}
	// A bad GOCCL_TUNE fails New on every rank together (agreeTuning).
	tune, tuneSpec, tuneErr := tuningFromEnv(nranks, cfg.MaxBlocks, cfg.getenv(EnvTune))
	if tuneErr != nil {
		tuneErr = fmt.Errorf("gpu backend: %w", tuneErr)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	be := &Backend{drv: drv, rank: b.Rank(), nranks: nranks, boot: b, log: log, tune: tune, forced: forced,
		prm: new(params), abortDrain: abortDrain, p2pTimeout: cfg.Timeout}
	defer func() {
		if err != nil {
			be.release(context.WithoutCancel(ctx))
		}
	}()

	// Rank-local steps are agreed before the next exchange: a rank
	// returning alone would leave its peers waiting for it there.
	if err = be.agreeInit(ctx, "device", be.openDevice(cfg.Device)); err != nil {
		return nil, err
	}
	if err = agreeTuning(ctx, b, fmt.Sprintf("%s|%d|%+v", tuneSpec, cfg.MaxBlocks, tune), tuneErr); err != nil {
		return nil, err
	}

	name, err := chooseTransport(ctx, drv, be.dev, b, cfg.Transport, cfg.getenv)
	if err != nil {
		return nil, err
	}
	be.transport = name
	if be.mapper, err = mk(ctx, name, drv, b, be.dev, be.ctx); err != nil {
		return nil, fmt.Errorf("gpu backend: transport %s: %w", name, err)
	}

	// Workspace: signal slots, then two staging halves of nranks*grid
	// slots each, the LL kernel's lines, the copy engines' landing area
	// and the point-to-point eager area (p2p.go), mapped by every peer.
	slot := uint64(tune.slot)
	llOffset := 2 * uint64(nranks) * uint64(tune.grid) * slot
	staging := llOffset + llBytes(nranks)
	landing := landBytes(nranks, tune.ceLand)
	be.p2p.eagerAt = staging + landing
	wsBytes := signalSize + staging + landing + eagerBytes(nranks)
	if be.workspace, err = be.mapper.Alloc(ctx, wsBytes); err != nil {
		return nil, fmt.Errorf("gpu backend: workspace of %d bytes: %w", wsBytes, err)
	}
	ws := be.workspace
	if len(ws.Peers) != nranks {
		return nil, fmt.Errorf("gpu backend: transport %s mapped %d peers, want %d", name, len(ws.Peers), nranks)
	}
	if err = be.agreeInit(ctx, "setup", errors.Join(be.setupLocal(image, cfg.getenv(EnvGroupFuse)), be.setupStamps(cfg.Stamps))); err != nil {
		return nil, err
	}

	peerSig := make([]uintptr, nranks)
	peerStage := make([]uintptr, nranks)
	for r := range nranks {
		peerSig[r] = ws.Peers[r]
		peerStage[r] = ws.Peers[r] + signalSize
	}
	be.prm.setStatic(be.rank, nranks, uintptr(be.abortDev), ws.Local, peerSig, peerStage,
		layout{blockSlots: uint32(tune.grid), shareBytes: uint32(tune.share), slotBytes: slot, llOffset: llOffset})
	be.initP2P(be.p2p.eagerAt)
	be.ce.p2p.check = cfg.Check

	if err = be.setupCE(ctx, ws.Local, ws.Peers, llOffset, signalSize+staging, uint64(tune.ceLand)); err != nil {
		return nil, err
	}
	if err = be.agreeP2PCE(ctx); err != nil {
		return nil, err
	}
	// Before the init barrier: the NVLS flags are zeroed on every rank
	// before any rank can launch.
	if err = be.setupNVLS(ctx); err != nil {
		return nil, err
	}
	if err = b.Barrier(ctx); err != nil {
		return nil, fmt.Errorf("gpu backend: init barrier: %w", err)
	}
	be.log.Info("goccl: gpu backend ready", "rank", be.rank, "nranks", nranks, "device", cfg.Device,
		"transport", name, "algo", string(forced), "staging", staging, "copy_engines", be.ce.ok, "nvls", be.nv.ok)
	return be, nil
}

// openDevice resolves the device and retains its primary context.
func (be *Backend) openDevice(ordinal int) error {
	var err error
	if be.dev, err = be.drv.DeviceGet(ordinal); err != nil {
		return fmt.Errorf("gpu backend: device %d: %w", ordinal, err)
	}
	if be.ctx, err = be.drv.PrimaryCtxRetain(be.dev); err != nil {
		return fmt.Errorf("gpu backend: retain context of device %d: %w", ordinal, err)
	}
	if be.tune.pdl {
		major, err := be.drv.DeviceAttribute(be.dev, cuda.AttrComputeCapabilityMajor)
		be.pdl = err == nil && major >= 9
	}
	return nil
}

// setupLocal clears this rank's signal area, allocates the abort flag and
// loads the kernels: the steps of New that involve no peer.
func (be *Backend) setupLocal(image []byte, fuse string) error {
	drv, ws := be.drv, be.workspace
	// Signals and epochs start at zero on every rank before any peer can
	// signal: zero, wait, then a bootstrap barrier.
	if err := drv.MemsetD32Async(be.ctx, cuda.DevicePtr(ws.Local), 0, signalSize/4, 0); err != nil {
		return fmt.Errorf("gpu backend: clear signals: %w", err)
	}
	// The eager mailboxes too: a receiver takes an entry whose op number
	// reaches its op's as published.
	if n := eagerBytes(be.nranks); n > 0 {
		at := cuda.DevicePtr(ws.Local + signalSize + uintptr(be.p2p.eagerAt))
		if err := drv.MemsetD8Async(be.ctx, at, 0, n, 0); err != nil {
			return fmt.Errorf("gpu backend: clear the eager area: %w", err)
		}
	}
	if err := drv.CtxSynchronize(be.ctx); err != nil {
		return fmt.Errorf("gpu backend: clear signals: %w", err)
	}
	var err error
	if be.abortHost, err = drv.MemAllocHost(be.ctx, 64); err != nil {
		return fmt.Errorf("gpu backend: abort flag: %w", err)
	}
	atomic.StoreUint32((*uint32)(be.abortHost), 0)
	if be.abortDev, err = drv.MemHostGetDevicePointer(be.ctx, be.abortHost); err != nil {
		return fmt.Errorf("gpu backend: abort flag: %w", err)
	}
	if be.module, err = drv.ModuleLoadData(be.ctx, image); err != nil {
		return fmt.Errorf("gpu backend: load kernels: %w", err)
	}
	if err = be.fns.load(drv, be.ctx, be.module); err != nil {
		return err
	}
	if err = be.setupFuse(fuse); err != nil {
		return err
	}
	be.setupAllToAll()
	be.setupStampKernel()
	return be.setupStash()
}

// agreeInit tells every rank whether a rank-local step of New failed
// anywhere, so that all ranks fail it together: lerr is this rank's outcome.
func (be *Backend) agreeInit(ctx context.Context, step string, lerr error) error {
	fail, err := be.agreeStatus(ctx, step, lerr)
	switch {
	case err != nil:
		return errors.Join(lerr, fmt.Errorf("gpu backend: agree on %s: %w", step, err))
	case lerr != nil:
		return lerr
	case fail != nil:
		return &collectives.PeerError{Rank: fail.rank, Cause: fmt.Errorf("gpu backend %s: %s", fail.step, fail.text)}
	}
	return nil
}

// agreeTuning is one exchange in which every rank sends its tuning, or its
// GOCCL_TUNE error (lerr), and every rank fails when any rank's is bad or
// differs: a rank launching another grid or staging layout than its peers
// would wait forever.
func agreeTuning(ctx context.Context, b transport.Bootstrap, mine string, lerr error) error {
	msg := "T" + mine
	if lerr != nil {
		msg = "E" + lerr.Error()
	}
	all, err := b.AllGather(ctx, []byte(msg))
	switch {
	case err != nil:
		return errors.Join(lerr, fmt.Errorf("gpu backend: agree on tuning: %w", err))
	case lerr != nil:
		return lerr
	}
	for r, t := range all {
		if len(t) > 0 && t[0] == 'E' {
			return &collectives.PeerError{Rank: r, Cause: fmt.Errorf("gpu backend tuning: %s", t[1:])}
		}
		if string(t) != msg {
			return fmt.Errorf("gpu backend: rank %d has another %s or MaxBlocks (%q) than rank %d (%q): %w",
				r, EnvTune, t[min(1, len(t)):], b.Rank(), mine, collectives.ErrInvalidArgument)
		}
	}
	return nil
}

// chooseTransport: GOCCL_TRANSPORT (or cfg) forces; otherwise uva when every
// rank lives in one process, else vmm where every rank's GPU exports VMM
// memory as POSIX fds, else ipc (the rule of collectives.ChooseTransport).
// Decided from allgathered facts so that every rank agrees.
func chooseTransport(ctx context.Context, drv cuda.Driver, dev cuda.Device, b transport.Bootstrap, forced string, getenv func(string) string) (string, error) {
	if forced == "" {
		forced = getenv("GOCCL_TRANSPORT")
	}
	switch forced {
	case "uva", "ipc", "vmm":
		return forced, nil
	case "":
	default:
		return "", fmt.Errorf("gpu backend: GOCCL_TRANSPORT=%q: want uva, ipc or vmm: %w", forced, collectives.ErrInvalidArgument)
	}
	vmmOK := byte(1)
	for _, a := range []cuda.DeviceAttribute{cuda.AttrVirtualMemoryManagement, cuda.AttrHandleTypePosixFDSupported} {
		if v, err := drv.DeviceAttribute(dev, a); err != nil || v == 0 {
			vmmOK = 0
		}
	}
	pid := uint32(os.Getpid())
	all, err := b.AllGather(ctx, []byte{byte(pid), byte(pid >> 8), byte(pid >> 16), byte(pid >> 24), vmmOK})
	if err != nil {
		return "", fmt.Errorf("gpu backend: agree on transport: %w", err)
	}
	return pickTransport(all)
}

// pickTransport decides from every rank's facts: 4 bytes of pid, then 1
// when its GPU has VMM with POSIX fds.
func pickTransport(all [][]byte) (string, error) {
	onePID, allVMM := true, true
	for _, p := range all {
		if len(p) != 5 {
			return "", fmt.Errorf("gpu backend: agree on transport: malformed facts %x", p)
		}
		onePID = onePID && string(p[:4]) == string(all[0][:4])
		allVMM = allVMM && p[4] == 1
	}
	switch {
	case onePID:
		return "uva", nil
	case allVMM:
		return "vmm", nil
	}
	return "ipc", nil
}

// Abort makes running kernels bail out of their waits and every later Run
// fail with an error wrapping cause and collectives.ErrAborted. Copy-engine
// waits do not poll the abort flag: Abort releases them, best effort (see
// ce.go).
func (be *Backend) Abort(cause error) {
	if cause == nil {
		cause = errors.New("aborted")
	}
	err := fmt.Errorf("%w: %w", collectives.ErrAborted, cause)
	be.cause.CompareAndSwap(nil, &err)
	be.aborted.Store(true)
	be.abortMu.Lock()
	if be.abortHost != nil {
		atomic.StoreUint32((*uint32)(be.abortHost), 1)
	}
	be.abortMu.Unlock()
	be.rescueCE()
}

func (be *Backend) abortErr() error {
	if p := be.cause.Load(); p != nil {
		return *p
	}
	return collectives.ErrAborted
}

// Close waits for this rank's work, frees the workspace (collectively,
// through the transport), unloads the kernels and releases the context.
func (be *Backend) Close() error {
	be.mu.Lock()
	if be.closed {
		be.mu.Unlock()
		return nil
	}
	be.closed = true
	be.mu.Unlock()
	return be.release(context.Background())
}

// ErrStillRunning: Close found this rank's work still running after an
// abort, past abortDrain; the workspace, kernels and context are left in
// place (leaked) rather than freed under running work.
var ErrStillRunning = errors.New("gpu backend: work still running after the abort")

// abortDrain bounds Close's wait for this rank's work after an abort.
// Kernels leave their waits within 1024 spins of the abort flag, but a
// copy-engine stream wait (ce.go) may never be released if a peer died.
const abortDrain = 5 * time.Second

// drain waits for this rank's work: unbounded normally, at most timeout
// after an abort (the blocked cgo call is then left behind).
func (be *Backend) drain(timeout time.Duration) error {
	if !be.aborted.Load() {
		return be.drv.CtxSynchronize(be.ctx)
	}
	done := make(chan error, 1)
	go func() { done <- be.drv.CtxSynchronize(be.ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("%w after %s: its memory stays allocated", ErrStillRunning, timeout)
	}
}

func (be *Backend) release(ctx context.Context) error {
	var errs []error
	if be.ctx != 0 {
		// Peers may still read our staging and our kernels use it: they must
		// be done before the memory goes.
		if err := be.drain(be.abortDrain); err != nil {
			if errors.Is(err, ErrStillRunning) {
				return err
			}
			errs = append(errs, fmt.Errorf("gpu backend: synchronize: %w", err))
		}
	}
	be.mu.Lock()
	regs := be.regs
	be.regs = nil
	be.mu.Unlock()
	// Freeing is collective: every rank must take the registrations in the
	// same order, newest first as the transport drains its own, while the
	// table's order (by address) may differ between ranks.
	slices.SortFunc(regs, func(x, y *registration) int { return cmp.Compare(y.seq, x.seq) })
	for _, r := range regs {
		if err := r.free(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, be.releaseCE()...)
	errs = append(errs, be.releaseFuse()...)
	errs = append(errs, be.releaseZC()...)
	for _, e := range []*cuda.Event{&be.p2p.evIn, &be.p2p.evOut} {
		if *e != 0 {
			if err := be.drv.EventDestroy(be.ctx, *e); err != nil {
				errs = append(errs, fmt.Errorf("gpu backend: destroy point-to-point event: %w", err))
			}
			*e = 0
		}
	}
	// The multicast team goes before the workspace and the transport.
	if err := be.closeNVLS(ctx); err != nil {
		errs = append(errs, err)
	}
	if be.workspace != nil {
		if err := be.mapper.Free(ctx, be.workspace); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: free workspace: %w", err))
		}
		be.workspace = nil
	}
	if be.mapper != nil {
		if err := be.mapper.Close(); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: close transport: %w", err))
		}
		be.mapper = nil
	}
	if be.module != 0 {
		if err := be.drv.ModuleUnload(be.ctx, be.module); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: unload kernels: %w", err))
		}
		be.module = 0
	}
	if err := be.releaseStamps(); err != nil {
		errs = append(errs, err)
	}
	be.abortMu.Lock()
	if be.abortHost != nil {
		if err := be.drv.MemFreeHost(be.ctx, be.abortHost); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: free abort flag: %w", err))
		}
		be.abortHost = nil
	}
	be.abortMu.Unlock()
	if be.ctx != 0 {
		if err := be.drv.PrimaryCtxRelease(be.dev); err != nil {
			errs = append(errs, fmt.Errorf("gpu backend: release context: %w", err))
		}
		be.ctx = 0
	}
	return errors.Join(errs...)
}
