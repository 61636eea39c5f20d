package comm

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internode/ucx"
)

// TestAllocSliceAcrossNodes: on ranks of two fake nodes (GOCCL_HOSTID),
// AllocSlice gives every rank memory, AllReduce on it is right (against
// sums computed here) with its legs inside the node on the direct path,
// at a count the node's ranks split evenly and at one they do not; sizes
// that differ fail every rank.
func TestAllocSliceAcrossNodes(t *testing.T) {
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp not available (install libucx0): %v", err)
	}
	t.Setenv("UCX_TLS", "tcp,self")
	id, err := NewUniqueID()
	require.NoError(t, err)
	const n = 4
	counts := []int{100002, 100003}
	ins := make([][][]int64, len(counts))
	want := make([][]int64, len(counts))
	for k, count := range counts {
		want[k] = make([]int64, count)
		for r := range n {
			rng := rand.New(rand.NewPCG(uint64(r), uint64(count)))
			in := make([]int64, count)
			for i := range in {
				in[i] = rng.Int64N(1 << 40)
				want[k][i] += in[i]
			}
			ins[k] = append(ins[k], in)
		}
	}
	errs := make([]error, n)
	badErrs := make([]error, n)
	got := make([][][]int64, n)
	paths := make([][]string, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			ctx := context.Background()
			env := map[string]string{"GOCCL_HOSTID": []string{"x", "x", "y", "y"}[r]}
			c, err := InitRank(ctx, id, n, r, Options{Backend: BackendHost, Env: env, Logger: discardLogger(), Timeout: 30 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			buf, reg, err := AllocSlice[int64](ctx, c, 2*counts[1])
			if err != nil {
				errs[r] = err
				return
			}
			defer reg.Close(ctx)
			for k, count := range counts {
				send, recv := buf[:count], buf[count:2*count]
				copy(send, ins[k][r])
				for i := range recv {
					recv[i] = -1
				}
				if errs[r] = AllReduceSlice(ctx, c, send, recv, Sum); errs[r] != nil {
					return
				}
				got[r] = append(got[r], append([]int64(nil), recv...))
				paths[r] = append(paths[r], c.backend.(collectives.PathTeller).LastPath().Transport)
			}
			_, _, badErrs[r] = AllocSlice[int64](ctx, c, 1000+r/2)
		}(r)
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
		for k := range counts {
			assert.Equal(t, want[k], got[r][k], "rank %d count %d", r, counts[k])
		}
		assert.Equal(t, []string{"shm-direct+ucx", "shm-direct+ucx"}, paths[r], "rank %d", r)
		require.ErrorIs(t, badErrs[r], collectives.ErrInvalidArgument, "rank %d", r)
		assert.ErrorContains(t, badErrs[r], "bytes", "rank %d", r)
	}
}
