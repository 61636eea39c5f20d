package comm

import (
	"context"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/syncbuf"
	"github.com/goccl/goccl/internode/ucx"
	"github.com/goccl/goccl/topology"
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

func TestNodeLayout(t *testing.T) {
	key := func(s string) string {
		id := hashKey(s)
		return hex.EncodeToString(id[:])
	}
	a, b := hashKey("a"), hashKey("b")
	for _, tc := range []struct {
		name  string
		nodes []string
		want  string
	}{
		{"one rank", []string{key("a")}, "1 (node 0 = " + a.String() + "…: ranks 0)"},
		{"one node", []string{key("a"), key("a"), key("a")}, "1 (node 0 = " + a.String() + "…: ranks 0,1,2)"},
		{"two nodes, interleaved", []string{key("b"), key("a"), key("b"), key("a")},
			"2 (node 0 = " + b.String() + "…: ranks 0,2; node 1 = " + a.String() + "…: ranks 1,3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, nodeLayout(tc.nodes))
		})
	}
}

// hashKey is the node id GOCCL_HOSTID=s gives, computed through the same
// public function that the ranks use.
func hashKey(s string) topology.NodeID {
	src := topology.OSNodeSource
	src.Getenv = func(k string) string {
		if k == "GOCCL_HOSTID" {
			return s
		}
		return ""
	}
	id, _, err := topology.LocalNode(src)
	if err != nil {
		panic(err)
	}
	return id
}

// GOCCL_DEBUG=INFO: rank 0 logs the node layout once per communicator,
// also when the layout then fails init (a one-node backend across nodes).
func TestNodeLayoutLogged(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hostIDs []string
		fails   bool
		want    string
	}{
		{"one node", []string{"n", "n", "n"}, false, `msg="goccl: nodes: 1 (node 0 = ` + hashKey("n").String() + `…: ranks 0,1,2)" nranks=3`},
		{"two nodes", []string{"p", "q", "p"}, true, `msg="goccl: nodes: 2 (node 0 = ` + hashKey("p").String() + `…: ranks 0,2; node 1 = ` + hashKey("q").String() + `…: ranks 1)" nranks=3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			id, err := NewUniqueID()
			require.NoError(t, err)
			n := len(tc.hostIDs)
			comms := make([]*Comm, n)
			errs := make([]error, n)
			var ff fakeFactory
			var wg sync.WaitGroup
			for r := range n {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					opts := Options{NewBackend: ff.New, Env: map[string]string{"GOCCL_HOSTID": tc.hostIDs[r]}, Logger: log, Timeout: 30 * time.Second}
					comms[r], errs[r] = InitRank(context.Background(), id, n, r, opts)
				}(r)
			}
			wg.Wait()
			for r := range n {
				if tc.fails {
					// A rank may hear a peer's abort first: the text says why.
					require.Error(t, errs[r], "rank %d", r)
					assert.Contains(t, errs[r].Error(), "span 2 nodes", "rank %d", r)
					continue
				}
				require.NoError(t, errs[r], "rank %d", r)
				require.NoError(t, comms[r].Close())
			}
			out := logs.String()
			assert.Equal(t, 1, strings.Count(out, "goccl: nodes:"), out)
			assert.Contains(t, out, tc.want)
		})
	}
}
