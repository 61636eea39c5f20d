//go:build !cgo

package ucx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoCgoFailsEveryRank: without cgo Load fails naming the cause, and
// New fails on every rank of a job (after the address exchange, so none
// is left waiting) with an error that wraps ErrUnavailable.
func TestNoCgoFailsEveryRank(t *testing.T) {
	err := Load()
	require.ErrorIs(t, err, ErrUnavailable)
	assert.Contains(t, err.Error(), "CGO_ENABLED=0")
	assert.Equal(t, "", Version())

	tests := []struct {
		name    string
		loadErr error
		want    error
	}{
		{"load error passed", Load(), ErrUnavailable},
		{"no load error passed", nil, ErrUnavailable},
		{"caller's own load error", errCaller, errCaller},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3
			errs := make([]error, n)
			g := transporttest.NewGroup(n)
			require.NoError(t, g.Run(func(rank int, b transport.Bootstrap) error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				wk, err := New(ctx, b, tc.loadErr)
				assert.Nil(t, wk)
				errs[rank] = err
				return nil
			}))
			for r, err := range errs {
				assert.ErrorIs(t, err, tc.want, "rank %d", r)
			}
		})
	}
}

var errCaller = errors.New("the caller's load error")
