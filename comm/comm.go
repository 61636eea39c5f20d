package comm

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
	"github.com/goccl/goccl/recorder"
	"github.com/goccl/goccl/transport"
)

// Comm is one rank's communicator. Collectives on one Comm are issued from
// one goroutine at a time (as NCCL's); Abort may be called from any
// goroutine at any time.
type Comm struct {
	rank, size, localRank, device int
	backendName                   string
	backend                       collectives.Backend
	checked                       checkedRunner // the backend's Run without the checks run made; nil: none
	boot                          *tcpBootstrap
	log                           *slog.Logger
	check                         bool
	set                           settings     // what Split and Shrink children inherit
	rescue                        *rescuePoint // where Shrink finds the survivors (shrink.go)

	// A call holds the call gate (callgate.go) while it runs.
	args  collectives.Args // reused so that a call does not allocate
	seq   uint64           // calls every rank makes, numbered alike; under the gate
	inP2P bool             // the call under way has Sends or Recvs; under the gate

	barrierWord uint64 // Barrier's one-element in-place AllReduce, on the heap with the Comm

	opsMu sync.Mutex // guards ops
	ops   []opEntry  // CreatePreMulSum's handles, by handle - firstOpHandle

	groupMu sync.Mutex        // guards group
	group   collectives.Group // reused by the one-call groups (Send, AllToAll, ...)

	rec *recorder.Ring // the flight recorder; nil when off
	obs *observer      // its files and registration (record.go)

	abortErr atomic.Pointer[error]
	// explainedAbort is the abort's error with the flight recorder's line
	// (record.go), which every later call returns too.
	explainedAbort atomic.Pointer[explained]
	// entryExplained: a call's entry has explained an abort it found
	// (callErr), which no later entry repeats.
	entryExplained atomic.Bool
	closed         atomic.Bool
	closeOnce      sync.Once
	closeErr       error
}

// Rank is this communicator's rank.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// LocalRank is the rank among the ranks of this node.
func (c *Comm) LocalRank() int { return c.localRank }

// Device is the CUDA device ordinal (-1 for the host backend unless set).
func (c *Comm) Device() int { return c.device }

// BackendName is "host", "gpu", or the name a custom factory was given.
func (c *Comm) BackendName() string { return c.backendName }

// Bootstrap gives the out-of-band channel for small messages (tools such
// as bench exchange results through it). Do not use it concurrently with
// collectives under GOCCL_CHECK.
func (c *Comm) Bootstrap() transport.Bootstrap { return c.boot }

// PIDs gives every rank's process id (for launchers' and tools' reports).
func (c *Comm) PIDs() []int32 { return c.boot.PIDs() }

// Err reports why the communicator is unusable: nil while healthy, an
// error wrapping ErrAborted (naming the failed rank) or ErrClosed.
func (c *Comm) Err() error { return c.apiErr(c.state()) }

// callErr is Err for a call about to begin: after an abort that no call
// of this rank met (it came between calls), the first such call explains
// it from the flight records as a failed call would, and every later one
// returns that.
func (c *Comm) callErr(ctx context.Context) error {
	if p := c.abortErr.Load(); p != nil && c.rec != nil && c.explainedAbort.Load() == nil && c.entryExplained.CompareAndSwap(false, true) {
		return c.apiErr(c.explainFailure(ctx, *p, *p))
	}
	return c.Err()
}

// state is Err without the API's prefix.
func (c *Comm) state() error {
	if p := c.abortErr.Load(); p != nil {
		if e := c.explainedAbort.Load(); e != nil {
			return e
		}
		return *p
	}
	if c.closed.Load() {
		return collectives.ErrClosed
	}
	return nil
}

// AllReduce reduces count elements of every rank's send buffer with op
// into every rank's recv buffer.
func (c *Comm) AllReduce(ctx context.Context, send, recv uintptr, count int, dt DataType, op Op, stream uintptr) error {
	return c.run(ctx, collectives.AllReduce, send, recv, count, dt, op, 0, stream)
}

// Broadcast copies root's count elements to every rank's recv buffer.
func (c *Comm) Broadcast(ctx context.Context, send, recv uintptr, count int, dt DataType, root int, stream uintptr) error {
	return c.run(ctx, collectives.Broadcast, send, recv, count, dt, collectives.Sum, root, stream)
}

// Reduce reduces every rank's count elements with op into root's recv.
func (c *Comm) Reduce(ctx context.Context, send, recv uintptr, count int, dt DataType, op Op, root int, stream uintptr) error {
	return c.run(ctx, collectives.Reduce, send, recv, count, dt, op, root, stream)
}

// AllGather concatenates every rank's sendcount elements, in rank order,
// into every rank's recv buffer (sendcount*Size elements).
func (c *Comm) AllGather(ctx context.Context, send, recv uintptr, sendcount int, dt DataType, stream uintptr) error {
	return c.run(ctx, collectives.AllGather, send, recv, sendcount, dt, collectives.Sum, 0, stream)
}

// ReduceScatter reduces every rank's recvcount*Size elements with op and
// leaves block r of the result in rank r's recv buffer.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv uintptr, recvcount int, dt DataType, op Op, stream uintptr) error {
	return c.run(ctx, collectives.ReduceScatter, send, recv, recvcount, dt, op, 0, stream)
}

func (c *Comm) run(ctx context.Context, coll collectives.Collective, send, recv uintptr, count int, dt DataType, op Op, root int, stream uintptr) error {
	return c.apiErr(c.runCall(ctx, coll, send, recv, count, dt, op, root, stream))
}

func (c *Comm) runCall(ctx context.Context, coll collectives.Collective, send, recv uintptr, count int, dt DataType, op Op, root int, stream uintptr) error {
	if err := c.callErr(ctx); err != nil {
		return err
	}
	// Every call takes a number, also one that launches nothing (count 0,
	// arguments this rank rejects, a context that ended before it): a rank
	// whose call went nowhere then meets its peers in a call of another
	// number, which the backend detects on every rank, where it would
	// otherwise pair its next call with their current one. Ranks that all
	// reject a call (GOCCL_CHECK, or the same bad arguments) stay in step.
	c.enterCall(1)
	defer c.leaveCall()
	// A context that ended before the call launches nothing and leaves the
	// communicator usable.
	if err := ctx.Err(); err != nil {
		return err
	}
	a := &c.args
	*a = collectives.Args{Coll: coll, Send: send, Recv: recv, Count: count, Type: dt, Op: op, Root: root, Stream: stream, Seq: c.seq}
	err := c.resolveOp(a)
	if err == nil {
		err = a.Validate(c.rank, c.size)
	}
	if c.check {
		err = c.checkCall(ctx, a, err)
	}
	if err != nil {
		if ab := c.Err(); ab != nil {
			return ab
		}
		return err
	}
	if c.log.Enabled(ctx, LevelTrace) {
		c.trace(ctx, a)
	}
	id := c.rec.Begin(a)
	if err := c.closedBefore(a.Seq); err != nil {
		// Recorded as entered and failed: a peer's explanation then
		// finds this rank in the call, not short of it.
		c.rec.End(id, err)
		return c.runFailed(ctx, err)
	}
	if c.checked != nil {
		err = c.checked.RunChecked(ctx, a)
	} else {
		err = c.backend.Run(ctx, a)
	}
	c.endRecord(id, err)
	if err != nil {
		return c.runFailed(ctx, err)
	}
	return nil
}

// checkedRunner is a backend that can skip the argument checks run has
// just made (Args.Validate against this rank and size): at a few hundred
// nanoseconds a call, running them twice shows.
type checkedRunner interface {
	RunChecked(ctx context.Context, a *collectives.Args) error
}

// trace logs one call at GOCCL_DEBUG=TRACE (kept out of run so that the
// disabled path allocates nothing).
func (c *Comm) trace(ctx context.Context, a *collectives.Args) {
	c.log.Log(ctx, LevelTrace, "goccl: call", "rank", c.rank, "seq", a.Seq, "coll", a.Coll.String(),
		"count", a.Count, "type", a.Type.String(), "op", a.Op.String(), "root", a.Root,
		"send", fmt.Sprintf("%#x", a.Send), "recv", fmt.Sprintf("%#x", a.Recv), "stream", fmt.Sprintf("%#x", a.Stream))
}

// closedBefore fails call seq at once when a peer closed its communicator
// after fewer calls: that peer will never join it. One atomic load while
// no peer has closed. (A backend that implements collectives.PeerCloser
// also ends the waits of a call already under way.)
func (c *Comm) closedBefore(seq uint64) error {
	if !c.boot.anyClosed.Load() {
		return nil
	}
	for r := 0; r < c.size; r++ {
		if n, ok := c.boot.closedCalls(r); ok && r != c.rank && seq > n {
			return &collectives.PeerError{Rank: r, Cause: fmt.Errorf("%w before call #%d", collectives.ErrPeerClosed, seq)}
		}
	}
	return nil
}

// causeWait bounds how long a rank whose backend stopped on a job-wide
// abort waits for the bootstrap to say why. The backends share an abort
// flag, so a survivor often sees a peer's abort before the bootstrap
// delivers the failure that caused it (a dead rank's closed connection
// relayed by rank 0, a peer's Abort): waiting for it lets every survivor
// name the rank at fault rather than the survivor that noticed first. The
// cause normally arrives within milliseconds.
const causeWait = 2 * time.Second

// runFailed turns a backend's failure into the communicator's: an abort
// reported by the bootstrap wins; a failure that starts here (a backend
// timeout, the caller's context ending mid-collective) aborts the
// communicator and is told to the other ranks, whose backends were stopped
// by it and wait for its cause.
func (c *Comm) runFailed(ctx context.Context, err error) (ret error) {
	defer func() { ret = c.explainFailure(ctx, err, ret) }()
	// This rank's own wait for a peer timed out, or found it closed:
	// first-hand evidence, told to the others naming that peer.
	var pe *collectives.PeerError
	peerErr := errors.As(err, &pe) && pe.Rank != c.rank && !errors.Is(err, collectives.ErrAborted)
	ownTimeout := peerErr && errors.Is(err, collectives.ErrTimeout)
	peerClosed := peerErr && errors.Is(err, collectives.ErrPeerClosed)
	firstHand := ownTimeout || peerClosed
	fatal := errors.Is(err, collectives.ErrAborted) || errors.Is(err, collectives.ErrTimeout) || peerClosed
	if fatal && !firstHand && c.abortErr.Load() == nil && ctx.Err() == nil && !c.closed.Load() {
		// The rank the backend names may be one that closed cleanly (a
		// peer that found it so stopped the backends): that is the cause.
		var named *collectives.PeerError
		errors.As(err, &named)
		t := time.NewTimer(causeWait)
	wait:
		for {
			if named != nil && named.Rank != c.rank && c.boot.hasClosed(named.Rank) {
				pe, peerClosed, firstHand = named, true, true
				break
			}
			select {
			case <-c.boot.failed:
				if f := c.boot.failure(); f != nil {
					c.setAborted(f)
				}
				break wait
			case <-c.boot.closedSig:
			case <-t.C:
				break wait
			}
		}
		t.Stop()
	}
	if ab := c.abortErr.Load(); ab != nil {
		if errors.Is(err, collectives.ErrAborted) {
			return *ab
		}
		return fmt.Errorf("%w (%v)", *ab, err)
	}
	if fatal {
		d, stalled := c.boot.stalled()
		switch {
		case ownTimeout && stalled:
			// This rank itself did not run: its wait outlived the timeout
			// because it slept through it, not because of the peer.
			c.boot.selfStalled(d, err)
		case ownTimeout:
			c.boot.blame(pe.Rank, timeoutCause(pe.Cause))
		case peerClosed:
			c.boot.blame(pe.Rank, c.closedCause(pe.Rank))
		}
		if firstHand {
			// A failure recorded concurrently (a peer's notice of the same
			// fault) may still be telling the others: wait for it.
			t := time.NewTimer(causeWait)
			select {
			case <-c.boot.failed:
			case <-t.C:
			}
			t.Stop()
		}
		// The bootstrap's failure (blame's, or one recorded meanwhile)
		// names the rank at fault; otherwise this failure is the cause.
		if f := c.boot.failure(); f != nil {
			c.setAborted(f)
		}
		if c.setAborted(err) && !firstHand {
			c.boot.abort(err, err.Error())
		}
		return *c.abortErr.Load()
	}
	return err
}

// closedCause says that peer r closed cleanly while this rank still has
// a call that needs it, with both call numbers where known. ErrPeerClosed's
// text comes first so that it survives the failure notice.
func (c *Comm) closedCause(r int) error {
	cur := c.boot.callCount()
	// The backend may see the close (through shared memory) before the
	// goodbye that says after how many calls reaches this rank.
	n, ok := c.boot.closedCalls(r)
	for i := 0; !ok && i < 100; i++ {
		time.Sleep(time.Millisecond)
		n, ok = c.boot.closedCalls(r)
	}
	if c.inP2P {
		// Point-to-point calls take no number: say what this rank waits in.
		return fmt.Errorf("%w while rank %d waits for it in Sends or Recvs (rank %d had made %d numbered calls, rank %d %d)",
			collectives.ErrPeerClosed, c.rank, r, n, c.rank, cur)
	}
	switch {
	case ok && n >= cur:
		// It made this call too, but returned without waiting for us.
		return fmt.Errorf("%w after call #%d, with calls still outstanding on other ranks (rank %d is in call #%d, "+
			"which rank %d left at once: a count of 0 or arguments rejected on that rank only?)", collectives.ErrPeerClosed, n, c.rank, cur, r)
	case ok:
		return fmt.Errorf("%w after call #%d, with calls still outstanding on other ranks (rank %d is in call #%d)", collectives.ErrPeerClosed, n, c.rank, cur)
	}
	return fmt.Errorf("%w, with calls still outstanding on other ranks (rank %d is in call #%d)", collectives.ErrPeerClosed, c.rank, cur)
}

// onPeerClosed is the bootstrap's goodbye handler: the backend ends the
// waits that rank r left unmet (see collectives.PeerCloser).
func (c *Comm) onPeerClosed(r int) {
	if pc, ok := c.backend.(collectives.PeerCloser); ok {
		pc.PeerClosed(r)
	}
}

// timeoutCause puts ErrTimeout's text first so that it survives the
// bootstrap's failure notice (see remoteCause).
func timeoutCause(cause error) error {
	detail := strings.TrimSuffix(cause.Error(), ": "+collectives.ErrTimeout.Error())
	return fmt.Errorf("%w: %s", collectives.ErrTimeout, detail)
}

// Register makes [ptr, ptr+size) readable by peers for zero-copy
// collectives; collective: every rank registers its copy of the buffer,
// with the same size. On GPUs ptr may be any cuMemAlloc memory, or memory
// from Alloc. On the host backend a registration of memory not from Alloc
// enables nothing (another process cannot map private memory; calls on it
// take the ordinary path, as NCCL falls back silently): use Alloc or
// AllocSlice there. Close the registration (collectively) before freeing
// the memory. ErrNotSupported when the backend cannot.
func (c *Comm) Register(ctx context.Context, ptr uintptr, size uint64) (Registration, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	r, ok := c.backend.(collectives.Registrar)
	if !ok {
		return nil, c.apiErr(fmt.Errorf("Register: %w (%s)", ErrNotSupported, c.backendName))
	}
	reg, err := r.Register(ctx, ptr, size)
	return c.apiReg(reg), c.apiErr(err)
}

// Alloc allocates registered memory; collective: every rank asks for the
// same size. On GPUs it is device memory; on the host backend it is
// shared memory every rank of the node maps, zeroed, and calls whose
// buffers lie inside such allocations on every rank skip the staging
// copy (AllocSlice gives it as a Go slice); across nodes every rank gets
// memory its node's ranks map. The memory is valid until the
// registration is closed (collectively) or the communicator is.
// ErrNotSupported when the backend cannot.
func (c *Comm) Alloc(ctx context.Context, size uint64) (uintptr, Registration, error) {
	p, reg, err := c.alloc(ctx, size)
	return p, c.apiReg(reg), c.apiErr(err)
}

// alloc is Alloc with the error not yet given the API's prefix, for
// AllocSlice, which puts its own text before it.
func (c *Comm) alloc(ctx context.Context, size uint64) (uintptr, Registration, error) {
	if err := c.state(); err != nil {
		return 0, nil, err
	}
	r, ok := c.backend.(collectives.Registrar)
	if !ok {
		return 0, nil, fmt.Errorf("Alloc: %w (%s)", ErrNotSupported, c.backendName)
	}
	return r.Alloc(ctx, size)
}

// Abort stops the communicator: every wait in progress and every later
// call returns an error wrapping ErrAborted and cause, and the other ranks
// learn that this rank aborted. Safe from any goroutine, any number of
// times; the first cause wins. Close must still be called.
func (c *Comm) Abort(cause error) {
	if cause == nil {
		cause = errors.New("aborted by the application")
	}
	err := fmt.Errorf("%w by rank %d: %w", collectives.ErrAborted, c.rank, cause)
	if c.setAborted(err) {
		c.boot.abort(err, "called Abort: "+cause.Error())
	}
}

// onPeerFailure is the bootstrap's failure handler.
func (c *Comm) onPeerFailure(err error) { c.setAborted(err) }

// setAborted records err and aborts the backend; first caller wins.
func (c *Comm) setAborted(err error) bool {
	if !errors.Is(err, collectives.ErrAborted) {
		err = fmt.Errorf("%w: %w", collectives.ErrAborted, err)
	}
	if !c.abortErr.CompareAndSwap(nil, &err) {
		return false
	}
	c.backend.Abort(err)
	c.recordAbort(err)
	return true
}

// Close releases everything: the backend (collective on healthy
// communicators), sockets and goroutines. After Abort it does not wait for
// peers. Safe to call more than once.
func (c *Comm) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.stopRecorder()
		berr := c.backend.Close()
		c.boot.Close()
		if berr != nil {
			c.closeErr = fmt.Errorf("goccl: rank %d: closing the %s backend: %w", c.rank, c.backendName, berr)
		}
	})
	return c.closeErr
}
