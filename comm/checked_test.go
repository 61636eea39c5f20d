package comm

import (
	"context"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// TestHostRunsChecked: the host backend is handed calls the communicator
// has checked (its RunChecked skips the second check), and the
// communicator's own check still turns bad arguments away with their
// sentinels, on a rank that keeps working.
func TestHostRunsChecked(t *testing.T) {
	c, _, _ := oneRank(t, "0")
	require.NotNil(t, c.checked, "the host backend runs checked calls")
	ctx := context.Background()
	send := []float32{1.5, -2, 3.25, 4}
	recv := make([]float32, 8)
	s, r := uintptr(unsafe.Pointer(&send[0])), uintptr(unsafe.Pointer(&recv[0]))
	for _, tc := range []struct {
		name       string
		send, recv uintptr
		count      int
		dt         DataType
		op         Op
		want       error
	}{
		{"nil send", 0, r, 4, Float32, Sum, collectives.ErrNilPointer},
		{"nil recv", s, 0, 4, Float32, Sum, collectives.ErrNilPointer},
		{"misaligned recv", s, r + 2, 1, Float32, Sum, collectives.ErrMisaligned},
		{"negative count", s, r, -1, Float32, Sum, collectives.ErrInvalidCount},
		{"unknown type", s, r, 4, DataType(99), Sum, collectives.ErrUnknownDataType},
		{"unknown op", s, r, 4, Float32, Op(42), collectives.ErrUnknownOp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.AllReduce(ctx, tc.send, tc.recv, tc.count, tc.dt, tc.op, 0)
			require.ErrorIs(t, err, tc.want)
		})
	}
	for i := range recv {
		recv[i] = -7 // poisoned
	}
	require.NoError(t, c.AllReduce(ctx, s, r, 4, Float32, Sum, 0))
	assert.Equal(t, []float32{1.5, -2, 3.25, 4, -7, -7, -7, -7}, recv)
}
