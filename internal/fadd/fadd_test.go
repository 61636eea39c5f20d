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

// checkSums: the bits of Go's loop at every length up to 70 (each path of
// the unrolled loops and their tails), special values (NaNs of several
// payloads on either side, infinities, signed zeros, denormals, extremes)
// against every other, and nothing past d's end.
func checkSums[F float32 | float64, B uint32 | uint64](t *testing.T, rng *rand.Rand, specials []B,
	fromBits func(B) F, toBits func(F) B, sum func(d, x, y []F)) {
	t.Helper()
	poison := B(0xa5a5a5a5a5a5a5a5 & uint64(^B(0)))
	for n := 0; n <= 70; n++ {
		x, y := make([]F, n), make([]F, n)
		for i := range x {
			x[i], y[i] = F(rng.NormFloat64()*1e3), F(rng.NormFloat64())
			if i < len(specials)*len(specials) {
				x[i] = fromBits(specials[i%len(specials)])
				y[i] = fromBits(specials[(i/len(specials)+i)%len(specials)])
			}
		}
		got := make([]F, n+3)
		for i := range got {
			got[i] = fromBits(poison)
		}
		sum(got[:n], x, y)
		for i := 0; i < n; i++ {
			want := x[i] + y[i]
			require.Equal(t, toBits(want), toBits(got[i]), "n %d element %d: %v + %v", n, i, x[i], y[i])
		}
		for i := n; i < len(got); i++ {
			require.Equal(t, poison, toBits(got[i]), "n %d: element %d past the end", n, i)
		}
	}
}

func TestF32(t *testing.T) {
	checkSums(t, rand.New(rand.NewPCG(1, 2)), specials32, math.Float32frombits, math.Float32bits, F32)
}

func TestF64(t *testing.T) {
	checkSums(t, rand.New(rand.NewPCG(3, 4)), specials64, math.Float64frombits, math.Float64bits, F64)
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
