package comm

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/recorder"
)

func TestCommValidationReachesNothing(t *testing.T) {
	ff := &fakeFactory{}
	comms := initGroup(t, 2, testOpts(ff))
	c := comms[1]
	fb := ff.get(1)
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
		is   error
		want string
	}{
		{"bad dtype", func() error { return c.AllReduce(ctx, 8, 8, 4, DataType(42), Sum, 0) }, collectives.ErrUnknownDataType, "datatype 42"},
		{"bad op", func() error { return c.AllReduce(ctx, 8, 8, 4, Float32, Op(9), 0) }, collectives.ErrUnknownOp, "op 9"},
		{"negative count", func() error { return c.AllGather(ctx, 8, 8, -1, Float32, 0) }, collectives.ErrInvalidCount, "count -1"},
		{"root out of range", func() error { return c.Broadcast(ctx, 8, 8, 4, Float32, 2, 0) }, collectives.ErrInvalidRoot, "root 2"},
		{"reduce root", func() error { return c.Reduce(ctx, 8, 8, 4, Float32, Sum, -1, 0) }, collectives.ErrInvalidRoot, "root -1"},
		{"nil send", func() error { return c.ReduceScatter(ctx, 0, 8, 4, Float32, Sum, 0) }, collectives.ErrNilPointer, "send buffer is nil"},
		{"misaligned", func() error { return c.AllReduce(ctx, 8, 6, 4, Float64, Sum, 0) }, collectives.ErrMisaligned, "recv buffer 0x6"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, tc.is)
			require.ErrorIs(t, err, collectives.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 0, fb.runCount(), "nothing reached the backend")
		})
	}
	// A valid call goes through with the arguments as given; the rejected
	// calls took their numbers (a rank whose call went nowhere must not
	// pair its next call with its peers' current one).
	require.NoError(t, c.Reduce(ctx, 16, 0, 3, Int32, Max, 0, 77))
	require.Equal(t, 1, fb.runCount())
	assert.Equal(t, collectives.Args{Coll: collectives.Reduce, Send: 16, Count: 3, Type: Int32, Op: Max, Root: 0, Stream: 77, Seq: uint64(len(cases) + 1)}, fb.runs[0])

	_, err := c.Register(ctx, 16, 64)
	require.ErrorIs(t, err, ErrNotSupported)
	_, _, err = c.Alloc(ctx, 64)
	require.ErrorIs(t, err, ErrNotSupported)
}

func TestCommCheckMismatch(t *testing.T) {
	ff := &fakeFactory{}
	opts := testOpts(ff)
	opts.Env = map[string]string{"GOCCL_CHECK": "1"}
	comms := initGroup(t, 3, opts)
	ctx := context.Background()
	type call func(c *Comm) error
	allReduce := func(c *Comm) error { return c.AllReduce(ctx, 8, 16, 4, Float32, Sum, 0) }
	reg := collectives.PathFacts{SendRegistered: true, RecvRegistered: true}
	regInPlace := collectives.PathFacts{SendRegistered: true, RecvRegistered: true, InPlace: true}
	cases := []struct {
		name  string
		call  call
		want  string
		facts map[int]collectives.PathFacts // the backends' PathFacts by rank
	}{
		{"count", func(c *Comm) error {
			n := 12
			if c.Rank() == 1 {
				n = 10
			}
			return c.AllReduce(ctx, 8, 8, n, Float32, Sum, 0)
		}, "rank 1 called all_reduce count=10, rank 0 count=12", nil},
		{"collective", func(c *Comm) error {
			if c.Rank() == 2 {
				return c.AllGather(ctx, 8, 8, 4, Float32, 0)
			}
			return c.AllReduce(ctx, 8, 8, 4, Float32, Sum, 0)
		}, "rank 2 called all_gather, rank 0 called all_reduce", nil},
		{"dtype", func(c *Comm) error {
			dt := Float32
			if c.Rank() == 1 {
				dt = BFloat16
			}
			return c.ReduceScatter(ctx, 8, 8, 4, dt, Sum, 0)
		}, "rank 1 called reduce_scatter datatype=bfloat16, rank 0 datatype=float", nil},
		{"op", func(c *Comm) error {
			op := Sum
			if c.Rank() == 2 {
				op = Min
			}
			return c.Reduce(ctx, 8, 8, 4, Int8, op, 0, 0)
		}, "rank 2 called reduce op=min, rank 0 op=sum", nil},
		{"root", func(c *Comm) error { return c.Broadcast(ctx, 8, 8, 4, Int8, min(c.Rank(), 1), 0) }, "rank 1 called broadcast root=1, rank 0 root=0", nil},
		{"one rank invalid", func(c *Comm) error {
			if c.Rank() == 2 {
				return c.AllReduce(ctx, 0, 8, 4, Float32, Sum, 0)
			}
			return c.AllReduce(ctx, 8, 8, 4, Float32, Sum, 0)
		}, "rank 2 called all_reduce with invalid arguments", nil},
		{"registration", allReduce, "rank 1 called all_reduce with its send buffer registered, " +
			"rank 0 with its send buffer not registered: every rank must register", map[int]collectives.PathFacts{1: reg}},
		{"in place on registered buffers", allReduce, "rank 1 called all_reduce out of place on registered buffers, " +
			"rank 0 in place on registered buffers", map[int]collectives.PathFacts{0: regInPlace, 1: reg, 2: regInPlace}},
		{"receive buffer", func(c *Comm) error { return c.AllGather(ctx, 8, 16, 4, Float32, 0) },
			"rank 2 called all_gather with its recv buffer registered, rank 0 with its recv buffer not registered",
			map[int]collectives.PathFacts{2: {RecvRegistered: true}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for r := range comms {
				ff.get(r).setFacts(tc.facts[r])
			}
			errs := eachRank(comms, tc.call)
			for r, err := range errs {
				require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
				if tc.name == "one rank invalid" && r == 2 {
					assert.ErrorIs(t, err, collectives.ErrNilPointer, "the bad rank reports its own error")
					continue
				}
				assert.Contains(t, err.Error(), tc.want, "rank %d", r)
			}
			for r := range comms {
				assert.Equal(t, 0, ff.get(r).runCount(), "rank %d launched nothing", r)
			}
		})
	}
	// Alike again, registered or not, the call goes through.
	for r := range comms {
		ff.get(r).setFacts(reg)
	}
	errs := eachRank(comms, func(c *Comm) error { return c.AllReduce(ctx, 8, 8, 4, Float32, Sum, 0) })
	for _, err := range errs {
		require.NoError(t, err)
	}
}

// Abort from another goroutine releases a collective blocked in the
// backend at once (the bound is for a loaded machine), many times, with
// concurrent Aborts.
func TestCommAbortWhileBlocked(t *testing.T) {
	for i := 0; i < 20; i++ {
		ff := &fakeFactory{block: true}
		comms, err := InitAll(context.Background(), []int{0, 1}, testOpts(ff))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- comms[0].AllReduce(context.Background(), 8, 8, 1, Float32, Sum, 0) }()
		<-ff.get(0).started
		start := time.Now()
		var wg sync.WaitGroup
		for k := 0; k < 1+i%2; k++ {
			wg.Add(1)
			go func() { defer wg.Done(); comms[0].Abort(errTest) }()
		}
		err = <-done
		took := time.Since(start)
		wg.Wait()
		require.ErrorIs(t, err, collectives.ErrAborted)
		require.ErrorIs(t, err, errTest)
		assert.Contains(t, err.Error(), "aborted by rank 0: test cause")
		assert.Less(t, took, 5*time.Second)
		// Every later call fails the same way, nothing reaches the backend.
		n := ff.get(0).runCount()
		err = comms[0].Broadcast(context.Background(), 8, 8, 1, Float32, 0, 0)
		require.ErrorIs(t, err, collectives.ErrAborted)
		assert.Equal(t, n, ff.get(0).runCount())
		// The other rank learns that rank 0 aborted.
		waitFor(t, 5*time.Second, func() bool { return comms[1].Err() != nil }, "rank 1 to hear of the abort")
		var pe *collectives.PeerError
		require.ErrorAs(t, comms[1].Err(), &pe)
		assert.Equal(t, 0, pe.Rank)
		assert.Contains(t, comms[1].Err().Error(), "called Abort: test cause")
		for _, c := range comms {
			require.NoError(t, c.Close())
			require.NoError(t, c.Close())
			c.Abort(errTest) // after Close: harmless
		}
		assert.Equal(t, 1, ff.get(0).closed)
	}
}

// dropBootstrap ends c's bootstrap as a dying process would: its sockets
// close, no goodbye.
func dropBootstrap(c *Comm) {
	dead := c.boot
	dead.closing.Store(true)
	for _, p := range dead.peers {
		p.conn.Close()
	}
}

// requireAbortedBy requires err to be an ErrAborted PeerError naming rank.
func requireAbortedBy(t *testing.T, err error, rank int) {
	t.Helper()
	var pe *collectives.PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, rank, pe.Rank)
	require.ErrorIs(t, err, collectives.ErrAborted)
}

// A rank whose connections vanish without a goodbye (as when its process
// dies) is named by every survivor's watchdog.
func TestCommPeerDeathInProcess(t *testing.T) {
	ff := &fakeFactory{block: true}
	comms := initGroup(t, 3, testOpts(ff))
	done := make(chan error, 2)
	for _, r := range []int{0, 1} {
		go func(c *Comm) { done <- c.AllReduce(context.Background(), 8, 8, 1, Float32, Sum, 0) }(comms[r])
	}
	<-ff.get(0).started
	<-ff.get(1).started
	dropBootstrap(comms[2])
	start := time.Now()
	for i := 0; i < 2; i++ {
		select {
		case err := <-done:
			requireAbortedBy(t, err, 2)
			assert.Contains(t, err.Error(), "rank 2 failed")
		case <-time.After(10 * time.Second):
			t.Fatal("survivor still blocked 10 s after rank 2 died")
		}
	}
	t.Logf("survivors released after %v", time.Since(start))
}

// A silent peer (stopped, hung) is detected by missed heartbeats.
func TestCommSilentPeerDetected(t *testing.T) {
	ff := &fakeFactory{}
	// 5 beats of 400 ms: a wait short of the collective's 10 s, and
	// longer than this process is starved of CPU on a loaded machine
	// (which would fail it as stalled instead).
	opts := testOpts(ff)
	opts.HeartbeatInterval = 400 * time.Millisecond
	comms := initGroup(t, 2, opts)
	// Rank 1 stops beating: stop its heartbeat goroutine only.
	close(comms[1].boot.done)
	comms[1].boot.closeOnce.Do(func() {}) // its Close must not close done again
	waitFor(t, 20*time.Second, func() bool { return comms[0].Err() != nil }, "rank 0 to notice")
	err := comms[0].Err()
	require.ErrorIs(t, err, collectives.ErrTimeout)
	assert.Contains(t, err.Error(), "rank 1 failed")
	assert.Contains(t, err.Error(), "no heartbeat for 2s", "the heartbeat's timeout, not the collective's")
	fb := ff.get(0)
	select {
	case <-fb.aborted:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend was not aborted")
	}
	fb.mu.Lock()
	assert.True(t, errors.Is(fb.abortErr, collectives.ErrAborted))
	fb.mu.Unlock()
	// Clean up rank 1's sockets by hand (its Close is now a no-op).
	for _, p := range comms[1].boot.peers {
		p.conn.Close()
	}
	comms[1].boot.fds.close()
	comms[1].rescue.close()
}

// Closing cleanly is not a failure for the others.
func TestCommCloseIsNotFailure(t *testing.T) {
	ff := &fakeFactory{}
	// A short beat: a rank that closed is never read again, so a stall
	// of this process cannot fail the others either.
	opts := testOpts(ff)
	opts.HeartbeatInterval = 100 * time.Millisecond
	comms, err := InitAll(context.Background(), []int{0, 1, 2}, opts)
	require.NoError(t, err)
	require.NoError(t, comms[0].Close())
	time.Sleep(700 * time.Millisecond) // longer than the heartbeat timeout
	assert.NoError(t, comms[1].Err())
	assert.NoError(t, comms[2].Err())
	require.NoError(t, comms[1].Close())
	require.NoError(t, comms[2].Close())
	require.ErrorIs(t, comms[1].AllReduce(context.Background(), 8, 8, 1, Float32, Sum, 0), collectives.ErrClosed)
}

// Create/destroy cycles, healthy and aborted, leave no goroutine or fd.
func TestCommLifecycleNoLeaks(t *testing.T) {
	baseG, baseFD := runtime.NumGoroutine(), countFDs(t)
	for i := 0; i < 30; i++ {
		comms, err := InitAll(context.Background(), []int{0, 1, 2}, testOpts(&fakeFactory{}))
		require.NoError(t, err)
		if i%2 == 1 {
			comms[i%3].Abort(errTest)
		}
		for _, c := range comms {
			_ = c.Close()
		}
	}
	waitFor(t, 5*time.Second, func() bool { return runtime.NumGoroutine() <= baseG }, "goroutines to return to baseline")
	assert.Equal(t, baseFD, countFDs(t))
}

// A peer that closed after fewer calls fails this rank's next call at
// once, naming it, without reaching a backend that cannot be told of the
// close; the communicator is then aborted.
func TestCallAfterPeerClosed(t *testing.T) {
	ff := &fakeFactory{}
	comms := initGroup(t, 2, testOpts(ff))
	ctx := context.Background()
	for _, c := range comms {
		for i := 0; i < 2; i++ {
			require.NoError(t, c.AllReduce(ctx, 8, 8, 4, Float32, Sum, 0))
		}
	}
	require.NoError(t, comms[1].Close())
	fb := ff.get(0)
	waitFor(t, 10*time.Second, func() bool { return comms[0].boot.hasClosed(1) }, "rank 1's goodbye")
	err := comms[0].AllReduce(ctx, 8, 8, 4, Float32, Sum, 0)
	require.ErrorIs(t, err, ErrPeerClosed)
	require.ErrorIs(t, err, ErrAborted)
	var pe *PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Rank)
	assert.Contains(t, err.Error(), "after call #2, with calls still outstanding on other ranks (rank 0 is in call #3)")
	assert.Equal(t, 2, fb.runCount(), "the third call never reached the backend")
	require.ErrorIs(t, comms[0].Err(), ErrAborted)
	assertLastCallFailed(t, comms[0], 3)
}

// The same through a group of collectives: it fails at once, and is
// recorded as entered and failed.
func TestGroupAfterPeerClosed(t *testing.T) {
	comms := initGroup(t, 2, testOpts(&fakeFactory{}))
	ctx := context.Background()
	for _, c := range comms {
		require.NoError(t, c.AllReduce(ctx, 8, 8, 4, Float32, Sum, 0))
	}
	require.NoError(t, comms[1].Close())
	waitFor(t, 10*time.Second, func() bool { return comms[0].boot.hasClosed(1) }, "rank 1's goodbye")
	g := NewGroup()
	require.NoError(t, g.AllReduce(comms[0], 8, 8, 4, Float32, Sum, 0))
	require.NoError(t, g.AllReduce(comms[0], 8, 8, 4, Float32, Sum, 0))
	err := g.Run(ctx)
	require.ErrorIs(t, err, ErrPeerClosed)
	assertLastCallFailed(t, comms[0], 2)
}

// assertLastCallFailed: c's record ends with call seq, failed, so that a
// peer's explanation finds c in that call rather than short of it.
func assertLastCallFailed(t *testing.T, c *Comm, seq uint64) {
	t.Helper()
	rec := c.Record()
	require.NotEmpty(t, rec.Calls)
	last := rec.Calls[len(rec.Calls)-1]
	assert.Equal(t, seq, last.Seq, "%+v", last)
	assert.Equal(t, recorder.Failed, last.StateOf(), "%+v", last)
}
