package comm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ranks on different nodes (here fake ones, by GOCCL_HOSTID) fail init at
// once on every rank, with the layout, rather than later in a transport
// that cannot reach the other machine.
func TestInitAcrossNodes(t *testing.T) {
	cases := []struct {
		name    string
		hostIDs []string
		fails   bool
	}{
		{"one node, ids unset", []string{"", "", ""}, false},
		{"one node, ids alike", []string{"a", "a", "a"}, false},
		{"two nodes", []string{"a", "b", "a"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := NewUniqueID()
			require.NoError(t, err)
			n := len(tc.hostIDs)
			comms := make([]*Comm, n)
			errs := make([]error, n)
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
					comms[r], errs[r] = InitRank(context.Background(), id, n, r,
						Options{Backend: BackendHost, Env: env, Logger: discardLogger(), Timeout: 30 * time.Second})
				}(r)
			}
			wg.Wait()
			t.Logf("init ended in %v", time.Since(start))
			for r := range n {
				if !tc.fails {
					require.NoError(t, errs[r], "rank %d", r)
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
