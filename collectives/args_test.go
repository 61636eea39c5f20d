package collectives

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// Validate's size and alignment checks at their edges: the largest count
// whose bytes (times the ranks for AllGather) still fit an int64 passes,
// one more fails; every type's buffers one byte off its alignment fail.
func TestValidateCountAndAlignmentEdges(t *testing.T) {
	const ranks = 4
	maxGather := math.MaxInt64 / 8 / ranks
	type validateCase struct {
		name string
		a    Args
		want error
	}
	cases := []validateCase{
		{"largest allgather", Args{Coll: AllGather, Type: Float64, Count: maxGather, Send: 8, Recv: 8}, nil},
		{"allgather one over", Args{Coll: AllGather, Type: Float64, Count: maxGather + 1, Send: 8, Recv: 8}, ErrInvalidCount},
		{"largest allreduce", Args{Coll: AllReduce, Type: Int32, Count: math.MaxInt64 / 4, Send: 4, Recv: 4}, nil},
		{"allreduce one over", Args{Coll: AllReduce, Type: Int32, Count: math.MaxInt64/4 + 1, Send: 4, Recv: 4}, ErrInvalidCount},
		{"bytes any count", Args{Coll: AllReduce, Type: Uint8, Count: math.MaxInt64, Send: 1, Recv: 3}, nil},
	}
	for _, dt := range AllDataTypes() {
		sz := uintptr(dt.Size())
		cases = append(cases, validateCase{"aligned " + dt.String(), Args{Coll: AllReduce, Type: dt, Count: 1, Send: 16 * sz, Recv: 32 * sz}, nil})
		if sz > 1 {
			cases = append(cases,
				validateCase{"send off " + dt.String(), Args{Coll: AllReduce, Type: dt, Count: 1, Send: 16*sz + sz/2, Recv: 32 * sz}, ErrMisaligned},
				validateCase{"recv off " + dt.String(), Args{Coll: AllReduce, Type: dt, Count: 1, Send: 16 * sz, Recv: 32*sz + 1}, ErrMisaligned})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.a.Validate(0, ranks)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.True(t, errors.Is(err, c.want), "got %v, want %v", err, c.want)
		})
	}
}
