package host

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/onheap"
)

// startWaiting makes ranks 0..n-2 call AllReduce while the last rank
// never does; it returns their results as they come.
func startWaiting(t *testing.T, j *job, ctx context.Context) (<-chan struct{}, []error, []time.Duration) {
	t.Helper()
	errs := make([]error, j.n-1)
	took := make([]time.Duration, j.n-1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < j.n-1; r++ {
		buf := alloc(4096)
		a := collectives.Args{Coll: collectives.AllReduce, Send: addr(buf), Recv: addr(buf), Count: 1024, Type: collectives.Float32, Op: collectives.Sum}
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			start := time.Now()
			errs[r] = j.bes[r].Run(ctx, &a)
			took[r] = time.Since(start)
			runtime.KeepAlive(buf) // a holds only its address
		}(r)
	}
	go func() { wg.Wait(); close(done) }()
	return done, errs, took
}

// abortBound bounds how long an abort, a cancel or a close takes to end
// the waits on it: at once, but a loaded 2-core machine can starve a test
// process for most of a second; far short of the jobs' minute-long
// timeouts.
const abortBound = 10 * time.Second

func waitDone(t *testing.T, done <-chan struct{}, within time.Duration) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("waiting ranks did not return within %v", within)
	}
}

func TestAbortWakesWaiters(t *testing.T) {
	cause := errors.New("watchdog says rank 2 is gone")
	for _, tc := range []struct {
		name    string
		aborter int // which rank's backend is aborted
	}{
		{"a waiting rank aborts", 0},
		{"the absent rank aborts", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, 3, Config{Timeout: time.Minute})
			done, errs, took := startWaiting(t, j, context.Background())
			time.Sleep(100 * time.Millisecond)
			j.bes[tc.aborter].Abort(cause)
			waitDone(t, done, abortBound)
			for r, err := range errs {
				require.ErrorIs(t, err, collectives.ErrAborted, "rank %d", r)
				assert.Less(t, took[r], abortBound)
				if r == tc.aborter {
					assert.ErrorIs(t, err, cause, "the aborting rank reports its cause")
				} else {
					var pe *collectives.PeerError
					require.ErrorAs(t, err, &pe, "rank %d: %v", r, err)
					assert.Equal(t, tc.aborter, pe.Rank)
				}
			}
			// Every later call, on every rank, fails at once.
			for r, be := range j.bes {
				buf := alloc(64)
				err := be.Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce, Send: addr(buf), Recv: addr(buf), Count: 4, Type: collectives.Int32, Op: collectives.Max})
				runtime.KeepAlive(buf)
				assert.ErrorIs(t, err, collectives.ErrAborted, "rank %d after abort", r)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	const limit = 200 * time.Millisecond
	j := newJob(t, 3, Config{Timeout: limit})
	done, errs, took := startWaiting(t, j, context.Background())
	waitDone(t, done, limit+abortBound)
	timedOut := 0
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		assert.Less(t, took[r], limit+abortBound)
		var pe *collectives.PeerError
		require.ErrorAs(t, err, &pe)
		if errors.Is(err, collectives.ErrTimeout) {
			timedOut++
			assert.Equal(t, 2, pe.Rank, "the rank waited for is named")
			assert.GreaterOrEqual(t, took[r], limit)
		} else {
			// The first to time out aborted the job for the others.
			assert.ErrorIs(t, err, collectives.ErrAborted)
		}
	}
	assert.GreaterOrEqual(t, timedOut, 1)
}

func TestContextCancelAbortsTheJob(t *testing.T) {
	j := newJob(t, 3, Config{Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done, errs, _ := startWaiting(t, j, ctx)
	time.Sleep(50 * time.Millisecond)
	cancel()
	waitDone(t, done, abortBound)
	for r, err := range errs {
		require.ErrorIs(t, err, collectives.ErrAborted, "rank %d", r)
	}
	assert.True(t, errors.Is(errs[0], context.Canceled) || errors.Is(errs[1], context.Canceled))
}

func TestCloseDuringRun(t *testing.T) {
	j := newJob(t, 2, Config{Timeout: time.Minute})
	done, errs, _ := startWaiting(t, j, context.Background())
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, j.bes[0].Close())
	waitDone(t, done, abortBound)
	require.ErrorIs(t, errs[0], collectives.ErrAborted)
	assert.ErrorIs(t, errs[0], collectives.ErrClosed)
	buf := alloc(64)
	err := j.bes[0].Run(context.Background(), &collectives.Args{Coll: collectives.Broadcast, Send: addr(buf), Recv: addr(buf), Count: 1, Type: collectives.Int8})
	runtime.KeepAlive(buf)
	assert.ErrorIs(t, err, collectives.ErrClosed)
	assert.NoError(t, j.bes[0].Close(), "closing twice is fine")
}

func TestMismatchedCallsAreReportedAndRecoverable(t *testing.T) {
	j := newJob(t, 3, Config{})
	bufs := make([][]byte, 3)
	args := make([]collectives.Args, 3)
	for r := range args {
		bufs[r] = alloc(1024)
		args[r] = collectives.Args{Coll: collectives.AllReduce, Send: addr(bufs[r]), Recv: addr(bufs[r]), Count: 100, Type: collectives.Float32, Op: collectives.Sum}
	}
	args[1].Count = 99
	errs := j.run(context.Background(), args)
	runtime.KeepAlive(bufs)
	for r, err := range errs {
		require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
		assert.Contains(t, err.Error(), "mismatched")
		assert.Contains(t, err.Error(), "all_reduce of 99 float sum")
	}
	// Every rank took the same steps, so the communicator still works.
	require.NoError(t, j.verify(call{coll: collectives.AllReduce, dt: collectives.Float32, op: collectives.Sum, count: 100}))
}

func TestRunRejectsBadArgs(t *testing.T) {
	j := newJob(t, 1, Config{})
	buf := alloc(64)
	for _, tc := range []struct {
		name string
		a    collectives.Args
		want error
	}{
		{"nil send", collectives.Args{Coll: collectives.AllReduce, Recv: addr(buf), Count: 1, Type: collectives.Float32}, collectives.ErrNilPointer},
		{"bad type", collectives.Args{Coll: collectives.AllReduce, Send: addr(buf), Recv: addr(buf), Count: 1, Type: 42}, collectives.ErrUnknownDataType},
		{"bad root", collectives.Args{Coll: collectives.Broadcast, Send: addr(buf), Recv: addr(buf), Count: 1, Type: collectives.Int8, Root: 1}, collectives.ErrInvalidRoot},
		{"misaligned", collectives.Args{Coll: collectives.AllReduce, Send: addr(buf) + 1, Recv: addr(buf), Count: 1, Type: collectives.Float64}, collectives.ErrMisaligned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, j.bes[0].Run(context.Background(), &tc.a), tc.want)
			runtime.KeepAlive(buf)
		})
	}
}

// TestLateRankCompletes: peers that waited long enough to sleep in the
// kernel are woken by the late rank's arrival, and the result is right.
func TestLateRankCompletes(t *testing.T) {
	j := newJob(t, 3, Config{Timeout: time.Minute, StagingBytes: 4096})
	const count = 5000 // several rounds, every one a chance to sleep
	bufs := make([][]byte, j.n)
	args := make([]collectives.Args, j.n)
	for r := range args {
		bufs[r] = alloc(count * 4)
		for i := 0; i < count; i++ {
			storeFloat(collectives.Float32, bufs[r], i, float64(r+1))
		}
		args[r] = collectives.Args{Coll: collectives.AllReduce, Send: addr(bufs[r]), Recv: addr(bufs[r]), Count: count, Type: collectives.Float32, Op: collectives.Sum}
	}
	errs := make([]error, j.n)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range args {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			if r == 1 {
				time.Sleep(3 * napPhase) // past the naps, into the futex
			}
			errs[r] = j.bes[r].Run(context.Background(), &args[r])
		}(r)
	}
	wg.Wait()
	assert.Less(t, time.Since(start), 3*napPhase+abortBound)
	for r := range args {
		require.NoError(t, errs[r], "rank %d", r)
		for i := 0; i < count; i++ {
			require.Equal(t, 6.0, floatVal(collectives.Float32, bufs[r], i), "rank %d element %d", r, i)
		}
	}
}

func TestFutexWakeEndsWait(t *testing.T) {
	var w uint32 // Go memory works for a futex as shared memory does
	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		for atomic.LoadUint32(&w) == 0 {
			futexWait(&w, 0, time.Minute) // only the wake ends it before abortBound
		}
		done <- time.Since(start)
	}()
	time.Sleep(20 * time.Millisecond)
	atomic.StoreUint32(&w, 1)
	futexWake(&w)
	select {
	case took := <-done:
		assert.Less(t, took, abortBound)
	case <-time.After(2 * abortBound):
		t.Fatal("futexWake did not end futexWait")
	}
}

// TestBackToBackWithSkew: ranks run many calls back to back, each rank
// delayed at random, so fast ranks reach staging that slow ones were just
// reading; integer sums make every result exact.
func TestBackToBackWithSkew(t *testing.T) {
	const n, iters, count = 3, 300, 3000
	for _, algo := range []collectives.Algorithm{collectives.OneShot, collectives.TwoShot} {
		j := newJob(t, n, Config{Algo: string(algo), StagingBytes: 4096, Timeout: time.Minute})
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := 0; r < n; r++ {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(r), 7))
				send, recv := make([]int32, count), make([]int32, count)
				for it := 0; it < iters; it++ {
					for i := range send {
						send[i] = int32(it*1000 + r*10 + i%7)
					}
					switch rng.IntN(4) {
					case 0:
						runtime.Gosched()
					case 1:
						time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
					}
					a := collectives.Args{Coll: collectives.AllReduce, Send: addr32(send), Recv: addr32(recv), Count: count, Type: collectives.Int32, Op: collectives.Sum}
					if err := j.bes[r].Run(context.Background(), &a); err != nil {
						errs[r] = err
						return
					}
					for i, v := range recv {
						if want := int32(n*(it*1000+i%7) + 10*(0+1+2)); v != want {
							errs[r] = fmt.Errorf("iteration %d element %d: got %d, want %d", it, i, v, want)
							return
						}
					}
				}
				runtime.KeepAlive(send)
				runtime.KeepAlive(recv)
			}(r)
		}
		wg.Wait()
		for r, err := range errs {
			require.NoError(t, err, "%s rank %d", algo, r)
		}
	}
}

// addr64 and addr32 are s's address for a call, s kept on the heap.
func addr64(s []uint64) uintptr { return onheap.Addr(s) }
func addr32(s []int32) uintptr  { return onheap.Addr(s) }
