package comm

import (
	"runtime"
	"time"

	"github.com/goccl/goccl/internal/release"
)

// The call gate: one call of a communicator at a time, and the number of
// its numbered calls told to the bootstrap, in one word
// (tcpBootstrap.calls: the count shifted left by one, and bit 0 set while a
// call holds the gate). Entering takes and numbers the call with one
// compare-and-swap and leaving is one release store (a plain store on
// x86-64, see internal/release), where a mutex and a separate store of
// the count took three atomic read-modify-writes per call.

// enterCall waits for the gate, takes it, and numbers k calls (c.seq is
// the last of them); the caller leaves with leaveCall.
func (c *Comm) enterCall(k uint64) {
	w := &c.boot.calls
	for i := 0; ; i++ {
		if v := w.Load(); v&1 == 0 && w.CompareAndSwap(v, v+k<<1|1) {
			c.seq = v>>1 + k
			return
		}
		// Only a program calling from several goroutines at once (which
		// the API does not allow), or alongside Split, waits here.
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(min(time.Duration(i)*time.Microsecond, time.Millisecond))
		}
	}
}

// leaveCall lets the next call in.
// The call's writes are ordered before it; nothing after it needs to
// wait for it, so a release store will do.
func (c *Comm) leaveCall() { release.Uint64(&c.boot.calls, c.seq<<1) }

// callCount is the number of numbered calls this rank has made, the one
// under way included.
func (b *tcpBootstrap) callCount() uint64 { return b.calls.Load() >> 1 }
