package comm

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// checkingBackend rejects one address, as the GPU backend rejects memory
// the driver does not know.
type checkingBackend struct {
	*fakeBackend
	bad uintptr
}

func (b *checkingBackend) CheckPointers(a *collectives.Args) error {
	if a.Send == b.bad {
		return fmt.Errorf("%w: send buffer %#x is not device memory", collectives.ErrInvalidArgument, a.Send)
	}
	return nil
}

// Under GOCCL_CHECK the backend's pointer check runs before the call: a
// rank with a bad buffer gets its error, every other rank learns that
// rank's arguments were invalid, and nothing reaches any backend.
func TestCheckPointersUnderCheck(t *testing.T) {
	backends := make([]*checkingBackend, 2)
	opts := Options{
		NewBackend: func(_ context.Context, b transport.Bootstrap, _ BackendConfig) (collectives.Backend, error) {
			cb := &checkingBackend{fakeBackend: newFake(false), bad: 0x1000}
			backends[b.Rank()] = cb
			return cb, nil
		},
		Env: map[string]string{"GOCCL_CHECK": "1"}, Logger: discardLogger(),
	}
	comms := initGroup(t, 2, opts)
	ctx := context.Background()
	errs := eachRank(comms, func(c *Comm) error {
		send := uintptr(0x2000)
		if c.Rank() == 1 {
			send = 0x1000
		}
		return c.AllReduce(ctx, send, 0x3000, 4, Float32, Sum, 0)
	})
	require.ErrorIs(t, errs[1], collectives.ErrInvalidArgument)
	assert.Contains(t, errs[1].Error(), "send buffer 0x1000 is not device memory")
	require.ErrorIs(t, errs[0], ErrMismatch)
	assert.Contains(t, errs[0].Error(), "rank 1 called all_reduce with invalid arguments")
	for r, b := range backends {
		assert.Equal(t, 0, b.runCount(), "rank %d's backend ran nothing", r)
	}
	// Without GOCCL_CHECK nothing is asked of the backend.
	opts.Env = map[string]string{}
	comms = initGroup(t, 1, opts)
	require.NoError(t, comms[0].AllReduce(ctx, 0x1000, 0x3000, 4, Float32, Sum, 0))
}
