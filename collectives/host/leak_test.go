package host

import (
	"context"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// TestNoLeaks makes and closes communicators (some aborted mid-call)
// and checks that descriptors, mappings and goroutines come back.
func TestNoLeaks(t *testing.T) {
	cycle := func(i int) {
		j := newJob(t, 4, Config{StagingBytes: 8192, Timeout: time.Minute})
		require.NoError(t, j.verify(call{coll: collectives.AllReduce, dt: collectives.Float32, op: collectives.Sum, count: 3000, root: i % 4}))
		if i%2 == 1 {
			done, _, _ := startWaiting(t, j, t.Context())
			j.bes[3].Abort(nil)
			waitDone(t, done, abortBound)
		}
		j.close()
		j.bes = nil // the Cleanup of newJob has nothing left to close
	}
	cycle(0)
	fds, maps, gs := countFDs(t), countMaps(t), runtime.NumGoroutine()
	for i := 0; i < 40; i++ {
		cycle(i)
	}
	assert.Equal(t, fds, countFDs(t), "open descriptors")
	// 40 cycles of 4 ranks mapping 4 segments would leak 640 mappings.
	assert.InDelta(t, maps, countMaps(t), 8, "mappings (the Go heap may add a few)")
	// Polled here: assert.Eventually would add goroutines of its own.
	for deadline := time.Now().Add(abortBound); runtime.NumGoroutine() > gs && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !assert.LessOrEqual(t, runtime.NumGoroutine(), gs, "goroutines") {
		buf := make([]byte, 1<<16)
		t.Logf("%d goroutines before, now:\n%s", gs, buf[:runtime.Stack(buf, true)])
	}
}

// TestRunDoesNotAllocate: the data path allocates nothing per call.
func TestRunDoesNotAllocate(t *testing.T) {
	for _, algo := range []collectives.Algorithm{collectives.OneShot, collectives.TwoShot} {
		j := newJob(t, 2, Config{Algo: string(algo), StagingBytes: 4096})
		bufs := [][]byte{alloc(40000), alloc(40000)}
		const iters = 200
		run := func() {
			var wg sync.WaitGroup
			for r := 0; r < 2; r++ {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					a := collectives.Args{Coll: collectives.AllReduce, Send: addr(bufs[r]), Recv: addr(bufs[r]), Count: 10000, Type: collectives.BFloat16, Op: collectives.Avg}
					for i := 0; i < iters; i++ {
						if err := j.bes[r].Run(context.Background(), &a); err != nil {
							t.Error(err)
							return
						}
					}
				}(r)
			}
			wg.Wait()
		}
		run() // warm up
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		run()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(bufs)
		assert.Less(t, float64(after.Mallocs-before.Mallocs)/iters, 0.2, "%s: allocations per call", algo)
	}
}
