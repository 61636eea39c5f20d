package host

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/release"
)

// runLock is the backend's one-Run-at-a-time lock: one compare-and-swap
// to take it and a release store to give it back, where sync.Mutex's
// unlock is a second atomic read-modify-write (a full barrier on x86-64)
// on every call. Calls come one at a time (the communicator's call gate
// serialises them), so the lock is taken at once but for Close, which
// waits for a Run it has aborted, and for a caller breaking that rule;
// those wait by polling.
type runLock struct{ held atomic.Uint32 }

// TryLock takes the lock if it is free.
func (l *runLock) TryLock() bool { return l.held.CompareAndSwap(0, 1) }

// Lock takes the lock, waiting for it; small enough to be inlined.
func (l *runLock) Lock() {
	if !l.TryLock() {
		l.lockSlow()
	}
}

func (l *runLock) lockSlow() {
	for i := 0; !l.TryLock(); i++ {
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(min(time.Duration(i)*time.Microsecond, time.Millisecond))
		}
	}
}

// Unlock gives the lock back; the holder's writes are ordered before it.
func (l *runLock) Unlock() { release.Uint32(&l.held, 0) }
