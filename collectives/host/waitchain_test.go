package host

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// chainJob is a job whose ranks have their own timeouts.
func chainJob(t *testing.T, timeouts []time.Duration) []collectives.GroupRunner {
	t.Helper()
	n := len(timeouts)
	bes := make([]collectives.Backend, n)
	require.NoError(t, transporttest.NewGroup(n).Run(func(rank int, b transport.Bootstrap) error {
		be, err := New(context.Background(), b, Config{Timeout: timeouts[rank], Logger: slog.New(slog.DiscardHandler)})
		bes[rank] = be
		return err
	}))
	t.Cleanup(func() {
		for _, be := range bes {
			require.NoError(t, be.Close())
		}
	})
	out := make([]collectives.GroupRunner, n)
	for r, be := range bes {
		out[r] = be.(collectives.GroupRunner)
	}
	return out
}

func recvGroup(peer int, buf []byte) *collectives.Group {
	return &collectives.Group{P2P: []collectives.P2P{{Kind: collectives.RecvOp, Peer: peer, Buf: addr(buf), Count: len(buf), Type: collectives.Int8}}}
}

// TestTimeoutFollowsTheWaitChain: rank 2 waits for rank 1, which makes no
// call; rank 0, which waits for rank 2 since later and times out first,
// names rank 1, the rank at the chain's end, and says how it got there.
func TestTimeoutFollowsTheWaitChain(t *testing.T) {
	ranks := chainJob(t, []time.Duration{time.Second, time.Minute, time.Minute})
	buf0, buf2 := alloc(64), alloc(64)
	ctx := context.Background()
	done2 := make(chan error, 1)
	go func() { done2 <- ranks[2].RunGroup(ctx, recvGroup(1, buf2)) }()
	// Rank 2's wait is the older: published before rank 0's begins (a
	// fixed sleep can be outlasted on a loaded machine).
	on, _, _ := ranks[2].(*backend).waitWords(2)
	for deadline := time.Now().Add(20 * time.Second); atomic.LoadUint64(on) == 0; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "rank 2 did not publish its wait")
	}
	err := ranks[0].RunGroup(ctx, recvGroup(2, buf0))
	require.ErrorIs(t, err, collectives.ErrTimeout)
	var pe *collectives.PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Rank, "the chain's end: %v", err)
	assert.Contains(t, err.Error(), "host: rank 0 waits for rank 2, which has waited longer for rank 1")
	assert.Contains(t, err.Error(), "rank 0 waited 1s for rank 2", "the original timeout stays the cause")
	select {
	case err2 := <-done2:
		require.Error(t, err2, "rank 2's wait ends with rank 0's abort")
	case <-time.After(30 * time.Second):
		t.Fatal("rank 2's wait did not end")
	}
	runtime.KeepAlive(buf0)
	runtime.KeepAlive(buf2)
}

// TestTimeoutChainStopsAtACycle: ranks whose Sends all wait for their
// Recvs wait in a cycle; each names its own peer.
func TestTimeoutChainStopsAtACycle(t *testing.T) {
	ranks := chainJob(t, []time.Duration{time.Second, 10 * time.Second, 10 * time.Second})
	ctx := context.Background()
	bufs := [][]byte{alloc(eagerLimits[3] + 1), alloc(eagerLimits[3] + 1), alloc(eagerLimits[3] + 1)}
	errs := make(chan error, 3)
	for r := range ranks {
		go func() {
			g := &collectives.Group{P2P: []collectives.P2P{{Kind: collectives.SendOp, Peer: (r + 1) % 3, Buf: addr(bufs[r]), Count: len(bufs[r]), Type: collectives.Int8}}}
			err := ranks[r].RunGroup(ctx, g)
			if r == 0 {
				errs <- err
			}
		}()
	}
	err := <-errs
	require.ErrorIs(t, err, collectives.ErrTimeout)
	var pe *collectives.PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Rank, "a cycle blames the peer: %v", err)
	assert.NotContains(t, err.Error(), "which has waited longer")
	runtime.KeepAlive(bufs)
}
