//go:build !cgo

package nccl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoCgoLoadFails: without cgo Load fails naming the cause, wrapping
// ErrUnavailable, and a Library's calls fail the same way.
func TestNoCgoLoadFails(t *testing.T) {
	l, err := Load()
	require.ErrorIs(t, err, ErrUnavailable)
	assert.Nil(t, l)
	assert.Contains(t, err.Error(), "CGO_ENABLED=0")
	var lib Library
	_, err = lib.GetUniqueID()
	assert.ErrorIs(t, err, ErrUnavailable)
	_, err = lib.InitRank(0, 2, 0, UniqueID{}, "")
	assert.ErrorIs(t, err, ErrUnavailable)
}
