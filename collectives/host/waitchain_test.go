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
	assert.Contains(t, err.Error(), "host: rank 0 waits for rank 2, which itself waits for rank 1")
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
	assert.NotContains(t, err.Error(), "which itself waits")
	runtime.KeepAlive(bufs)
}

// A cycle of waits blames the peer whichever rank of it began waiting
// first: here rank 2 began after rank 0, which the time-ordered chain
// alone would have taken for rank 2 being behind, and blamed it.
func TestWaitCycleBlamesThePeerInAnyOrder(t *testing.T) {
	ranks := chainJob(t, []time.Duration{time.Minute, time.Minute, time.Minute})
	be := make([]*backend, len(ranks))
	for r, g := range ranks {
		be[r] = g.(*backend)
	}
	now := time.Now()
	start := now.Add(-time.Second) // rank 0's wait on rank 1
	publish := func(q int, on uint64, since time.Time) {
		w, s, seen := be[0].waitWords(q)
		atomic.StoreUint64(s, uint64(since.UnixNano()))
		atomic.StoreUint64(seen, uint64(now.UnixNano()))
		atomic.StoreUint64(w, on)
	}
	publish(0, 1<<1, start)
	publish(1, 1<<2, start.Add(-time.Second))
	publish(2, 1<<0, start.Add(time.Millisecond))
	end, via := be[0].blameChain(1, start, now)
	assert.Equal(t, 1, end)
	assert.Empty(t, via)

	// Rank 2 stopped (its last look stale): no cycle, and the chain
	// through rank 1 ends at rank 2.
	_, _, seen := be[0].waitWords(2)
	atomic.StoreUint64(seen, uint64(now.Add(-time.Hour).UnixNano()))
	end, via = be[0].blameChain(1, start, now)
	assert.Equal(t, 2, end)
	assert.Equal(t, []int{1}, via)
}

// A peer that also waits for this rank but for a stopped third is not a
// cycle: the third is named.
func TestWaitChainOutOfACycleNamesTheStopped(t *testing.T) {
	ranks := chainJob(t, []time.Duration{time.Minute, time.Minute, time.Minute})
	b0 := ranks[0].(*backend)
	now := time.Now()
	start := now.Add(-time.Second)
	set := func(q int, on uint64, since, seen time.Time) {
		w, s, sn := b0.waitWords(q)
		atomic.StoreUint64(s, uint64(since.UnixNano()))
		atomic.StoreUint64(sn, uint64(seen.UnixNano()))
		atomic.StoreUint64(w, on)
	}
	set(0, 1<<1, start, now)
	set(1, 1<<0|1<<2, start.Add(-time.Second), now)          // waits for rank 0 and rank 2
	set(2, 1<<1, start.Add(-time.Hour), now.Add(-time.Hour)) // stopped an hour ago
	end, via := b0.blameChain(1, start, now)
	assert.Equal(t, 2, end)
	assert.Equal(t, []int{1}, via)
}

// A peer whose wait on a stopped third began a little after this rank's
// (it received the last of a message the third was writing when it
// stopped) is still followed to the third; one that began waiting more
// than half this rank's timeout later is itself the one named.
func TestWaitChainSlack(t *testing.T) {
	ranks := chainJob(t, []time.Duration{time.Minute, time.Minute, time.Minute})
	b0 := ranks[0].(*backend)
	now := time.Now()
	start := now.Add(-time.Minute) // rank 0's wait on rank 2, timed out
	set := func(q int, on uint64, since, seen time.Time) {
		w, s, sn := b0.waitWords(q)
		atomic.StoreUint64(s, uint64(since.UnixNano()))
		atomic.StoreUint64(sn, uint64(seen.UnixNano()))
		atomic.StoreUint64(w, on)
	}
	for _, tc := range []struct {
		name  string
		since time.Time // rank 2's wait on rank 1
		end   int
		via   []int
	}{
		{"earlier", start.Add(-time.Second), 1, []int{2}},
		{"a little later", start.Add(200 * time.Millisecond), 1, []int{2}},
		{"half the timeout later", start.Add(30 * time.Second), 1, []int{2}},
		{"more than half later", start.Add(31 * time.Second), 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set(0, 1<<2, start, now)
			set(2, 1<<1, tc.since, now)
			set(1, 1<<0, start.Add(-time.Hour), now.Add(-time.Hour)) // stopped an hour ago
			end, via := b0.blameChain(2, start, now)
			assert.Equal(t, tc.end, end)
			assert.Equal(t, tc.via, via)
		})
	}
}
