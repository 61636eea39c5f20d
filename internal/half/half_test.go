package half

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFloat16RoundTripAllValues(t *testing.T) {
	// Every non-NaN binary16 value widens and narrows back to itself.
	for h := 0; h < 1<<16; h++ {
		f := Float16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		assert.Equal(t, uint16(h), Float32ToFloat16(f), "h=%#04x f=%g", h, f)
	}
}

func TestFloat16Known(t *testing.T) {
	cases := []struct {
		f float32
		h uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65520, 0x7c00},
		{5.960464477539063e-08, 0x0001}, {0.333333333, 0x3555},
		{1.0009765625 /* 1+2^-10 */, 0x3c01}, {1.00048828125 /* tie, even */, 0x3c00},
		{1.00146484375 /* tie, odd rounds up */, 0x3c02},
	}
	for _, c := range cases {
		assert.Equal(t, c.h, Float32ToFloat16(c.f), "f=%g", c.f)
	}
}

func TestBFloat16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := BFloat16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		assert.Equal(t, uint16(h), Float32ToBFloat16(f))
	}
	assert.Equal(t, uint16(0x3f80), Float32ToBFloat16(1))
	assert.Equal(t, uint16(0x3f80), Float32ToBFloat16(math.Float32frombits(0x3f808000))) // tie to even
	assert.Equal(t, uint16(0x3f82), Float32ToBFloat16(math.Float32frombits(0x3f818000))) // tie, odd up
	assert.True(t, math.IsNaN(float64(BFloat16ToFloat32(Float32ToBFloat16(float32(math.NaN()))))))
}
