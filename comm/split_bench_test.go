package comm

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkSplit times one Split of 4 ranks into two colors and the
// children's Close (every rank at once, in one process, host backend).
func BenchmarkSplit(b *testing.B) {
	comms, err := InitAll(context.Background(), make([]int, 4), hostOpts())
	require.NoError(b, err)
	defer func() {
		for _, err := range eachRank(comms, func(c *Comm) error { return c.Close() }) {
			require.NoError(b, err)
		}
	}()
	colors, keys := []int{0, 1, 0, 1}, []int{0, 0, 0, 0}
	b.ResetTimer()
	for b.Loop() {
		kids, errs := splitAll(comms, colors, keys, Options{})
		for r, err := range errs {
			require.NoError(b, err, "rank %d", r)
		}
		for _, err := range eachRank(kids, func(c *Comm) error { return c.Close() }) {
			require.NoError(b, err)
		}
	}
}
