//go:build !cgo

package cuda

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadWithoutCgo: a build without cgo cannot reach the driver; Load
// says why, as an ErrNoDriver and not a CUDA result, and every time.
func TestLoadWithoutCgo(t *testing.T) {
	drv, err := Load()
	require.ErrorIs(t, err, ErrNoDriver)
	assert.Nil(t, drv)
	assert.Contains(t, err.Error(), "CGO_ENABLED=0")
	var ce *Error
	assert.False(t, errors.As(err, &ce))
	_, again := Load()
	assert.Equal(t, err, again)
	assert.False(t, Resolved("cuMemAlloc_v2"))
}
