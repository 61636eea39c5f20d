package faults

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/internal/onheap"
)

// Helpers for scenarios whose ranks are goroutines of the test process.

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// hostOpts are host-backend options that ignore the environment.
func hostOpts() comm.Options {
	return comm.Options{Backend: comm.BackendHost, Env: map[string]string{}, Logger: quiet()}
}

// initRanks runs InitRank for every rank in its own goroutine and returns
// the communicators and errors, in rank order.
func initRanks(ctx context.Context, id comm.UniqueID, nranks int, opts func(r int) comm.Options) ([]*comm.Comm, []error) {
	comms := make([]*comm.Comm, nranks)
	errs := make([]error, nranks)
	var wg sync.WaitGroup
	for r := 0; r < nranks; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			comms[r], errs[r] = comm.InitRank(ctx, id, nranks, r, opts(r))
		}(r)
	}
	wg.Wait()
	return comms, errs
}

// each runs f on every communicator concurrently.
func each(comms []*comm.Comm, f func(c *comm.Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func(i int, c *comm.Comm) {
			defer wg.Done()
			errs[i] = f(c)
		}(i, c)
	}
	wg.Wait()
	return errs
}

func closeAll(t *testing.T, comms []*comm.Comm) {
	t.Helper()
	for _, c := range comms {
		if c != nil {
			require.NoError(t, c.Close(), "closing rank %d", c.Rank())
		}
	}
}

// ptr is b's address for a call, b kept on the heap.
func ptr(b []int32) uintptr { return onheap.Addr(b) }

// checkAllReduce runs an Int32 sum on every rank and checks the result.
func checkAllReduce(t *testing.T, comms []*comm.Comm, count int, base int32) {
	t.Helper()
	bufs := make([][]int32, len(comms))
	errs := each(comms, func(c *comm.Comm) error {
		b := make([]int32, count)
		for i := range b {
			b[i] = base + int32(c.Rank()*1000+i%97)
		}
		bufs[c.Rank()] = b
		err := c.AllReduce(context.Background(), ptr(b), ptr(b), count, comm.Int32, comm.Sum, 0)
		runtime.KeepAlive(b)
		return err
	})
	n := int32(len(comms))
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		for i, v := range bufs[r] {
			want := n*base + 1000*n*(n-1)/2 + n*int32(i%97)
			if v != want {
				require.Equal(t, want, v, "rank %d element %d", r, i)
			}
		}
	}
}
