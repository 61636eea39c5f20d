package comm

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// TestAllocSlice: slices from AllocSlice carry typed calls on the host
// backend's direct path (whole and as sub-slices), with results checked
// against sums computed here; a bad n fails every rank.
func TestAllocSlice(t *testing.T) {
	const n, count = 3, 100003
	comms := hostComms(t, n)
	ctx := context.Background()
	ins := make([][]float64, n)
	for r := range ins {
		rng := rand.New(rand.NewPCG(uint64(r), 7))
		ins[r] = make([]float64, count)
		for i := range ins[r] {
			ins[r][i] = rng.Float64()
		}
	}
	want := make([]float64, count)
	for i := range want {
		for r := range ins { // the backend's order: by rank
			want[i] += ins[r][i]
		}
	}
	bufs := make([][]float64, n)
	regs := make([]Registration, n)
	requireAll(t, eachRank(comms, func(c *Comm) error {
		var err error
		bufs[c.Rank()], regs[c.Rank()], err = AllocSlice[float64](ctx, c, 2*count+1)
		return err
	}))
	requireAll(t, eachRank(comms, func(c *Comm) error {
		b := bufs[c.Rank()]
		assert.Equal(t, make([]float64, len(b)), b, "zeroed")
		send, recv := b[1:count+1], b[count+1:]
		copy(send, ins[c.Rank()])
		for i := range recv {
			recv[i] = -1
		}
		return AllReduceSlice(ctx, c, send, recv, Sum)
	}))
	for r, c := range comms {
		assert.Equal(t, "shm-direct", c.backend.(collectives.PathTeller).LastPath().Transport, "rank %d", r)
		assert.InDeltaSlice(t, want, bufs[r][count+1:], 1e-12, "rank %d", r)
	}
	// AllGather in place on the same memory.
	requireAll(t, eachRank(comms, func(c *Comm) error {
		all := bufs[c.Rank()][:n*7]
		for i := range 7 {
			all[c.Rank()*7+i] = float64(100*c.Rank() + i)
		}
		return AllGatherSlice(ctx, c, all[c.Rank()*7:(c.Rank()+1)*7], all)
	}))
	for r := range comms {
		for q := range n {
			for i := range 7 {
				assert.Equal(t, float64(100*q+i), bufs[r][q*7+i], "rank %d block %d", r, q)
			}
		}
	}
	requireAll(t, eachRank(comms, func(c *Comm) error { return regs[c.Rank()].Close(ctx) }))

	for _, bad := range []int{0, -1} {
		errs := eachRank(comms, func(c *Comm) error {
			_, _, err := AllocSlice[float64](ctx, c, bad)
			return err
		})
		for r, err := range errs {
			require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
			assert.Contains(t, err.Error(), "n is", "rank %d", r)
		}
	}
	// The communicator still works.
	requireAll(t, eachRank(comms, func(c *Comm) error {
		x := []int32{int32(c.Rank())}
		return AllReduceSlice(ctx, c, x, x, Sum)
	}))
}
