package comm

import (
	"context"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The real host backend under InitAll: a smoke test of the wiring (the
// backend's own suite checks every collective, dtype and op).
func TestInitAllHostBackendAllReduce(t *testing.T) {
	opts := Options{Backend: BackendHost, Env: map[string]string{}, Logger: discardLogger()}
	comms, err := InitAll(context.Background(), []int{0, 1, 2}, opts)
	require.NoError(t, err)
	defer func() {
		for _, err := range eachRank(comms, func(c *Comm) error { return c.Close() }) {
			require.NoError(t, err)
		}
	}()
	const count = 1000
	bufs := make([][]float32, len(comms))
	errs := eachRank(comms, func(c *Comm) error {
		b := make([]float32, count)
		for i := range b {
			b[i] = float32(c.Rank()*count + i)
		}
		bufs[c.Rank()] = b
		p := uintptr(unsafe.Pointer(&b[0]))
		return c.AllReduce(context.Background(), p, p, count, Float32, Sum, 0)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for r, b := range bufs {
		for i, v := range b {
			require.Equal(t, float32(3*i+count*(0+1+2)), v, "rank %d element %d", r, i)
		}
	}
	require.Equal(t, BackendHost, comms[0].BackendName())
}
