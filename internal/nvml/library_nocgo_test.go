//go:build !cgo

package nvml

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenWithoutCgo: a build without cgo cannot load NVML; Open says why
// and names the library.
func TestOpenWithoutCgo(t *testing.T) {
	lib, err := Open()
	require.ErrorIs(t, err, ErrNoLibrary)
	assert.Nil(t, lib)
	assert.Contains(t, err.Error(), DefaultPath)
	assert.Contains(t, err.Error(), "CGO_ENABLED=0")
}
