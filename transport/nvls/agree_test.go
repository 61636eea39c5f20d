package nvls

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLayoutArithmetic(t *testing.T) {
	cases := []struct {
		n, g, want uint64
		err        bool
	}{
		{0, 4, 0, false}, {1, 4, 4, false}, {4, 4, 4, false}, {5, 4, 8, false},
		{7, 3, 9, false}, {^uint64(0) - 1, 4, 0, true}, {1, 0, 0, true},
	}
	for _, c := range cases {
		got, err := roundUp(c.n, c.g)
		if c.err {
			assert.Error(t, err, "roundUp(%d,%d)", c.n, c.g)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, c.want, got, "roundUp(%d,%d)", c.n, c.g)
	}
	l, err := lcm(6<<20, 4<<20)
	require.NoError(t, err)
	assert.Equal(t, uint64(12<<20), l)
	_, err = lcm(3<<61, 5<<60)
	assert.Error(t, err, "overflow")
}
