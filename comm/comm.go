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
	boot                          *tcpBootstrap
	log                           *slog.Logger
	check                         bool

	callMu sync.Mutex
	args   collectives.Args // reused so that a call does not allocate
	seq    uint64           // calls every rank makes, numbered alike; under callMu

	groupMu sync.Mutex        // guards group
	group   collectives.Group // reused by the one-call groups (Send, AllToAll, ...)

	rec *recorder.Ring // the flight recorder; nil when off
	obs *observer      // its files and registration (record.go)

	abortErr  atomic.Pointer[error]
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
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
func (c *Comm) Err() error {
	if p := c.abortErr.Load(); p != nil {
		return *p
	}
	if c.closed.Load() {
		return fmt.Errorf("rank %d: %w", c.rank, collectives.ErrClosed)
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
	if err := c.Err(); err != nil {
		return err
	}
	// A context that ended before the call launches nothing and leaves the
	// communicator as it was.
	if err := ctx.Err(); err != nil {
		return err
	}
	c.callMu.Lock()
	defer c.callMu.Unlock()
	a := &c.args
	*a = collectives.Args{Coll: coll, Send: send, Recv: recv, Count: count, Type: dt, Op: op, Root: root, Stream: stream}
	err := a.Validate(c.rank, c.size)
	if c.check {
		err = c.checkCall(ctx, a, err)
	}
	if err != nil {
		if ab := c.Err(); ab != nil {
			return ab
		}
		return err
	}
	// Valid calls take numbers, count-0 ones too: a rank that skips a call
	// then meets its peers in a call of another number, which the backend
	// detects.
	c.seq++
	a.Seq = c.seq
	id := c.rec.Begin(a)
	err = c.backend.Run(ctx, a)
	c.rec.End(id, err)
	if err != nil {
		return c.runFailed(ctx, err)
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
	fatal := errors.Is(err, collectives.ErrAborted) || errors.Is(err, collectives.ErrTimeout)
	// This rank's own wait for a peer timed out: first-hand evidence, told
	// to the others naming that peer.
	var pe *collectives.PeerError
	ownTimeout := errors.As(err, &pe) && pe.Rank != c.rank && errors.Is(err, collectives.ErrTimeout) && !errors.Is(err, collectives.ErrAborted)
	if fatal && !ownTimeout && c.abortErr.Load() == nil && ctx.Err() == nil && !c.closed.Load() {
		t := time.NewTimer(causeWait)
		select {
		case <-c.boot.failed:
			if f := c.boot.failure(); f != nil {
				c.setAborted(f)
			}
		case <-t.C:
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
		if ownTimeout {
			c.boot.blame(pe.Rank, timeoutCause(pe.Cause))
		}
		// The bootstrap's failure (blame's, or one recorded meanwhile)
		// names the rank at fault; otherwise this failure is the cause.
		if f := c.boot.failure(); f != nil {
			c.setAborted(f)
		}
		if c.setAborted(err) && !ownTimeout {
			c.boot.abort(err, err.Error())
		}
		return *c.abortErr.Load()
	}
	return err
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
// from Alloc. Close the registration (collectively) before freeing the
// memory. ErrNotSupported when the backend cannot.
func (c *Comm) Register(ctx context.Context, ptr uintptr, size uint64) (Registration, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	r, ok := c.backend.(collectives.Registrar)
	if !ok {
		return nil, fmt.Errorf("Register: %w (%s)", ErrNotSupported, c.backendName)
	}
	return r.Register(ctx, ptr, size)
}

// Alloc allocates registered device memory; collective. ErrNotSupported
// when the backend cannot.
func (c *Comm) Alloc(ctx context.Context, size uint64) (uintptr, Registration, error) {
	if err := c.Err(); err != nil {
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
