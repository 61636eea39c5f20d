//go:build cgo

package ucx

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadErrorSaysWhatToDo: a GOCCL_UCX_PATH that names nothing fails
// naming the path and the setting.
func TestLoadErrorSaysWhatToDo(t *testing.T) {
	err := load("/nonexistent/libucp.so.0")
	require.ErrorIs(t, err, ErrUnavailable)
	assert.Contains(t, err.Error(), "/nonexistent/libucp.so.0")
	assert.Contains(t, err.Error(), "GOCCL_UCX_PATH")
	dir := t.TempDir()
	err = load(dir)
	require.ErrorIs(t, err, ErrUnavailable)
	assert.Contains(t, err.Error(), dir+"/libucp.so.0")
	_ = os.Remove(dir)
}
