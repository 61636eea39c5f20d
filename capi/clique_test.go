//go:build cgo

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func handles(n int) []*commHandle {
	hs := make([]*commHandle, n)
	for i := range hs {
		hs[i] = &commHandle{ready: make(chan struct{}), cancel: func() {}}
	}
	return hs
}

// A clique's closes wait for its last member; an aborted member closes at
// once; a release counts once.
func TestCliqueRelease(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		steps []struct {
			i    int
			now  bool
			want []int
		}
	}{
		{"destroyed in order", 3, []struct {
			i    int
			now  bool
			want []int
		}{{0, false, nil}, {1, false, nil}, {2, false, []int{0, 1, 2}}}},
		{"last destroyed first", 2, []struct {
			i    int
			now  bool
			want []int
		}{{1, false, nil}, {0, false, []int{1, 0}}}},
		{"abort closes at once", 3, []struct {
			i    int
			now  bool
			want []int
		}{{0, false, nil}, {1, true, []int{1}}, {1, false, nil}, {2, false, []int{0, 2}}}},
		{"alone", 1, []struct {
			i    int
			now  bool
			want []int
		}{{0, false, []int{0}}, {0, false, nil}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hs := handles(tc.n)
			newClique(hs)
			for k, st := range tc.steps {
				got := hs[st.i].release(st.now)
				var want []*commHandle
				for _, j := range st.want {
					want = append(want, hs[j])
				}
				require.Equal(t, want, got, "step %d", k)
			}
			require.NoError(t, closeAll(hs))
			for _, h := range hs {
				require.True(t, h.dead)
			}
		})
	}
}
