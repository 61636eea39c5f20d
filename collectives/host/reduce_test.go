package host

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/half"
)

// TestHalfConversionsMatch checks the kernels' float16 conversions
// against internal/half: every binary16 value, and float32 values around
// every rounding boundary, subnormals, overflow and NaN.
func TestHalfConversionsMatch(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		want := half.Float16ToFloat32(uint16(h))
		got := f16to32(uint16(h))
		if math.IsNaN(float64(want)) {
			require.True(t, math.IsNaN(float64(got)), "%#04x", h)
			continue
		}
		require.Equal(t, math.Float32bits(want), math.Float32bits(got), "widen %#04x", h)
	}
	check := func(f float32) {
		want, got := half.Float32ToFloat16(f), f32to16(f)
		if math.IsNaN(float64(f)) {
			require.Equal(t, want&0x7e00, got&0x7e00, "NaN %#08x", math.Float32bits(f))
			return
		}
		require.Equal(t, want, got, "narrow %g (%#08x)", f, math.Float32bits(f))
	}
	for u := uint32(0); u < 1<<32-1<<12; u += 1 << 12 { // every 4096th float32
		check(math.Float32frombits(u))
		check(math.Float32frombits(u + 0xfff)) // just under the next step
		check(math.Float32frombits(u | 0x1000))
	}
	for _, f := range []float32{65504, 65519.99, 65520, 1e-8, 5.96e-8, 2.98e-8, 2.9802322e-08, 6.1035156e-05, float32(math.Inf(1)), float32(math.NaN())} {
		check(f)
		check(-f)
	}
}

func TestSWARByteSum(t *testing.T) {
	x := make([]uint8, 259)
	y := make([]uint8, 259)
	for i := range x {
		x[i], y[i] = uint8(i*37+11), uint8(255-i*13)
	}
	x[0], y[0] = 0xff, 0x01 // carry out of the top lane bit
	x[1], y[1] = 0x80, 0x80
	x[7], y[7] = 0x7f, 0x01 // carry into the top lane bit
	d := make([]uint8, len(x))
	sumBytes2(d, x, y)
	acc := append([]uint8(nil), x...)
	sumBytesIn(acc, y)
	for i := range x {
		require.Equal(t, x[i]+y[i], d[i], "two-source, byte %d", i)
		require.Equal(t, x[i]+y[i], acc[i], "accumulate, byte %d", i)
	}
}
