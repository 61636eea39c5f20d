package fp8

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type format struct {
	name   string
	widen  func(uint8) float32
	narrow func(float32) uint8
	isNaN  func(uint8) bool
	mant   int
	bias   int
	max    float64
}

var formats = []format{
	{"e4m3", E4M3ToFloat32, Float32ToE4M3, IsNaNE4M3, 3, 7, E4M3Max},
	{"e5m2", E5M2ToFloat32, Float32ToE5M2, IsNaNE5M2, 2, 15, E5M2Max},
}

// refValue decodes a code from the format's definition, by formula.
func refValue(f format, b uint8) float64 {
	e := int(b&0x7f) >> f.mant
	m := float64(int(b) & (1<<f.mant - 1))
	frac := m / float64(int(1)<<f.mant)
	v := math.Pow(2, float64(e-f.bias)) * (1 + frac)
	if e == 0 {
		v = math.Pow(2, float64(1-f.bias)) * frac
	}
	if b&0x80 != 0 {
		v = -v
	}
	return v
}

// refNarrow searches every finite code for the nearest to x (ties to the
// even code), which is also the saturating rule: beyond the largest
// finite value, that value is the nearest.
func refNarrow(f format, x float64) uint8 {
	if math.IsNaN(x) {
		return 0x7f
	}
	if math.Abs(x) >= f.max { // satfinite: infinities too
		x = math.Copysign(f.max, x)
	}
	best, bestD := -1, math.Inf(1)
	for c := 0; c < 128; c++ {
		if f.isNaN(uint8(c)) || math.IsInf(float64(f.widen(uint8(c))), 0) {
			continue
		}
		d := math.Abs(math.Abs(x) - refValue(f, uint8(c)))
		if d < bestD || (d == bestD && c%2 == 0) {
			best, bestD = c, d
		}
	}
	if x < 0 || (x == 0 && math.Signbit(x)) {
		best |= 0x80
	}
	return uint8(best)
}

func TestWidenMatchesDefinition(t *testing.T) {
	for _, f := range formats {
		for c := 0; c < 256; c++ {
			b := uint8(c)
			got := float64(f.widen(b))
			switch {
			case f.isNaN(b):
				assert.True(t, math.IsNaN(got), "%s %#x", f.name, c)
			case f.name == "e5m2" && b&0x7f == 0x7c:
				assert.True(t, math.IsInf(got, 1-2*int(b>>7)), "%s %#x", f.name, c)
			default:
				assert.Equal(t, refValue(f, b), got, "%s %#x", f.name, c)
			}
		}
		assert.Equal(t, f.max, float64(f.widen(f.narrow(float32(f.max)))), f.name)
	}
}

func TestNarrowMatchesNearestSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range formats {
		var xs []float32
		// Every code, the midpoints between neighbours (the ties) and
		// points just beside them, then random magnitudes over the range.
		for c := 0; c < 127; c++ {
			if f.isNaN(uint8(c)) || f.isNaN(uint8(c+1)) {
				continue
			}
			lo, hi := refValue(f, uint8(c)), refValue(f, uint8(c+1))
			if math.IsInf(float64(f.widen(uint8(c+1))), 0) {
				hi = 2 * f.max
			}
			mid := float32((lo + hi) / 2)
			xs = append(xs, float32(lo), mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1e30))
		}
		for range 20000 {
			xs = append(xs, float32(math.Ldexp(rng.Float64(), rng.IntN(40)-24)))
		}
		xs = append(xs, float32(math.Inf(1)), 1e30, float32(f.max)*1.03, 1e-30, math.SmallestNonzeroFloat32)
		for _, x := range xs {
			for _, s := range []float32{1, -1} {
				v := x * s
				require.Equal(t, refNarrow(f, float64(v)), f.narrow(v), "%s of %g", f.name, v)
			}
		}
		assert.True(t, f.isNaN(f.narrow(float32(math.NaN()))), f.name)
		assert.Equal(t, uint8(0x80), f.narrow(float32(math.Copysign(0, -1))), f.name)
	}
}

func TestInfinitySaturates(t *testing.T) {
	assert.Equal(t, uint8(0x7e), Float32ToE4M3(float32(math.Inf(1))))
	assert.Equal(t, uint8(0xfe), Float32ToE4M3(float32(math.Inf(-1))))
	assert.Equal(t, uint8(0x7b), Float32ToE5M2(float32(math.Inf(1))))
	assert.Equal(t, uint8(0xfb), Float32ToE5M2(float32(math.Inf(-1))))
}

func BenchmarkNarrowE4M3(b *testing.B) {
	xs := make([]float32, 4096)
	for i := range xs {
		xs[i] = float32(i%61-30) / 7
	}
	out := make([]uint8, len(xs))
	b.SetBytes(int64(len(xs)))
	for b.Loop() {
		for i, x := range xs {
			out[i] = Float32ToE4M3(x)
		}
	}
}
