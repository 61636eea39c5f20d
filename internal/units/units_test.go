package units

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"8", 8, true}, {"1K", 1024, true}, {"64M", 64 << 20, true}, {"2G", 2 << 30, true},
		{"1.5k", 1536, true}, {"0", 0, true}, {"64m", 64 << 20, true},
		{"", 0, false}, {"x", 0, false}, {"-1", 0, false}, {"8T", 0, false},
		{"nan", 0, false}, {"NaNM", 0, false}, {"inf", 0, false}, {"-0.5", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if !tt.ok {
			assert.Errorf(t, err, "%q", tt.in)
			continue
		}
		require.NoErrorf(t, err, "%q", tt.in)
		assert.Equal(t, tt.want, got, tt.in)
	}
}
