package faults

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/comm"
)

// Scenario 4: Abort from other goroutines while a collective waits for a
// peer that never joins it (host backend, two ranks in this process).
// The wait returns at once (within 5 s, every time, allowing for a loaded
// machine; the worst is logged); half the rounds have two concurrent
// Aborts, on the waiting rank or across both ranks.
func TestAbortWhileWaiting(t *testing.T) {
	rounds := pick(200, 1000)
	variants := []struct {
		name   string
		aborts []int // the ranks Abort is called on, concurrently
	}{
		{"self", []int{0}},
		{"self-twice", []int{0, 0}},
		{"peer", []int{1}},
		{"both", []int{0, 1}},
	}
	var worstLat time.Duration
	passed := 0
	start := time.Now()
	for i := 0; i < rounds; i++ {
		v := variants[i%len(variants)]
		comms, err := comm.InitAll(context.Background(), []int{0, 1}, hostOpts())
		require.NoError(t, err, "round %d", i)
		buf := make([]int32, 1024)
		done := make(chan error, 1)
		go func() {
			done <- comms[0].AllReduce(context.Background(), ptr(buf), ptr(buf), len(buf), comm.Int32, comm.Sum, 0)
		}()
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // before or during the wait
		cause := errors.New("test abort")
		var wg sync.WaitGroup
		t0 := time.Now()
		for _, r := range v.aborts {
			wg.Add(1)
			go func(c *comm.Comm) { defer wg.Done(); c.Abort(cause) }(comms[r])
		}
		var got error
		select {
		case got = <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d (%s): AllReduce still waiting 5 s after Abort", i, v.name)
		}
		lat := time.Since(t0)
		wg.Wait()
		worstLat = max(worstLat, lat)
		ok := assert.ErrorIs(t, got, collectives.ErrAborted, "round %d (%s)", i, v.name)
		if v.name == "peer" {
			var pe *collectives.PeerError
			ok = assert.ErrorAs(t, got, &pe, "round %d: %v", i, got) && assert.Equal(t, 1, pe.Rank, "round %d: %v", i, got) && ok
		} else if v.aborts[0] == 0 && len(v.aborts) == 1 {
			ok = assert.ErrorIs(t, got, cause, "round %d: the cause given to Abort", i) && ok
		}
		for _, c := range comms {
			// The other rank learns through the bootstrap, asynchronously.
			deadline := time.Now().Add(5 * time.Second)
			for c.Err() == nil && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			ok = assert.Error(t, c.Err(), "round %d: rank %d's Err within 5 s of Abort", i, c.Rank()) && ok
		}
		closed := make(chan struct{})
		go func() { closeAll(t, comms); close(closed) }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d (%s): Close after Abort did not return within 5 s", i, v.name)
		}
		if ok {
			passed++
		}
		if t.Failed() {
			break
		}
	}
	t.Logf("scenario 4: %d rounds, %d passed, worst Abort-to-return %v, %v in all", rounds, passed, worstLat, time.Since(start))
	require.Equal(t, rounds, passed)
	require.Less(t, worstLat, 5*time.Second)
}

// Scenario 2, in-process: Options.Timeout (no environment) bounds a host
// collective's wait for a peer that never joins it, with the heartbeat far
// longer; the error is a timeout naming the absent rank.
func TestOptionsTimeoutBoundsCollective(t *testing.T) {
	opts := hostOpts()
	opts.Timeout = time.Second
	opts.HeartbeatInterval = 10 * time.Second
	comms, err := comm.InitAll(context.Background(), []int{0, 1}, opts)
	require.NoError(t, err)
	defer closeAll(t, comms)
	buf := make([]int32, 256)
	t0 := time.Now()
	err = comms[0].AllReduce(context.Background(), ptr(buf), ptr(buf), len(buf), comm.Int32, comm.Sum, 0)
	took := time.Since(t0)
	require.ErrorIs(t, err, collectives.ErrTimeout)
	var pe *collectives.PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Rank, "%v", err)
	assert.Less(t, took, 10*time.Second, "the 1 s timeout, not the heartbeat's 50 s")
	t.Logf("timed out after %v: %v", took, err)
}
