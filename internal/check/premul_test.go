package check

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fp8"
	"github.com/goccl/goccl/internal/half"
)

// premulOutput computes a PreMulSum AllReduce as NCCL defines it, written
// out here: each rank's input times its scalar, rounded to the type (the
// product in float32 for the narrow floats), then summed in float32 (or
// the integer type) and rounded once.
func premulOutput(t *testing.T, c Case) []byte {
	es := c.Type.Size()
	in := inputs(t, c)
	out := make([]byte, c.Count*es)
	le := binary.LittleEndian
	for i := 0; i < c.Count; i++ {
		var facc float64
		var iacc uint64
		for r := 0; r < c.NRanks; r++ {
			s := PremulScalar(c, r)
			b := in[r][i*es:]
			switch c.Type {
			case collectives.Float32:
				facc = float64(float32(facc) + float32(math.Float32frombits(le.Uint32(b))*float32(s)))
			case collectives.Float64:
				facc += math.Float64frombits(le.Uint64(b)) * s
			case collectives.Float16:
				facc = float64(float32(facc) + half.Float16ToFloat32(half.Float32ToFloat16(half.Float16ToFloat32(le.Uint16(b))*float32(s))))
			case collectives.BFloat16:
				facc = float64(float32(facc) + half.BFloat16ToFloat32(half.Float32ToBFloat16(half.BFloat16ToFloat32(le.Uint16(b))*float32(s))))
			case collectives.Float8E4M3:
				facc = float64(float32(facc) + fp8.E4M3ToFloat32(fp8.Float32ToE4M3(fp8.E4M3ToFloat32(b[0])*float32(s))))
			case collectives.Float8E5M2:
				facc = float64(float32(facc) + fp8.E5M2ToFloat32(fp8.Float32ToE5M2(fp8.E5M2ToFloat32(b[0])*float32(s))))
			default:
				var w [8]byte
				copy(w[:], b[:es])
				iacc += binary.LittleEndian.Uint64(w[:]) * uint64(int64(s))
			}
		}
		o := out[i*es:]
		switch c.Type {
		case collectives.Float32:
			le.PutUint32(o, math.Float32bits(float32(facc)))
		case collectives.Float64:
			le.PutUint64(o, math.Float64bits(facc))
		case collectives.Float16:
			le.PutUint16(o, half.Float32ToFloat16(float32(facc)))
		case collectives.BFloat16:
			le.PutUint16(o, half.Float32ToBFloat16(float32(facc)))
		case collectives.Float8E4M3:
			o[0] = fp8.Float32ToE4M3(float32(facc))
		case collectives.Float8E5M2:
			o[0] = fp8.Float32ToE5M2(float32(facc))
		default:
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], iacc)
			copy(o, w[:es])
		}
	}
	return out
}

func TestPreMulSumReference(t *testing.T) {
	for _, n := range []int{1, 2, 5, 8} {
		for _, dt := range collectives.AllDataTypes() {
			c := Case{Coll: collectives.AllReduce, Type: dt, Op: collectives.PreMulSum, NRanks: n, Count: 999, Seed: uint64(77 + n)}
			got := premulOutput(t, c)
			res, err := Verify(c, 0, got)
			require.NoError(t, err)
			assert.True(t, res.OK(), "%v: %v", c, res)
			// Ranks' scalars differ, and a result scaled by one rank's
			// scalar only, or off by one unit, is caught.
			if n > 1 {
				assert.NotEqual(t, PremulScalar(c, 0), PremulScalar(c, 1))
			}
			bad := append([]byte(nil), got...)
			bad[dt.Size()-1] ^= 0x40 // an exponent bit, or a high bit
			res, err = Verify(c, 0, bad)
			require.NoError(t, err)
			assert.Equal(t, 1, res.Wrong, "%v", c)
		}
	}
}

// The 8-bit floats' inputs lie on their grid exactly.
func TestFP8InputsExact(t *testing.T) {
	for _, dt := range []collectives.DataType{collectives.Float8E4M3, collectives.Float8E5M2} {
		c := Case{Coll: collectives.AllReduce, Type: dt, Op: collectives.Sum, NRanks: 4, Count: 4096, Seed: 5}
		in := inputs(t, c)
		g := newGen(c)
		got := make([]float64, c.Count)
		decodeFloat(dt, in[2], got)
		for i, v := range got {
			require.Equal(t, g.dom.float(g.word(2, i)), v, "%s element %d", dt, i)
		}
	}
}
