package topology

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNormalizeBusID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0000:18:00.0", "0000:18:00.0"},
		{"0000:3B:00.0", "0000:3b:00.0"},     // CUDA
		{"00000000:3B:00.0", "0000:3b:00.0"}, // NVML
		{"00000001:c1:00.0", "0001:c1:00.0"}, // another domain
		{" 0000:18:00.0\n", "0000:18:00.0"},  // read from a file
		{"3b:00.0", "3b:00.0"},               // no domain: as given
		{"zz:3b:00.0", "zz:3b:00.0"},         // not hex: as given
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, NormalizeBusID(tt.in), tt.in)
	}
}

func TestFormatUUID(t *testing.T) {
	u := [16]byte{0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xa, 0xb}
	assert.Equal(t, "GPU-deadbeef-0001-0203-0405-060708090a0b", formatUUID(u))
}

func TestNVLinkGBs(t *testing.T) {
	tests := []struct {
		major, minor int
		want         float64
	}{
		{6, 0, 20}, {7, 0, 25}, {8, 0, 25}, {8, 6, 14.0625}, {9, 0, 25}, {10, 0, 50}, {5, 2, 0},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, NVLinkGBs(tt.major, tt.minor), "sm_%d%d", tt.major, tt.minor)
	}
}
