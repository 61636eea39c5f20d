package fadd

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

var specials32 = []uint32{0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa5a5a5, 0x7f800000, 0xff800000, 0, 0x80000000,
	1, 0x80000001, 0x007fffff, 0x7f7fffff, 0xff7fffff, 0x3f800000}

var specials64 = []uint64{0x7ff8000000000000, 0xfff8000000000001, 0x7ff0000000000001, 0x7ff0000000000000,
	0xfff0000000000000, 0, 1 << 63, 1, 1<<63 | 1, 0x000fffffffffffff, 0x7fefffffffffffff, 0x3ff0000000000000}

// TestF32 and TestF64: the bits of Go's loop at every length up to 70
// (each path of the unrolled loops and their tails), special values
// (NaNs of several payloads on either side, infinities, signed zeros,
// denormals, extremes) against every other, and nothing past d's end.
func TestF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 70; n++ {
		x, y := make([]float32, n), make([]float32, n)
		for i := range x {
			x[i], y[i] = float32(rng.NormFloat64()*1e3), float32(rng.NormFloat64())
			if i < len(specials32)*len(specials32) {
				x[i] = math.Float32frombits(specials32[i%len(specials32)])
				y[i] = math.Float32frombits(specials32[(i/len(specials32)+i)%len(specials32)])
			}
		}
		got := make([]float32, n+3)
		for i := range got {
			got[i] = math.Float32frombits(0xa5a5a5a5)
		}
		F32(got[:n], x, y)
		for i := 0; i < n; i++ {
			want := x[i] + y[i]
			require.Equal(t, math.Float32bits(want), math.Float32bits(got[i]), "n %d element %d: %v + %v", n, i, x[i], y[i])
		}
		for i := n; i < len(got); i++ {
			require.Equal(t, uint32(0xa5a5a5a5), math.Float32bits(got[i]), "n %d: element %d past the end", n, i)
		}
	}
}

func TestF64(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n <= 70; n++ {
		x, y := make([]float64, n), make([]float64, n)
		for i := range x {
			x[i], y[i] = rng.NormFloat64()*1e3, rng.NormFloat64()
			if i < len(specials64)*len(specials64) {
				x[i] = math.Float64frombits(specials64[i%len(specials64)])
				y[i] = math.Float64frombits(specials64[(i/len(specials64)+i)%len(specials64)])
			}
		}
		got := make([]float64, n+3)
		for i := range got {
			got[i] = math.Float64frombits(0xa5a5a5a5a5a5a5a5)
		}
		F64(got[:n], x, y)
		for i := 0; i < n; i++ {
			want := x[i] + y[i]
			require.Equal(t, math.Float64bits(want), math.Float64bits(got[i]), "n %d element %d: %v + %v", n, i, x[i], y[i])
		}
		for i := n; i < len(got); i++ {
			require.Equal(t, uint64(0xa5a5a5a5a5a5a5a5), math.Float64bits(got[i]), "n %d: element %d past the end", n, i)
		}
	}
}

// TestShort: a source shorter than d leaves d untouched.
func TestShort(t *testing.T) {
	d := []float32{7, 7}
	F32(d, []float32{1}, []float32{1, 2})
	require.Equal(t, []float32{7, 7}, d)
	e := []float64{7, 7}
	F64(e, []float64{1, 2}, []float64{1})
	require.Equal(t, []float64{7, 7}, e)
}

func BenchmarkF32x64(b *testing.B) {
	x, y, d := make([]float32, 64), make([]float32, 64), make([]float32, 64)
	for b.Loop() {
		F32(d, x, y)
	}
}
