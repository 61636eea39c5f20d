package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
)

// backend is one rank's host backend.
type backend struct {
	rank, n int
	cfg     Config
	algo    collectives.Algorithm // forced, or "" for by size

	seg       *shm.Segment
	seq       [2][]*uint32  // seq[p][r]: rank r's step counter for parity p
	waiters   []*uint32     // every rank's sleeper count
	abortWord *uint32       // rank 0's abort word, the job's
	desc      [2][][]byte   // desc[p][r]: rank r's call descriptor for parity p
	box       [2][][]byte   // box[p][r]: the data area of rank r's box p
	stage     [2][][]byte   // stage[p][r]: rank r's staging half p
	step      uint32        // the last step this rank arrived at
	spins     int           // busy polls before yielding (0 when oversubscribed)
	napFor    time.Duration // goroutine naps before futex sleeps (ranks sharing a process)
	spinLeft  time.Duration // spinWait's budget now, adapted to how waits end (sync.go)
	boxLines  int           // lines of box data after the counter's the current wait touches
	sink      uint32        // where spinTouching's loads go

	last collectives.Path // how the last call went (LastPath)

	// Shared-memory buffers (alloc.go, direct.go); under mu.
	boot     transport.Bootstrap
	allocs   []*allocation
	allocSeq uint64
	descFlag byte       // the descriptor's flag byte of the call's first sync
	dwords   [][]uint64 // dwords[q]: rank q's published buffer places
	dsend    []uintptr  // every rank's send buffer, as mapped here
	drecv    []uintptr  // every rank's receive buffer
	dtmp     []byte     // a reduced chunk on its way to every rank
	dptrs    []uintptr  // a call's outputs then sources, offset to this rank's part
	dmul     []premul   // PreMulSum: every rank's scalar (direct.go)
	dscaled  []byte     // PreMulSum: every rank's chunk, scaled

	srcs []([]byte) // reused list of reduction sources
	sc   scratch
	p2p  pairs // point-to-point channels (p2p.go); under mu
	cma  *cma  // single-copy large calls (cma.go); nil when off

	mu       runLock    // one Run at a time; Close waits for it
	amu      sync.Mutex // guards shared-memory writes of fail against Close
	unmapped bool       // under amu
	closed   atomic.Bool
	failure  atomic.Pointer[error]
}

// New builds the host backend for this rank: it agrees on the
// configuration with every rank, then maps every rank's shared segment
// (control words plus two staging halves). It is collective.
func New(ctx context.Context, b transport.Bootstrap, cfg Config) (collectives.Backend, error) {
	rank, n := b.Rank(), b.Size()
	if n < 1 || rank < 0 || rank >= n {
		return nil, fmt.Errorf("%w: rank %d of %d", collectives.ErrInvalidArgument, rank, n)
	}
	if len(cfg.Nodes) > 0 && spansNodes(cfg.Nodes) {
		return newMulti(ctx, b, cfg)
	}
	cfg, err := agreeConfig(ctx, b, cfg)
	if err != nil {
		return nil, err
	}
	spins, napFor, err := waitPolicy(ctx, b)
	if err != nil {
		return nil, err
	}
	xma, err := cmaSetup(ctx, b, cfg)
	if err != nil {
		return nil, err
	}
	half := cfg.StagingBytes
	seg, err := shm.Map(ctx, b, ctrlBytes+2*half+p2pBytes(half, n))
	if err != nil {
		return nil, err
	}
	be := &backend{
		rank: rank, n: n, cfg: cfg, algo: collectives.Algorithm(cfg.Algo), seg: seg,
		waiters: make([]*uint32, n),
		srcs:    make([][]byte, n), spins: spins, napFor: napFor, cma: xma, boot: b,
		dwords: make([][]uint64, n),
	}
	for p := 0; p < 2; p++ {
		be.seq[p] = make([]*uint32, n)
		be.desc[p] = make([][]byte, n)
		be.box[p] = make([][]byte, n)
		be.stage[p] = make([][]byte, n)
	}
	for r := 0; r < n; r++ {
		m := seg.Peer(r)
		be.waiters[r] = word(m, offWaiters)
		be.dwords[r] = as[uint64](m[offDirect : offDirect+directWords*8])
		for p := 0; p < 2; p++ {
			box := m[offBox+p*boxStride : offBox+(p+1)*boxStride]
			be.seq[p][r] = word(box, boxCounter)
			be.desc[p][r] = box[boxDesc : boxDesc+descBytes]
			be.box[p][r] = box[boxHead:]
			be.stage[p][r] = m[ctrlBytes+p*half : ctrlBytes+(p+1)*half]
		}
	}
	be.abortWord = word(seg.Peer(0), offAbort)
	be.initPairs(ctrlBytes + 2*half)
	if xma != nil {
		xma.attach(seg.Peer)
	}
	algo := cfg.Algo
	if algo == "" {
		algo = fmt.Sprintf("by size: oneshot up to %d B, twoshot above", cfg.OneShotMax)
	}
	wait := "spin, then nap, then futex"
	switch {
	case spins == 0 && napFor == 0:
		wait = "futex at once (more ranks than CPUs)"
	case spins == 0:
		wait = "nap, then futex (more ranks than CPUs)"
	}
	cfg.Logger.Info("goccl: host backend ready", "rank", rank, "nranks", n,
		"transport", "shm to every peer (memfd mapped by each rank)", "algo", algo,
		"staging", fmt.Sprintf("2 x %d B per rank", half), "large calls", xma.describe(), "wait", wait, "timeout", cfg.Timeout)
	return be, nil
}

// waitPolicy decides how this rank waits for peers. Spinning pays only
// while every rank has a CPU to itself; with more ranks than CPUs a spinner
// steals the time its peer needs. Goroutine naps keep the Ps of ranks that
// share this process running; a rank alone in its process sleeps on the
// futex at once, which wakes far sooner than a timer nap.
func waitPolicy(ctx context.Context, b transport.Bootstrap) (spins int, napFor time.Duration, err error) {
	pids, err := b.AllGather(ctx, binary.LittleEndian.AppendUint32(nil, uint32(os.Getpid())))
	if err != nil {
		return 0, 0, fmt.Errorf("exchange pids: %w", err)
	}
	same := 0
	for _, p := range pids {
		if len(p) == 4 && binary.LittleEndian.Uint32(p) == uint32(os.Getpid()) {
			same++
		}
	}
	spins = spinLoads
	if len(pids) > runtime.NumCPU() {
		spins = 0
	}
	if same > 1 {
		napFor = napPhase
	}
	return spins, napFor, nil
}

// Run executes one collective synchronously. Every rank must make the same
// calls in the same order (a mismatch of collective, count, type, op or
// root is detected and reported by every rank).
func (b *backend) Run(ctx context.Context, a *collectives.Args) error {
	if err := a.Validate(b.rank, b.n); err != nil {
		return err
	}
	return b.RunChecked(ctx, a)
}

// RunChecked is Run for a caller that has run a.Validate with this rank
// and size itself (the communicator, on every call).
func (b *backend) RunChecked(ctx context.Context, a *collectives.Args) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return fmt.Errorf("host backend: rank %d: %w", b.rank, collectives.ErrClosed)
	}
	if err := b.interrupted(ctx); err != nil {
		return err
	}
	if a.Count == 0 {
		return nil
	}
	b.last = collectives.Path{Transport: "shm"}
	// The direct path scales PreMulSum's inputs itself, chunk by chunk.
	if b.n > 1 && b.directProbes(a) {
		if took, err := b.runDirect(ctx, a); took || err != nil {
			return err
		}
	}
	a = scaledArgs(&b.sc.mul, a, b.n)
	if b.n == 1 {
		b.single(a)
		return nil
	}
	if b.cmaTakes(a) {
		return b.runCMA(ctx, a)
	}
	if a.Coll == collectives.AllReduce || a.Coll == collectives.Reduce {
		b.last.Algo = collectives.TwoShot
		if b.oneShot(a) {
			b.last.Algo = collectives.OneShot
		}
	}
	switch a.Coll {
	case collectives.AllReduce:
		if b.oneShot(a) {
			return b.allReduceOneShot(ctx, a, true)
		}
		return b.allReduceTwoShot(ctx, a, true)
	case collectives.Reduce:
		if b.oneShot(a) {
			return b.allReduceOneShot(ctx, a, false)
		}
		return b.allReduceTwoShot(ctx, a, false)
	case collectives.Broadcast:
		return b.broadcast(ctx, a)
	case collectives.AllGather:
		return b.allGather(ctx, a)
	case collectives.ReduceScatter:
		return b.reduceScatter(ctx, a)
	}
	return fmt.Errorf("%w: %d", collectives.ErrUnknownCollective, a.Coll)
}

func (b *backend) oneShot(a *collectives.Args) bool {
	switch b.algo {
	case collectives.OneShot:
		return true
	case collectives.TwoShot:
		return false
	}
	return a.Count*a.Type.Size() <= b.cfg.OneShotMax
}

// LastPath implements collectives.PathTeller: shared memory, and for
// AllReduce and Reduce the algorithm the size chose.
func (b *backend) LastPath() collectives.Path { return b.last }

// single is every collective on one rank: a copy unless in place.
func (b *backend) single(a *collectives.Args) {
	n := a.Count * a.Type.Size()
	copy(hostBytes(a.Recv, n), hostBytes(a.Send, n))
}

// Abort makes every current and future wait of this rank, and of every
// peer, return an error wrapping cause (and ErrAborted).
func (b *backend) Abort(cause error) {
	if cause == nil {
		cause = errors.New("aborted by the caller")
	}
	if !errors.Is(cause, collectives.ErrAborted) {
		cause = fmt.Errorf("host: rank %d: %w: %w", b.rank, collectives.ErrAborted, cause)
	}
	b.fail(cause)
}

// Close unmaps every segment. A Run still in progress on another
// goroutine is aborted first (its peers too: this rank will not finish it)
// and waited for. Peers keep their own mappings, so closing one rank never
// faults another.
func (b *backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	if !b.mu.TryLock() {
		b.Abort(fmt.Errorf("rank %d closed its communicator during a collective: %w", b.rank, collectives.ErrClosed))
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	b.amu.Lock()
	defer b.amu.Unlock()
	b.unmapped = true
	if err := errors.Join(b.seg.Close(), b.closeAllocs()); err != nil {
		return fmt.Errorf("host backend: %w", err)
	}
	return nil
}
