package transporttest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/transport"
)

// RankTimeout bounds OnRanks: a hung collective fails the test instead of
// hanging it.
const RankTimeout = 10 * time.Second

// OnRanks calls f on every rank of g concurrently, each with the rank's
// bootstrap and a context bounded by RankTimeout, and returns every rank's
// error. It fails t if the ranks did not finish in time.
func (g *Group) OnRanks(t testing.TB, f func(ctx context.Context, r int, b transport.Bootstrap) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), RankTimeout)
	defer cancel()
	errs := g.each(func(r int) error { return f(ctx, r, g.Rank(r)) })
	require.NoError(t, ctx.Err(), "ranks did not finish in time")
	return errs
}

// each calls f for every rank concurrently and returns every rank's
// error once all have returned.
func (g *Group) each(f func(r int) error) []error {
	errs := make([]error, g.n)
	var wg sync.WaitGroup
	for r := 0; r < g.n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = f(r)
		}(r)
	}
	wg.Wait()
	return errs
}

// OpenFDs counts this process's open file descriptors, for leak checks.
func OpenFDs(t testing.TB) int {
	t.Helper()
	// The runtime opens its poller's fds on first use; make that happen
	// before any count so that it is not taken for a leak.
	r, w, err := os.Pipe()
	require.NoError(t, err)
	r.Close()
	w.Close()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}
