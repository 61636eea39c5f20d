package comm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internode/ucx"
)

// Ranks on different nodes (here fake ones, by GOCCL_HOSTID): a backend
// that reaches one node only fails init at once on every rank, with the
// layout, rather than later in a transport that cannot reach the other
// machine; the host backend spans the nodes over UCX and computes the
// same sums.
func TestInitAcrossNodes(t *testing.T) {
	cases := []struct {
		name    string
		hostIDs []string
		host    bool // the host backend, else a one-node fake
		fails   bool
	}{
		{"one node, ids unset", []string{"", "", ""}, true, false},
		{"one node, ids alike", []string{"a", "a", "a"}, true, false},
		{"two nodes, one-node backend", []string{"a", "b", "a"}, false, true},
		{"two nodes, host backend", []string{"a", "b", "a"}, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.host && tc.hostIDs[0] != tc.hostIDs[1] {
				if err := ucx.Load(); err != nil {
					t.Skipf("libucp not available (install libucx0): %v", err)
				}
				t.Setenv("UCX_TLS", "tcp,self")
			}
			id, err := NewUniqueID()
			require.NoError(t, err)
			n := len(tc.hostIDs)
			comms := make([]*Comm, n)
			errs := make([]error, n)
			sums := make([][]int32, n)
			var ff fakeFactory
			var wg sync.WaitGroup
			start := time.Now()
			for r := range n {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					env := map[string]string{}
					if tc.hostIDs[r] != "" {
						env["GOCCL_HOSTID"] = tc.hostIDs[r]
					}
					opts := Options{Backend: BackendHost, Env: env, Logger: discardLogger(), Timeout: 30 * time.Second}
					if !tc.host {
						opts.Backend, opts.NewBackend = BackendAuto, ff.New
					}
					comms[r], errs[r] = InitRank(context.Background(), id, n, r, opts)
					if errs[r] != nil || !tc.host {
						return
					}
					in := []int32{int32(r + 1), int32(-7 * r), 1 << 30}
					sums[r] = make([]int32, len(in))
					errs[r] = AllReduceSlice(context.Background(), comms[r], in, sums[r], Sum)
				}(r)
			}
			wg.Wait()
			t.Logf("init ended in %v", time.Since(start))
			for r := range n {
				if !tc.fails {
					require.NoError(t, errs[r], "rank %d", r)
					if tc.host {
						// 1+2+3; 0-7-14; 3<<30 wraps.
						assert.Equal(t, []int32{6, -21, -(1 << 30)}, sums[r], "rank %d", r)
					}
					require.NoError(t, comms[r].Close())
					continue
				}
				require.Error(t, errs[r], "rank %d", r)
				// A rank may hear a peer's abort first: the text says why.
				assert.Contains(t, errs[r].Error(), "span 2 nodes")
				assert.Contains(t, errs[r].Error(), "ranks [0 2]")
				assert.Contains(t, errs[r].Error(), "ranks [1]")
			}
		})
	}
}

// Split across fake nodes: the children of ranks 0,2 and 1,3 of a job on
// nodes {0,1},{2,3} each span both nodes, and their host backends reach
// across them as the parent's did.
func TestSplitAcrossNodes(t *testing.T) {
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp not available (install libucx0): %v", err)
	}
	t.Setenv("UCX_TLS", "tcp,self")
	id, err := NewUniqueID()
	require.NoError(t, err)
	const n = 4
	errs := make([]error, n)
	sums := make([][]int64, n)
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
			child, err := c.Split(ctx, r%2, r, Options{})
			if err != nil {
				errs[r] = err
				return
			}
			defer child.Close()
			sums[r] = make([]int64, 2)
			errs[r] = AllReduceSlice(ctx, child, []int64{int64(r), 1 << 40}, sums[r], Sum)
		}(r)
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
		// Colour 0: ranks 0 and 2; colour 1: ranks 1 and 3.
		assert.Equal(t, []int64{int64(2*(r%2) + 2), 2 << 40}, sums[r], "rank %d", r)
	}
}
