package check

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fp8"
)

// twoLegs reduces an 8-bit float AllReduce as a reduction across two nodes
// of two ranks does: each node's pair in float32, rounded to the type, then
// the two partials in float32, rounded again.
func twoLegs(c Case, in [][]byte) []byte {
	toF, fromF := fp8.E4M3ToFloat32, fp8.Float32ToE4M3
	if c.Type == collectives.Float8E5M2 {
		toF, fromF = fp8.E5M2ToFloat32, fp8.Float32ToE5M2
	}
	op := func(a, b float32) float32 {
		if c.Op == collectives.Prod {
			return a * b
		}
		return a + b
	}
	out := make([]byte, c.Count)
	for i := range out {
		lo := fromF(op(toF(in[0][i]), toF(in[1][i])))
		hi := fromF(op(toF(in[2][i]), toF(in[3][i])))
		out[i] = fromF(op(toF(lo), toF(hi)))
	}
	return out
}

func TestRoundingsWidenOnlyWhatTheyMust(t *testing.T) {
	for _, dt := range []collectives.DataType{collectives.Float8E4M3, collectives.Float8E5M2} {
		for _, op := range []collectives.Op{collectives.Sum, collectives.Prod} {
			t.Run(fmt.Sprintf("%v/%v", dt, op), func(t *testing.T) {
				c := Case{Coll: collectives.AllReduce, Type: dt, Op: op, NRanks: 4, Count: 4095, Seed: 0xd405e1560ee88cee}
				got := twoLegs(c, inputs(t, c))

				once, err := Verify(c, 0, got)
				require.NoError(t, err)
				c.Roundings = 2
				twice, err := Verify(c, 0, got)
				require.NoError(t, err)
				assert.Zero(t, twice.Wrong, "two roundings allowed: %v", twice)
				if dt == collectives.Float8E4M3 {
					// e4m3's partials are rounded often enough to leave
					// the one-rounding bound (the GPU across nodes did).
					assert.Positive(t, once.Wrong, "one rounding allowed must reject two legs")
				}

				// A wrong value stays wrong with the wider bound.
				bad := append([]byte(nil), got...)
				bad[10] ^= 0x40
				res, err := Verify(c, 0, bad)
				require.NoError(t, err)
				assert.Positive(t, res.Wrong, "a flipped exponent bit must fail")
			})
		}
	}
}
