package faults

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/comm"
)

// snapshot is what a process holds that a communicator could leak.
type snapshot struct {
	fds, goroutines, threads, shmMaps, sockets int
}

func take() snapshot {
	return snapshot{fds: countFDs(), goroutines: runtime.NumGoroutine(), threads: countThreads(),
		shmMaps: countShmMaps(), sockets: ownSockets()}
}

// settle waits a little for goroutines on their way out.
func settle(base snapshot) snapshot {
	var s snapshot
	for i := 0; i < 200; i++ {
		s = take()
		if s.goroutines <= base.goroutines && s.fds <= base.fds {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s
}

// Scenario 9: create, use and destroy 2-rank host communicators over and
// over; descriptors, goroutines, memfd mappings and sockets return to the
// baseline. Threads may grow (the Go runtime keeps threads it made for
// blocking calls) but stay bounded.
func TestCreateDestroyCycles(t *testing.T) {
	cycles := pick(300, 10000)
	cycle := func() {
		comms, err := comm.InitAll(context.Background(), []int{0, 1}, hostOpts())
		require.NoError(t, err)
		checkAllReduce(t, comms, 256, 1)
		closeAll(t, comms)
	}
	for i := 0; i < 3; i++ { // warm up: runtime poller, threads
		cycle()
	}
	base := settle(take())
	require.Zero(t, base.shmMaps, "no segment mapped before the cycles")
	start := time.Now()
	for i := 0; i < cycles; i++ {
		cycle()
		if i%1000 == 999 {
			s := settle(base)
			t.Logf("after %d cycles (%v): %+v (baseline %+v)", i+1, time.Since(start).Round(time.Millisecond), s, base)
		}
	}
	took := time.Since(start)
	s := settle(base)
	assert.LessOrEqual(t, s.fds, base.fds, "open descriptors (more than the baseline is a leak; an earlier test's may close late)")
	assert.LessOrEqual(t, s.goroutines, base.goroutines, "goroutines (more than the baseline is a leak; an earlier test's may end late)")
	assert.Equal(t, 0, s.shmMaps, "memfd mappings in /proc/self/maps")
	assert.Equal(t, base.sockets, s.sockets, "abstract goccl sockets")
	assert.LessOrEqual(t, s.threads, base.threads+8, "threads")
	t.Logf("scenario 9: %d cycles in %v (%v per cycle); baseline %+v, after %+v", cycles, took.Round(time.Millisecond), (took / time.Duration(cycles)).Round(time.Microsecond), base, s)
}
