package transporttest

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/transport"
)

func TestOnRanksReturnsEveryRanksError(t *testing.T) {
	errOdd := errors.New("odd rank")
	for _, n := range []int{1, 2, 5} {
		g := NewGroup(n)
		errs := g.OnRanks(t, func(ctx context.Context, r int, b transport.Bootstrap) error {
			if _, ok := ctx.Deadline(); !ok {
				return errors.New("no deadline")
			}
			if b.Rank() != r {
				return errors.New("wrong bootstrap")
			}
			// Every rank must be running at once for the barrier to pass.
			if err := b.Barrier(ctx); err != nil {
				return err
			}
			if r%2 == 1 {
				return errOdd
			}
			return nil
		})
		require.Len(t, errs, n)
		for r, err := range errs {
			if r%2 == 1 {
				assert.ErrorIs(t, err, errOdd, "rank %d", r)
			} else {
				assert.NoError(t, err, "rank %d", r)
			}
		}
	}
}

func TestOpenFDsCountsDescriptors(t *testing.T) {
	before := OpenFDs(t)
	f, err := os.Open(os.DevNull)
	require.NoError(t, err)
	assert.Equal(t, before+1, OpenFDs(t))
	require.NoError(t, f.Close())
	assert.Equal(t, before, OpenFDs(t))
}
