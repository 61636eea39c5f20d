package check

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

func TestBlocks(t *testing.T) {
	for _, dt := range collectives.AllDataTypes() {
		a, b := make([]byte, 37*dt.Size()), make([]byte, 37*dt.Size())
		require.NoError(t, FillBlock(dt, 4, 1, 2, 9, a))
		require.NoError(t, FillBlock(dt, 4, 1, 2, 9, b))
		assert.Equal(t, a, b, "%v: the same block twice", dt)
		c := make([]byte, len(a))
		require.NoError(t, FillBlock(dt, 4, 2, 1, 9, c))
		assert.NotEqual(t, a, c, "%v: the reverse direction differs", dt)
		scratch := make([]byte, len(a))
		res, err := VerifyBlock(dt, 4, 1, 2, 9, a, scratch)
		require.NoError(t, err)
		assert.True(t, res.OK())
		assert.Equal(t, 37, res.Checked)
		a[len(a)-1] ^= 0x40
		res, err = VerifyBlock(dt, 4, 1, 2, 9, a, scratch)
		require.NoError(t, err)
		assert.Equal(t, 1, res.Wrong, "%v", dt)
		assert.Equal(t, 36, res.First[0].Index)
	}
	require.Error(t, FillBlock(collectives.Float32, 4, 1, 2, 9, make([]byte, 3)))
	require.Error(t, FillBlock(collectives.Float32, 4, 1, 4, 9, make([]byte, 4)))
	_, err := VerifyBlock(collectives.Int8, 2, 0, 1, 1, make([]byte, 4), make([]byte, 3))
	require.Error(t, err)
}
