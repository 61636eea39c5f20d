package host

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
)

// Ranks synchronize in steps. Each rank owns two boxes in its own
// segment, one per step parity, each a step counter, the call's
// descriptor and a small data area in cache lines of their own; arriving
// at step s stores s in the counter of box s&1, and waiting for step s
// reads every peer's counter of box s&1 until it reaches s. A rank
// therefore never runs more than one step ahead of any peer, which is
// what makes staging reuse safe: data written for step s lives in the box
// and the staging half of parity s&1, peers read it only between waiting
// for s and arriving at s+1, and the writer touches them again only at
// step s+2, after waiting for s+1, by when every peer has finished
// reading.
//
// The counter, the descriptor and the first bytes of data share one cache
// line, written last to first: a peer that sees the counter has the
// descriptor and a small call's data in the same transfer, so that a
// small call costs one line's trip between the ranks' caches each way.
//
// Waiting spins (a rank alone in its process, with a CPU per rank, for up
// to spinFor), then yields, then naps with growing sleeps (parking only
// the goroutine, so ranks sharing a process keep their Ps), and after
// napPhase sleeps on a futex of the peer's counter: the arriving rank wakes
// sleepers only when its waiter count says there are any, so the fast
// path makes no system call. Every sleep is bounded so that abort flags,
// the context and the deadline are polled.

const (
	offWaiters = 64   // how many peers sleep on this rank's counters
	offAbort   = 128  // rank 0's is the job's: 1 + the rank that aborted
	offClosed  = 320  // nonzero once this rank has closed its communicator
	offBox     = 2048 // the two boxes, by step parity (1024-2047 is p2p.go's)
	boxStride  = 1024
	boxCounter = 0  // in a box: the step counter (futex word)
	boxDesc    = 8  // the call's descriptor (descBytes)
	boxHead    = 32 // the data, from here to the box's end
	boxData    = boxStride - boxHead
	ctrlBytes  = 4096

	spinLoads  = 4096 // polls before the clock is first read: a small call's whole wait
	yieldLoops = 64
	// spinFor bounds the busy wait of a rank alone in its process on a
	// machine with a CPU per rank: a small call's peer normally arrives
	// within a microsecond, and a futex wake-up costs several, far more on
	// a busy machine. The wait polls without yielding, as MPI's does: two
	// ranks that yield to each other can settle into taking turns on one
	// CPU, which the OS then never spreads over two, and every call pays
	// two context switches; ranks that stay runnable get a CPU each. A
	// few hundred microseconds are enough for that, and bound what a wait
	// on a peer that really shares this CPU costs before it sleeps.
	spinFor = 300 * time.Microsecond
	// minSpin is the least spinWait's budget falls to: ranks that end up
	// taking turns on one CPU of a busy machine pay about twice it per
	// call on top of two context switches.
	minSpin = 1 * time.Microsecond
	// yieldFor bounds the phase after the budget, polling with an OS yield
	// between rounds: a peer waiting for this CPU then runs at once, for
	// the price of two context switches rather than a futex wake-up.
	yieldFor  = time.Millisecond
	pollRound = 256 // loads between clock reads while spinning
	maxSleep  = 20 * time.Millisecond
	minNap    = 2 * time.Microsecond
	maxNap    = 100 * time.Microsecond
	napPhase  = 5 * time.Millisecond

	futexWaitOp = 0 // FUTEX_WAIT, from linux/futex.h
	futexWakeOp = 1 // FUTEX_WAKE
)

// reached reports whether counter value v has reached step s, modulo
// 2^32 (counters wrap after four billion steps).
func reached(v, s uint32) bool { return int32(v-s) >= 0 }

// barrier advances this rank to the next step and waits for every peer
// to arrive there too.
func (b *backend) barrier(ctx context.Context) error {
	b.step++
	s := b.step
	seq := b.seq[s&1]
	atomic.StoreUint32(seq[b.rank], s)
	if atomic.LoadUint32(b.waiters[b.rank]) != 0 {
		futexWake(seq[b.rank])
	}
	for q, w := range seq {
		if q != b.rank && !reached(atomic.LoadUint32(w), s) {
			if err := b.waitSlow(ctx, q, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// parity is the staging half the data for the next barrier goes to.
func (b *backend) parity() int { return int((b.step + 1) & 1) }

func (b *backend) waitSlow(ctx context.Context, q int, s uint32) error {
	w := b.seq[s&1][q]
	if b.boxLines > 0 {
		if b.spinTouching(w, s) {
			return nil
		}
	} else {
		for i := 0; i < b.spins; i++ {
			if reached(atomic.LoadUint32(w), s) {
				return nil
			}
		}
	}
	if b.spins > 0 && b.napFor == 0 {
		if ok, err := b.spinWait(ctx, w, s); ok || err != nil {
			return err
		}
	}
	yields := yieldLoops
	if b.spins == 0 {
		yields = 1
	}
	for i := 0; i < yields; i++ {
		runtime.Gosched()
		if reached(atomic.LoadUint32(w), s) {
			return nil
		}
	}
	start := time.Now()
	deadline := start.Add(b.cfg.Timeout)
	nap := minNap
	closed := word(b.seg.Peer(q), offClosed)
	for {
		// Arrival first: a wait already met is not failed by an abort or
		// a close that came after it (a peer that closes right after the
		// last call it shares with us).
		v := atomic.LoadUint32(w)
		if reached(v, s) {
			return nil
		}
		if err := b.interrupted(ctx); err != nil {
			return err
		}
		if atomic.LoadUint32(closed) != 0 {
			// The close is told after the peer's last arrival, so one more
			// look settles it: q will never arrive.
			if reached(atomic.LoadUint32(w), s) {
				return nil
			}
			return &collectives.PeerError{Rank: q, Cause: fmt.Errorf(
				"%w with calls still outstanding: host: rank %d waits for it at step %d", collectives.ErrPeerClosed, b.rank, s)}
		}
		now := time.Now()
		left := deadline.Sub(now)
		if left <= 0 {
			return b.fail(&collectives.PeerError{Rank: q, Cause: fmt.Errorf(
				"host: rank %d waited %v for rank %d at step %d: %w", b.rank, b.cfg.Timeout, q, s, collectives.ErrTimeout)})
		}
		if now.Sub(start) < b.napFor {
			// Short naps park only this goroutine: ranks sharing the
			// process (and its Ps) keep running. A futex sleep would hold
			// the P until the scheduler's monitor takes it back.
			time.Sleep(min(nap, left))
			nap = min(2*nap, maxNap)
			continue
		}
		// A long wait: sleep in the kernel until the peer arrives.
		atomic.AddUint32(b.waiters[q], 1)
		if atomic.LoadUint32(w) == v {
			futexWait(w, v, min(left, maxSleep))
		}
		atomic.AddUint32(b.waiters[q], ^uint32(0))
	}
}

// spinTouching is the first spin of a wait for a call whose data spans
// boxLines cache lines of the box after the counter's: each round also
// loads a word of each of them, so that the lines the peer writes before
// its counter travel while the counter's line is awaited, rather than
// after it. The data itself is read only once the counter is seen (x86
// keeps loads in order, so it is the peer's newest), and the loads here
// are discarded.
func (b *backend) spinTouching(w *uint32, s uint32) bool {
	var sum uint32
	for i := b.spins / (1 + b.boxLines); i > 0; i-- {
		if reached(atomic.LoadUint32(w), s) {
			b.sink = sum
			return true
		}
		for j := 1; j <= b.boxLines; j++ {
			sum += atomic.LoadUint32((*uint32)(unsafe.Add(unsafe.Pointer(w), j*lineBytes)))
		}
	}
	b.sink = sum
	return false
}

// spinWait polls w for up to spinFor; it reports whether step s was
// reached.
//
// The budget adapts: a wait that outlasts it (the peer is descheduled, as
// on a machine busier than its CPUs) cuts it to a quarter, down to
// minSpin, so that such a machine pays a futex wake-up per wait rather
// than a whole spin; a wait that ends within it doubles it, up to spinFor.
func (b *backend) spinWait(ctx context.Context, w *uint32, s uint32) (bool, error) {
	if b.spinLeft == 0 {
		b.spinLeft = spinFor
	}
	start := time.Now()
	yielding := false
	for {
		for i := 0; i < pollRound; i++ {
			if reached(atomic.LoadUint32(w), s) {
				if !yielding {
					b.spinLeft = min(2*b.spinLeft, spinFor)
				}
				return true, nil
			}
		}
		if err := b.interrupted(ctx); err != nil {
			return false, err
		}
		d := time.Since(start)
		if !yielding && d > b.spinLeft {
			b.spinLeft = max(b.spinLeft/4, minSpin)
			yielding = true
		}
		if yielding {
			if d > yieldFor {
				return false, nil
			}
			osYield()
		}
	}
}

// osYield lets another thread have this CPU, if one is waiting for it.
func osYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// interrupted returns the error that ends a wait: a local or remote
// abort, or the context's end (which aborts the job: a rank that leaves
// mid-collective leaves its peers unable to finish).
func (b *backend) interrupted(ctx context.Context) error {
	if e := b.failure.Load(); e != nil {
		return *e
	}
	if by := atomic.LoadUint32(b.abortWord); by != 0 {
		r := int(by) - 1
		return b.fail(&collectives.PeerError{Rank: r, Cause: fmt.Errorf("%w (reported through shared memory)", collectives.ErrAborted)})
	}
	// A context that can never end (Background) has no channel: skip the
	// runtime's select, which every call and every poll round pays.
	if done := ctx.Done(); done != nil {
		select {
		case <-done:
			return b.fail(fmt.Errorf("host: rank %d: %w: %w", b.rank, collectives.ErrAborted, ctx.Err()))
		default:
		}
	}
	return nil
}

// fail records err as this rank's failure (the first one wins), tells
// every peer through the shared abort word and wakes sleepers; it returns
// the recorded failure.
func (b *backend) fail(err error) error {
	if b.failure.CompareAndSwap(nil, &err) {
		// The error reaches the caller of every call from here on; a
		// WARN line per rank would only repeat it.
		b.cfg.Logger.Info("goccl: host backend aborting", "rank", b.rank, "err", err)
		b.amu.Lock()
		if !b.unmapped {
			// Name the rank that failed, not the one that noticed: when
			// the bootstrap hub itself is gone, this word is all the
			// survivors learn.
			blamed := b.rank
			var pe *collectives.PeerError
			if errors.As(err, &pe) && pe.Rank >= 0 {
				blamed = pe.Rank
			}
			atomic.CompareAndSwapUint32(b.abortWord, 0, uint32(blamed)+1)
			for _, seq := range b.seq {
				for _, w := range seq {
					futexWake(w)
				}
			}
			b.p2p.wakeAll() // ranks asleep in point-to-point waits
		}
		b.amu.Unlock()
	}
	return *b.failure.Load()
}

// PeerClosed implements collectives.PeerCloser: it marks rank q's segment
// closed, for every rank that maps it, and wakes the waits on q, which
// fail unless q had already arrived. Any rank that learns of the close may
// call it; the mark is idempotent.
func (b *backend) PeerClosed(q int) {
	if q < 0 || q >= b.n || q == b.rank {
		return
	}
	b.amu.Lock()
	defer b.amu.Unlock()
	if b.unmapped {
		return
	}
	atomic.StoreUint32(word(b.seg.Peer(q), offClosed), 1)
	futexWake(b.seq[0][q])
	futexWake(b.seq[1][q])
	if b.p2p.bells != nil {
		futexWake(b.p2p.bells[b.rank]) // point-to-point waits sleep here
	}
}

// futexWait sleeps while *w == v, at most d. Spurious returns are fine:
// callers recheck.
func futexWait(w *uint32, v uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	// Not FUTEX_PRIVATE: the word is shared between processes.
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(v),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(w *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, 1<<30, 0, 0, 0)
}
