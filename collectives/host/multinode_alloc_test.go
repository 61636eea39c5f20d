package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// allocCounts are the counts every collective on Alloc's memory across
// nodes is checked at.
var allocCounts = []int{0, 1, 7, 4095, 1<<20 + 3}

// wantAcross is the transport a call on buffers from Alloc names across
// nodes: the direct path inside the node where the call has a leg there
// on the node's backend that has one (AllReduce, ReduceScatter and
// AllGather on equal nodes of several ranks, Broadcast on any), the
// ordinary one where not (Reduce; the flat paths, which have no leg
// inside the node).
func wantAcross(c call, m *multi) string {
	equal, local := m.equal, len(m.members[m.node])
	flat := !equal || c.op == collectives.Avg || isHalf(c.dt)
	switch {
	case c.coll == collectives.Broadcast:
		if local == 1 {
			return multiTransport
		}
		return multiDirect
	case c.coll == collectives.Reduce, local == 1:
		return multiTransport
	case c.coll != collectives.Broadcast && c.coll.Reduces() && flat,
		c.coll == collectives.AllGather && !equal:
		return multiTransport
	}
	return multiDirect
}

// TestAcrossNodesAlloc runs every collective on buffers from Alloc on
// in-process ranks placed on fake nodes, against the reference, at the
// allocation counts, and checks which calls took the direct path inside
// the node: 2 nodes of 2 ranks, 2 of 3, nodes interleaved, unequal nodes
// (flat paths) and one rank per node.
func TestAcrossNodesAlloc(t *testing.T) {
	needUCX(t)
	directAlways(t)
	layouts := []string{"aabb", "aaabbb", "abab", "abb", "ab"}
	if testing.Short() {
		layouts = []string{"aabb", "abb"}
	}
	dts := []collectives.DataType{collectives.Float32, collectives.Int32}
	ops := []collectives.Op{collectives.Sum, collectives.Max, collectives.Avg}
	for _, l := range layouts {
		t.Run(l, func(t *testing.T) {
			nodes := strings.Split(l, "")
			n := len(nodes)
			j := newJob(t, n, Config{StagingBytes: 64 << 10, Nodes: nodes, Timeout: time.Minute})
			big := allocCounts[len(allocCounts)-1]
			j.allocArenas(t, (n+1)*big*4+4096)
			for _, count := range allocCounts {
				cdts, cops := dts, ops
				if count == big && l != "aabb" {
					cdts, cops = dts[:1], ops[:2] // the largest count on 2x2 only in full
				}
				for _, c := range calls(n, count, cdts, cops) {
					require.NoError(t, j.verify(c), "layout %s", l)
					if c.count == 0 {
						continue
					}
					want := make([]string, n)
					for r, be := range j.bes {
						want[r] = wantAcross(c, be.(*multi))
					}
					require.Equal(t, want, j.lastTransports(), "layout %s: %v", l, c)
				}
			}
		})
	}
}

// TestAcrossNodesAllocMixed: one rank's buffers are private, so its
// node's legs on the caller's buffers go through staging (the other
// node's stay direct; ReduceScatter's and AllGather's legs inside the
// node run on the shared scratch only, direct either way), and results
// stay right; a bfloat16 AllReduce (the flat path) on buffers
// from Alloc is right too.
func TestAcrossNodesAllocMixed(t *testing.T) {
	needUCX(t)
	directAlways(t)
	nodes := []string{"a", "a", "b", "b"}
	j := newJob(t, 4, Config{StagingBytes: 64 << 10, Nodes: nodes})
	j.allocArenas(t, 8<<20)
	for _, c := range []call{
		{coll: collectives.AllReduce, dt: collectives.Float64, op: collectives.Sum, count: 100003},
		{coll: collectives.AllReduce, dt: collectives.Int8, op: collectives.Min, count: 4096, inPlace: true},
		{coll: collectives.ReduceScatter, dt: collectives.Uint8, op: collectives.Max, count: 70001},
		{coll: collectives.AllGather, dt: collectives.Int64, count: 30011, inPlace: true},
		{coll: collectives.Broadcast, dt: collectives.Int64, count: 20011, root: 3},
	} {
		kept := j.arenas[1]
		j.arenas[1] = nil
		require.NoError(t, j.verify(c), "rank 1 private")
		want := []string{multiTransport, multiTransport, multiDirect, multiDirect}
		if c.coll == collectives.ReduceScatter || c.coll == collectives.AllGather {
			want = same(4, multiDirect)
		}
		assert.Equal(t, want, j.lastTransports(), "%v", c)
		j.arenas[1] = kept
		require.NoError(t, j.verify(c))
		assert.Equal(t, same(4, multiDirect), j.lastTransports(), "%v", c)
	}
	c := call{coll: collectives.AllReduce, dt: collectives.BFloat16, op: collectives.Sum, count: 1<<16 + 1}
	require.NoError(t, j.verify(c))
	assert.Equal(t, same(4, multiTransport), j.lastTransports(), "%v", c)
}

// TestAcrossNodesAllocLifetime: the shared scratch grows with the
// largest allocation and goes with the last; calls stay right after
// each step, and memory from Alloc is shared by the node's ranks only.
func TestAcrossNodesAllocLifetime(t *testing.T) {
	needUCX(t)
	directAlways(t)
	nodes := []string{"a", "a", "b", "b"}
	j := newJob(t, 4, Config{StagingBytes: 64 << 10, Nodes: nodes})
	ctx := context.Background()
	allocs := func(size int) ([]uintptr, []collectives.Registration) {
		ptrs, regs := make([]uintptr, 4), make([]collectives.Registration, 4)
		for r, err := range j.each(func(r int) error {
			var err error
			ptrs[r], regs[r], err = j.bes[r].(collectives.Registrar).Alloc(ctx, uint64(size))
			return err
		}) {
			require.NoError(t, err, "rank %d", r)
		}
		return ptrs, regs
	}
	scratchFor := func() []uint64 {
		out := make([]uint64, 4)
		for r, be := range j.bes {
			out[r] = be.(*multi).shFor
		}
		return out
	}
	small, regsSmall := allocs(1 << 20)
	assert.Equal(t, []uint64{1 << 20, 1 << 20, 1 << 20, 1 << 20}, scratchFor())
	// A rank's memory is its node peer's, not the other node's.
	for r := range j.bes {
		loc := j.bes[r].(*multi).local
		require.NotNil(t, loc.allocByID(0), "rank %d", r)
		hostBytes(small[r], 8)[0] = byte(r + 1)
	}
	for r := range j.bes {
		loc := j.bes[r].(*multi).local
		peerGlobal := j.bes[r].(*multi).members[j.bes[r].(*multi).node][1-loc.rank]
		assert.Equal(t, byte(peerGlobal+1), loc.allocByID(0).seg.Peer(1 - loc.rank)[0], "rank %d sees its node peer %d", r, peerGlobal)
	}
	bigPtrs, regsBig := allocs(6 << 20)
	assert.Equal(t, []uint64{6 << 20, 6 << 20, 6 << 20, 6 << 20}, scratchFor())
	j.arenas = make([]*arena, 4)
	for r := range j.arenas {
		j.arenas[r] = &arena{mem: hostBytes(bigPtrs[r], 6<<20)}
	}
	c := call{coll: collectives.ReduceScatter, dt: collectives.Float32, op: collectives.Sum, count: 300007}
	require.NoError(t, j.verify(c))
	assert.Equal(t, same(4, multiDirect), j.lastTransports())
	for _, reg := range regsBig {
		require.NoError(t, reg.Close(ctx))
	}
	assert.Equal(t, []uint64{6 << 20, 6 << 20, 6 << 20, 6 << 20}, scratchFor(), "kept while an allocation lives")
	for r := range j.arenas {
		j.arenas[r] = &arena{mem: hostBytes(small[r], 1<<20)}
	}
	c = call{coll: collectives.AllGather, dt: collectives.Int32, count: 50001}
	require.NoError(t, j.verify(c))
	assert.Equal(t, same(4, multiDirect), j.lastTransports())
	for _, reg := range regsSmall {
		require.NoError(t, reg.Close(ctx))
		require.NoError(t, reg.Close(ctx), "a second Close")
	}
	assert.Equal(t, []uint64{0, 0, 0, 0}, scratchFor(), "gone with the last")
	j.arenas = nil
	c = call{coll: collectives.AllReduce, dt: collectives.Float32, op: collectives.Sum, count: 100003}
	require.NoError(t, j.verify(c))
	assert.Equal(t, same(4, multiTransport), j.lastTransports())
	for r, be := range j.bes {
		assert.Empty(t, be.(*multi).local.allocs, "rank %d's node allocations", r)
	}
}

// TestAcrossNodesAllocBadInput: a bad size on one rank, sizes that differ
// between nodes, fail every rank with ErrInvalidArgument; Register checks
// its arguments; Alloc after Close is ErrClosed.
func TestAcrossNodesAllocBadInput(t *testing.T) {
	needUCX(t)
	nodes := []string{"a", "a", "b", "b"}
	j := newJob(t, 4, Config{Nodes: nodes, Timeout: 20 * time.Second})
	for _, tc := range []struct {
		name  string
		sizes []uint64
		want  string
	}{
		{"zero on one rank", []uint64{4096, 4096, 0, 4096}, "size"},
		{"huge", []uint64{1 << 50, 1 << 50, 1 << 50, 1 << 50}, "size"},
		{"nodes differ", []uint64{4096, 4096, 8192, 8192}, "bytes"},
		{"one rank differs", []uint64{4096, 4096, 4096, 4097}, "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) { allocFailsEverywhere(t, j, tc.sizes, tc.want) })
	}
	// The communicator is still usable, and so is Alloc.
	_, regs := func() ([]uintptr, []collectives.Registration) {
		ptrs, regs := make([]uintptr, 4), make([]collectives.Registration, 4)
		for r, err := range j.each(func(r int) error {
			var err error
			ptrs[r], regs[r], err = j.bes[r].(collectives.Registrar).Alloc(context.Background(), 1<<16)
			return err
		}) {
			require.NoError(t, err, "rank %d", r)
		}
		return ptrs, regs
	}()
	require.NoError(t, j.verify(call{coll: collectives.AllReduce, dt: collectives.Int32, op: collectives.Sum, count: 1001}))
	for _, reg := range regs {
		require.NoError(t, reg.Close(context.Background()))
	}
	reg := j.bes[2].(collectives.Registrar)
	_, err := reg.Register(context.Background(), 0, 64)
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "ptr")
	require.NoError(t, j.bes[2].Close())
	_, _, err = reg.Alloc(context.Background(), 4096)
	require.ErrorIs(t, err, collectives.ErrClosed)
	_, err = reg.Register(context.Background(), 0x1000, 64)
	require.ErrorIs(t, err, collectives.ErrClosed)
}

// TestAcrossNodesAllocPeerGone: a rank that never comes to the Alloc
// (its communicator closed) fails every other rank's with an error
// naming it, within the timeout.
func TestAcrossNodesAllocPeerGone(t *testing.T) {
	needUCX(t)
	nodes := []string{"a", "a", "b", "b"}
	j := newJob(t, 4, Config{Nodes: nodes, Timeout: 3 * time.Second})
	require.NoError(t, j.bes[3].Close())
	for r := 0; r < 3; r++ {
		j.bes[r].(collectives.PeerCloser).PeerClosed(3)
	}
	errs := make([]error, 3)
	start := time.Now()
	for r, err := range j.each(func(r int) error {
		if r == 3 {
			return nil
		}
		_, _, err := j.bes[r].(collectives.Registrar).Alloc(context.Background(), 4096)
		return err
	}) {
		if r < 3 {
			errs[r] = err
		}
	}
	assert.Less(t, time.Since(start), time.Minute)
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		var pe *collectives.PeerError
		require.ErrorAs(t, err, &pe, "rank %d: %v", r, err)
		assert.Equal(t, 3, pe.Rank, "rank %d: %v", r, err)
	}
}
