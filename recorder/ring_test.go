package recorder

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

func testRing(size int, async bool) *Ring {
	return New(Config{Size: size, Async: async, Meta: Meta{Comm: "c0", Rank: 1, Size: 4}})
}

func TestNewOff(t *testing.T) {
	r := New(Config{Size: 0})
	require.Nil(t, r)
	// A nil ring records nothing and does not fail.
	id := r.Begin(&collectives.Args{Coll: collectives.AllReduce})
	r.End(id, nil)
	assert.Empty(t, r.Snapshot().Calls)
	assert.Nil(t, r.Stats())
}

func TestRingKeepsTheLastCalls(t *testing.T) {
	const size, calls = 8, 21
	r := testRing(size, false)
	colls := collectives.AllCollectives()
	want := make([]collectives.Args, calls)
	before := time.Now().UnixNano()
	for i := range want {
		a := collectives.Args{Coll: colls[rand.IntN(len(colls))], Count: rand.IntN(1 << 20), Type: collectives.Float32,
			Root: rand.IntN(4), Stream: uintptr(rand.IntN(3)), Seq: uint64(i + 1)}
		want[i] = a
		id := r.Begin(&a)
		var err error
		if i == calls-1 {
			err = errors.New("boom")
		}
		r.End(id, err)
	}
	after := time.Now().UnixNano()
	rec := r.Snapshot()
	require.Len(t, rec.Calls, size)
	assert.Equal(t, uint64(calls-size), rec.Dropped)
	var prev int64
	for i, c := range rec.Calls {
		a := want[calls-size+i]
		assert.Equal(t, a.Seq, c.Seq)
		assert.Equal(t, Kind(a.Coll).String(), c.Call)
		assert.Equal(t, int64(a.Count), c.Count)
		assert.Equal(t, "float32", c.Type)
		wantBytes := int64(a.Count) * 4
		if a.Coll == collectives.AllGather || a.Coll == collectives.ReduceScatter {
			wantBytes *= 4
		}
		assert.Equal(t, wantBytes, c.Bytes, "call %d", i)
		if a.Coll.Rooted() {
			assert.Equal(t, a.Root, c.Peer)
		} else {
			assert.Equal(t, -1, c.Peer)
		}
		// Times within the test's span (a little slack for the
		// conversion), in order.
		assert.GreaterOrEqual(t, c.Start, before-int64(time.Millisecond))
		assert.LessOrEqual(t, c.Finish, after+int64(time.Millisecond))
		assert.GreaterOrEqual(t, c.Finish, c.Start)
		assert.GreaterOrEqual(t, c.Start, prev)
		prev = c.Finish
		if i == size-1 {
			assert.Equal(t, "failed", c.State)
		} else {
			assert.Equal(t, "finished", c.State)
		}
	}
}

func TestRingAsyncStaysEnqueuedUntilComplete(t *testing.T) {
	r := testRing(4, true)
	id := r.Begin(&collectives.Args{Coll: collectives.AllReduce, Count: 2, Type: collectives.Int32, Seq: 1})
	r.End(id, nil)
	c := r.Snapshot().Calls[0]
	assert.Equal(t, "enqueued", c.State)
	assert.Zero(t, c.Start)
	assert.Empty(t, r.Stats())
	s := r.Ticks()
	r.Complete(id, s, s+int64(1000))
	c = r.Snapshot().Calls[0]
	assert.Equal(t, "finished", c.State)
	assert.Greater(t, c.Finish, c.Start)
	require.Len(t, r.Stats(), 1)
	assert.Equal(t, r.Slot(id), c.Slot)
}

func TestBeginGroupKinds(t *testing.T) {
	f32 := collectives.Float32
	p2p := func(k collectives.P2PKind, peer, count int) collectives.P2P {
		return collectives.P2P{Kind: k, Peer: peer, Buf: 64, Count: count, Type: f32}
	}
	all := func(count int) []collectives.P2P {
		var ops []collectives.P2P
		for p := 0; p < 4; p++ {
			ops = append(ops, p2p(collectives.SendOp, p, count), p2p(collectives.RecvOp, p, count))
		}
		return ops
	}
	cases := []struct {
		name  string
		g     collectives.Group
		call  string
		peer  int
		bytes int64
	}{
		{"send", collectives.Group{P2P: []collectives.P2P{p2p(collectives.SendOp, 2, 10)}}, "Send", 2, 40},
		{"recv", collectives.Group{P2P: []collectives.P2P{p2p(collectives.RecvOp, 3, 10)}}, "Recv", 3, 40},
		{"group", collectives.Group{P2P: []collectives.P2P{p2p(collectives.SendOp, 3, 10), p2p(collectives.RecvOp, 0, 5)}}, "Group", -1, 40},
		{"alltoall", collectives.Group{Kind: collectives.AllToAllGroup, Seq: 9, P2P: all(8)}, "AllToAll", -1, 4 * 32},
		{"gather", collectives.Group{Kind: collectives.GatherGroup, Seq: 9, P2P: []collectives.P2P{p2p(collectives.SendOp, 0, 8)}}, "Gather", 0, 4 * 32},
		{"scatter", collectives.Group{Kind: collectives.ScatterGroup, Seq: 9, P2P: []collectives.P2P{p2p(collectives.RecvOp, 2, 8)}}, "Scatter", 2, 4 * 32},
		{"colls", collectives.Group{Seq: 4, Colls: []collectives.Args{{Coll: collectives.AllReduce, Count: 3, Type: f32}, {Coll: collectives.Broadcast, Count: 5, Type: f32}}}, "Group", -1, 32},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := testRing(4, false)
			r.End(r.BeginGroup(&tc.g), nil)
			c := r.Snapshot().Calls[0]
			assert.Equal(t, tc.call, c.Call)
			assert.Equal(t, tc.peer, c.Peer)
			assert.Equal(t, tc.bytes, c.Bytes)
			assert.Equal(t, tc.g.Seq, c.Seq)
			assert.Equal(t, len(tc.g.P2P)+len(tc.g.Colls), c.Ops)
		})
	}
}

// TestRecordAllocations: the hot path allocates nothing once a kind and
// size class have been seen.
func TestRecordAllocations(t *testing.T) {
	r := testRing(DefaultSize, false)
	a := collectives.Args{Coll: collectives.AllReduce, Count: 1024, Type: collectives.Float32}
	r.End(r.Begin(&a), nil)
	g := collectives.Group{P2P: []collectives.P2P{{Kind: collectives.SendOp, Peer: 1, Buf: 64, Count: 8, Type: collectives.Float32}}}
	r.End(r.BeginGroup(&g), nil)
	n := testing.AllocsPerRun(1000, func() {
		a.Seq++
		r.End(r.Begin(&a), nil)
		r.End(r.BeginGroup(&g), nil)
	})
	assert.Zero(t, n)
}

// BenchmarkRecord is what recording adds to every host call: Begin and
// End. The budget is 50 ns and no allocation.
func BenchmarkRecord(b *testing.B) {
	r := testRing(DefaultSize, false)
	a := collectives.Args{Coll: collectives.AllReduce, Count: 1024, Type: collectives.Float32}
	// The path of a GPU call: both names found after the first few kept.
	r.EndPath(r.Begin(&collectives.Args{Coll: collectives.Broadcast, Count: 1, Type: collectives.Int8}), nil,
		collectives.Path{Algo: collectives.TwoShot, Transport: "shm"})
	p := collectives.Path{Algo: collectives.LL, Transport: "vmm"}
	b.ReportAllocs()
	for b.Loop() {
		a.Seq++
		r.EndPath(r.Begin(&a), nil, p)
	}
}

func BenchmarkRecordGroup(b *testing.B) {
	r := testRing(DefaultSize, false)
	g := collectives.Group{P2P: []collectives.P2P{{Kind: collectives.SendOp, Peer: 1, Buf: 64, Count: 8, Type: collectives.Float32}}}
	b.ReportAllocs()
	for b.Loop() {
		r.End(r.BeginGroup(&g), nil)
	}
}

func BenchmarkRecordOff(b *testing.B) {
	var r *Ring
	a := collectives.Args{Coll: collectives.AllReduce, Count: 1024, Type: collectives.Float32}
	b.ReportAllocs()
	for b.Loop() {
		r.End(r.Begin(&a), nil)
	}
}

// fakeDevice knows the times of the calls in times.
type fakeDevice map[uint64][2]int64

func (f fakeDevice) CallTimes(seq uint64) (int64, int64, bool) {
	t, ok := f[seq]
	return t[0], t[1], ok
}

// TestResolveDeviceTimes: enqueued calls take the device's wall-clock
// times as the device gave them (never converted through the ring's clock), and
// count in the statistics; calls the device has not timed stay enqueued.
func TestResolveDeviceTimes(t *testing.T) {
	r := testRing(8, true)
	for s := uint64(1); s <= 3; s++ {
		r.End(r.Begin(&collectives.Args{Coll: collectives.AllReduce, Count: 256, Type: collectives.Float32, Seq: s}), nil)
	}
	base := time.Now().Add(-time.Second).UnixNano()
	dev := fakeDevice{1: {base, base + 5000}, 2: {base + 10_000, base + 30_000}}
	r.Resolve(dev)
	calls := r.Snapshot().Calls
	require.Len(t, calls, 3)
	for i, c := range calls[:2] {
		want := dev[uint64(i+1)]
		assert.Equal(t, "finished", c.State)
		assert.Equal(t, int64(want[0]), c.Start, "call %d start", i+1)
		assert.Equal(t, int64(want[1]), c.Finish, "call %d finish", i+1)
	}
	assert.Equal(t, "enqueued", calls[2].State)
	st := r.Stats()
	require.Len(t, st, 1)
	assert.Equal(t, uint64(2), st[0].Count)
	assert.Equal(t, 25*time.Microsecond, st[0].Total)
}

// A plain group keeps its Sends' and Recvs' counts and peers; a lone
// Recv its peer and size.
func TestRecordPlainGroupPeers(t *testing.T) {
	r := testRing(8, false)
	g := collectives.Group{P2P: []collectives.P2P{
		{Kind: collectives.SendOp, Peer: 2, Buf: 64, Count: 8, Type: collectives.Int32},
		{Kind: collectives.RecvOp, Peer: 1, Buf: 64, Count: 8, Type: collectives.Int32},
		{Kind: collectives.SendOp, Peer: 70, Buf: 64, Count: 8, Type: collectives.Int32},
		{Kind: collectives.SendOp, Peer: 1, Buf: 64, Count: 8, Type: collectives.Int32},
	}}
	r.BeginGroup(&g)
	one := collectives.Group{P2P: []collectives.P2P{{Kind: collectives.RecvOp, Peer: 3, Buf: 64, Count: 1 << 20, Type: collectives.Int32}}}
	r.BeginGroup(&one)
	calls := r.Snapshot().Calls
	require.Len(t, calls, 2)
	c := calls[0]
	assert.Equal(t, "Group", c.Call)
	assert.Equal(t, 3, c.Sends)
	assert.Equal(t, 1, c.Recvs)
	assert.Equal(t, []int{1, 2}, c.SendPeers)
	assert.Equal(t, []int{1}, c.RecvPeers)
	assert.True(t, c.FarSends)
	assert.False(t, c.FarRecvs)
	assert.Equal(t, []int{1, 2}, c.Peers())
	assert.Equal(t, "Group (4 ops: 3 Sends to ranks 1 and 2 and ranks beyond 63, 1 Recv from rank 1; int32)", c.Describe())
	assert.Equal(t, "Recv from rank 3 (int32, 4 MiB)", calls[1].Describe())
	assert.Equal(t, []int{3}, calls[1].Peers())
}

// TestResolveReplays: a call whose GPU times change (a captured
// graph replayed) takes the newest and counts its runs; a group spans its
// first call's start to its last call's finish.
func TestResolveReplays(t *testing.T) {
	r := testRing(8, true)
	r.End(r.Begin(&collectives.Args{Coll: collectives.AllReduce, Count: 2, Type: collectives.Float32, Seq: 1}), nil)
	g := collectives.Group{Seq: 2, Colls: []collectives.Args{
		{Coll: collectives.AllReduce, Count: 2, Type: collectives.Float32, Seq: 2},
		{Coll: collectives.AllReduce, Count: 2, Type: collectives.Float32, Seq: 3},
	}}
	r.End(r.BeginGroup(&g), nil)
	base := time.Now().Add(-time.Second).UnixNano()
	dev := fakeDevice{1: {base, base + 4000}, 2: {base + 10_000, base + 12_000}}
	r.Resolve(dev)
	calls := r.Snapshot().Calls
	require.Len(t, calls, 2)
	assert.Equal(t, 1, calls[0].Runs)
	assert.Equal(t, "enqueued", calls[1].State, "the group's last call has not finished")
	dev[3] = [2]int64{base + 13_000, base + 19_000}
	r.Resolve(dev)
	r.Resolve(dev) // the same times again: no new run
	calls = r.Snapshot().Calls
	assert.Equal(t, "finished", calls[1].State)
	assert.Equal(t, int64(base+10_000), calls[1].Start)
	assert.Equal(t, int64(base+19_000), calls[1].Finish)
	assert.Equal(t, 1, calls[0].Runs)
	for k := 1; k <= 3; k++ {
		at := base + int64(k)*100_000
		dev[1] = [2]int64{at, at + 7000}
		r.Resolve(dev)
		c := r.Snapshot().Calls[0]
		assert.Equal(t, 1+k, c.Runs, "replay %d", k)
		assert.Equal(t, int64(at), c.Start, "replay %d", k)
		assert.Equal(t, int64(at+7000), c.Finish, "replay %d", k)
		assert.Equal(t, 1, c.Slot)
	}
	st := r.Stats()
	require.Len(t, st, 2)
	assert.Equal(t, "AllReduce", st[0].Call)
	assert.Equal(t, uint64(4), st[0].Count, "4 runs of call 1")
	assert.Equal(t, "Group", st[1].Call)
	assert.Equal(t, uint64(1), st[1].Count)
}

// A group whose calls a fused launch timed together in its last call's
// slot takes that launch's times.
func TestResolveFusedGroup(t *testing.T) {
	r := testRing(8, true)
	g := collectives.Group{Seq: 5, Colls: []collectives.Args{
		{Coll: collectives.AllReduce, Count: 2, Type: collectives.Float32, Seq: 5},
		{Coll: collectives.AllReduce, Count: 2, Type: collectives.Float32, Seq: 6},
	}}
	r.End(r.BeginGroup(&g), nil)
	base := time.Now().Add(-time.Second).UnixNano()
	dev := fakeDevice{6: {base + 1000, base + 9000}}
	r.Resolve(dev)
	c := r.Snapshot().Calls[0]
	require.Equal(t, "finished", c.State)
	assert.Equal(t, int64(base+1000), c.Start)
	assert.Equal(t, int64(base+9000), c.Finish)
	// A stale first slot (an older call's times, after the group's end)
	// is not the group's start.
	r2 := testRing(8, true)
	r2.End(r2.BeginGroup(&g), nil)
	dev[5] = [2]int64{base + 20_000, base + 21_000}
	r2.Resolve(dev)
	c = r2.Snapshot().Calls[0]
	assert.Equal(t, int64(base+1000), c.Start)
}
