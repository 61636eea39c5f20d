package host

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm/pairtest"
)

// pairRank joins this test's two-process pair (see pairtest).
func pairRank(t *testing.T, test string) (transport.Bootstrap, func()) {
	if pairtest.IsChild() {
		return pairtest.Child(), func() {}
	}
	p, err := pairtest.Start(test)
	require.NoError(t, err)
	return p, func() { require.NoError(t, p.Wait(60*time.Second)) }
}

// killedPeer starts this test's child, which kills itself; the returned
// check, deferred, asserts it died by the signal.
func killedPeer(t *testing.T, test string) (*pairtest.Parent, func()) {
	p, err := pairtest.Start(test)
	require.NoError(t, err)
	return p, func() {
		err := p.Wait(60 * time.Second)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "killed")
	}
}

// TestCollectivesAcrossProcesses runs collectives between this process
// and a child through memfd segments and process-shared futexes. Both
// ranks derive both inputs from a shared seed, so each checks its own
// output against the reference.
func TestCollectivesAcrossProcesses(t *testing.T) {
	b, wait := pairRank(t, "TestCollectivesAcrossProcesses")
	defer wait()
	ctx := context.Background()
	for _, algo := range []collectives.Algorithm{collectives.OneShot, collectives.TwoShot} {
		be, err := New(ctx, b, Config{Algo: string(algo), StagingBytes: 64 << 10, Timeout: 30 * time.Second})
		require.NoError(t, err)
		for i, c := range []call{
			{coll: collectives.AllReduce, dt: collectives.Float32, op: collectives.Sum, count: 100003},
			{coll: collectives.AllReduce, dt: collectives.BFloat16, op: collectives.Avg, count: 7},
			{coll: collectives.Reduce, dt: collectives.Int32, op: collectives.Prod, count: 40000, root: 1},
			{coll: collectives.ReduceScatter, dt: collectives.Uint8, op: collectives.Max, count: 50001, inPlace: true},
			{coll: collectives.AllGather, dt: collectives.Float64, count: 30011},
			{coll: collectives.Broadcast, dt: collectives.Int64, count: 20000, root: 1},
		} {
			require.NoError(t, verifyPair(ctx, be, b.Rank(), c, uint64(i)), "%s %v", algo, c)
		}
		require.NoError(t, be.Close())
	}
	// One rank aborts; the other, waiting, is told who.
	be, err := New(ctx, b, Config{Timeout: 30 * time.Second})
	require.NoError(t, err)
	defer be.Close()
	if b.Rank() == 1 {
		time.Sleep(50 * time.Millisecond)
		be.Abort(nil)
		return
	}
	buf := alloc(64)
	start := time.Now()
	err = be.Run(ctx, &collectives.Args{Coll: collectives.AllReduce, Send: addr(buf), Recv: addr(buf), Count: 16, Type: collectives.Float32, Op: collectives.Sum})
	runtime.KeepAlive(buf)
	require.ErrorIs(t, err, collectives.ErrAborted)
	var pe *collectives.PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Rank)
	assert.Less(t, time.Since(start), abortBound, "the abort, not the 30 s timeout")
}

// verifyPair runs c on this rank with inputs both ranks can regenerate.
func verifyPair(ctx context.Context, be collectives.Backend, me int, c call, seed uint64) error {
	return verifyPairIn(ctx, be, me, c, seed, nil)
}

// verifyPairIn is verifyPair with the buffers handed to Run taken from ar
// (memory from Alloc) when it is not nil.
func verifyPairIn(ctx context.Context, be collectives.Backend, me int, c call, seed uint64, ar *arena) error {
	const n = 2
	a := collectives.Args{Coll: c.coll, Count: c.count, Type: c.dt, Op: c.op, Root: c.root}
	ins := make([][]byte, n)
	for r := range ins {
		ins[r] = alloc(a.SendBytes(n))
		fill(rand.New(rand.NewPCG(seed, uint64(r))), c.dt, c.op, ins[r])
	}
	j := &job{n: n}
	if ar != nil {
		ar.used = 0
		j.arenas = make([]*arena, n)
		j.arenas[me] = ar
	}
	var out, before, send []byte
	switch {
	case c.inPlace && c.coll == collectives.ReduceScatter:
		out = j.cloneFor(me, ins[me])
		a.Send = addr(out)
		a.Recv = a.Send + uintptr(me*a.RecvBytes(n))
	case c.inPlace && c.coll == collectives.AllReduce:
		out = j.cloneFor(me, ins[me])
		a.Send, a.Recv = addr(out), addr(out)
	default:
		out = j.buf(me, a.RecvBytes(n))
		poison(c.dt, out)
		send = j.cloneFor(me, ins[me])
		a.Send, a.Recv = addr(send), addr(out)
	}
	before = clone(out)
	if c.count == 0 {
		a.Send, a.Recv = 0, 0
	}
	if err := be.Run(ctx, &a); err != nil {
		return err
	}
	err := j.checkRank(c, me, ins, out, before)
	runtime.KeepAlive(ins)
	runtime.KeepAlive(send)
	return err
}
