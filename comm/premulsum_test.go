package comm

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// Each rank scales by its own factor, one by value and one by address
// (changed between calls); the sum is checked against int64 arithmetic,
// which the float64 inputs (small integers) hold exactly.
func TestPreMulSumHandles(t *testing.T) {
	comms := hostComms(t, 3)
	const count = 513
	rng := rand.New(rand.NewPCG(3, 4))
	in := make([][]float64, len(comms))
	for r := range in {
		in[r] = make([]float64, count)
		for i := range in[r] {
			in[r][i] = float64(rng.IntN(2001) - 1000)
		}
	}
	factor := make([]float64, len(comms)) // read through ScalarAt by odd ranks
	for round, mult := range []float64{2, -3} {
		out := make([][]float64, len(comms))
		errs := eachRank(comms, func(c *Comm) error {
			r := c.Rank()
			factor[r] = mult * float64(r+1)
			s := ScalarAt(uintptr(unsafe.Pointer(&factor[r])))
			if r%2 == 0 {
				var err error
				if s, err = ScalarOf(Float64, factor[r]); err != nil {
					return err
				}
			}
			op, err := c.CreatePreMulSum(s, Float64)
			if err != nil {
				return err
			}
			out[r] = make([]float64, count)
			for i := range out[r] {
				out[r][i] = 1e300 // poison
			}
			err = c.AllReduce(context.Background(), uintptr(unsafe.Pointer(&in[r][0])), uintptr(unsafe.Pointer(&out[r][0])), count, Float64, op, 0)
			return errors.Join(err, c.DestroyOp(op))
		})
		for r, err := range errs {
			require.NoError(t, err, "round %d rank %d", round, r)
		}
		for i := 0; i < count; i++ {
			var want int64
			for r := range comms {
				want += int64(in[r][i]) * int64(mult) * int64(r+1)
			}
			for r := range comms {
				require.Equal(t, float64(want), out[r][i], "round %d rank %d element %d", round, r, i)
			}
		}
	}
}

func TestPreMulSumBadHandles(t *testing.T) {
	comms := hostComms(t, 1)
	c := comms[0]
	ctx := context.Background()
	buf := make([]int32, 4)
	p := uintptr(unsafe.Pointer(&buf[0]))
	s, err := ScalarOf(Int32, 3)
	require.NoError(t, err)
	op, err := c.CreatePreMulSum(s, Int32)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, int(op), int(collectives.NumOps))

	// One rank: the input is still scaled.
	buf[0], buf[1] = 5, -7
	require.NoError(t, c.AllReduce(ctx, p, p, 2, Int32, op, 0))
	assert.Equal(t, []int32{15, -21}, buf[:2])

	err = c.AllReduce(ctx, p, p, 4, Float32, op, 0)
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "created for int32")

	err = c.AllReduce(ctx, p, p, 4, Int32, collectives.PreMulSum, 0)
	require.ErrorIs(t, err, collectives.ErrUnknownOp)
	assert.Contains(t, err.Error(), "needs a scalar")

	require.NoError(t, c.DestroyOp(op))
	err = c.AllReduce(ctx, p, p, 4, Int32, op, 0)
	require.ErrorIs(t, err, collectives.ErrUnknownOp)
	require.ErrorIs(t, c.DestroyOp(op), collectives.ErrUnknownOp)
	require.ErrorIs(t, c.DestroyOp(Sum), collectives.ErrUnknownOp)
	_, err = c.CreatePreMulSum(s, DataType(99))
	require.ErrorIs(t, err, collectives.ErrUnknownDataType)

	// A freed handle is reused; a Group resolves handles too.
	op2, err := c.CreatePreMulSum(s, Int32)
	require.NoError(t, err)
	assert.Equal(t, op, op2)
	var g Group
	buf[0] = 2
	require.NoError(t, g.AllReduce(c, p, p, 1, Int32, op2, 0))
	require.NoError(t, g.Run(ctx))
	assert.Equal(t, int32(6), buf[0])
}
