package host

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport/shm/pairtest"
)

// pairAlloc allocates size bytes from Alloc on this rank of a pair.
func pairAlloc(t *testing.T, be collectives.Backend, size int) (*arena, collectives.Registration) {
	t.Helper()
	p, reg, err := be.(collectives.Registrar).Alloc(context.Background(), uint64(size))
	require.NoError(t, err)
	return &arena{mem: hostBytes(p, size)}, reg
}

func lastTransport(be collectives.Backend) string {
	return be.(collectives.PathTeller).LastPath().Transport
}

// TestDirectAcrossProcesses runs the direct path between this process
// and a child, which read and write each other's buffers through their
// mappings of each other's memfds: AllReduce of every type and op at the
// direct counts (the largest for a few types), in and out of place, the
// other collectives, and calls where one rank's buffers are private (both
// ranks then take the ordinary path).
func TestDirectAcrossProcesses(t *testing.T) {
	directAlways(t) // both processes run this
	b, wait := pairRank(t, "TestDirectAcrossProcesses")
	defer wait()
	ctx := context.Background()
	be, err := New(ctx, b, Config{StagingBytes: 64 << 10, Timeout: 30 * time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, be.Close()) }()
	ar, reg := pairAlloc(t, be, 2*(8<<20)+4096)
	defer func() { require.NoError(t, reg.Close(ctx)) }()
	me, seed := b.Rank(), uint64(0)
	check := func(c call, ar *arena, want string) {
		t.Helper()
		seed++
		require.NoError(t, verifyPairIn(ctx, be, me, c, seed, ar), "%v", c)
		if c.count > 0 {
			require.Equal(t, want, lastTransport(be), "%v", c)
		}
	}
	for _, count := range directCounts {
		dts := collectives.AllDataTypes()
		if count > 1<<20 {
			dts = []collectives.DataType{collectives.Float32, collectives.BFloat16, collectives.Int64, collectives.Float8E4M3}
		}
		for _, dt := range dts {
			for _, op := range collectives.AllOps() {
				for _, inPlace := range []bool{false, true} {
					check(call{coll: collectives.AllReduce, dt: dt, op: op, count: count, inPlace: inPlace}, ar, "shm-direct")
				}
			}
		}
	}
	for _, c := range []call{
		{coll: collectives.AllGather, dt: collectives.Float64, count: 30011},
		{coll: collectives.Broadcast, dt: collectives.Int64, count: 200003, root: 1},
		{coll: collectives.ReduceScatter, dt: collectives.Uint8, op: collectives.Max, count: 50001},
		{coll: collectives.ReduceScatter, dt: collectives.Float32, op: collectives.Sum, count: 1<<20 + 3, inPlace: true},
	} {
		check(c, ar, "shm-direct")
	}
	// Rank 1's buffers private: both ranks fall back, and agree to.
	for _, c := range []call{
		{coll: collectives.AllReduce, dt: collectives.Float32, op: collectives.Sum, count: 1<<20 + 3},
		{coll: collectives.AllReduce, dt: collectives.Int8, op: collectives.Min, count: 7, inPlace: true},
		{coll: collectives.AllGather, dt: collectives.Int32, count: 4095},
	} {
		mine := ar
		if me == 1 {
			mine = nil
		}
		check(c, mine, "shm")
		check(c, ar, "shm-direct")
	}
}

// TestDirectPeerKilled: rank 1 dies (SIGKILL) once a direct-path call has
// started moving data; rank 0's wait in that call ends with an error
// naming rank 1, within the timeout.
func TestDirectPeerKilled(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Timeout: 3 * time.Second}
	if pairtest.IsChild() {
		be, err := New(ctx, pairtest.Child(), cfg)
		require.NoError(t, err)
		ar, _ := pairAlloc(t, be, 2<<20)
		directHook = func() { _ = unix.Kill(os.Getpid(), unix.SIGKILL) }
		buf := ar.take(1 << 20)
		_ = be.Run(ctx, &collectives.Args{Coll: collectives.AllReduce, Send: addr(buf), Recv: addr(buf), Count: len(buf) / 4, Type: collectives.Float32, Op: collectives.Sum})
		t.Fatal("rank 1 outlived its SIGKILL")
	}
	p, died := killedPeer(t, "TestDirectPeerKilled")
	defer died()
	be, err := New(ctx, p, cfg)
	require.NoError(t, err)
	defer be.Close()
	ar, reg := pairAlloc(t, be, 2<<20)
	defer reg.Close(ctx)
	buf := ar.take(1 << 20)
	start := time.Now()
	err = be.Run(ctx, &collectives.Args{Coll: collectives.AllReduce, Send: addr(buf), Recv: addr(buf), Count: len(buf) / 4, Type: collectives.Float32, Op: collectives.Sum})
	runtime.KeepAlive(buf)
	require.ErrorIs(t, err, collectives.ErrTimeout)
	var pe *collectives.PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Rank)
	assert.Equal(t, "shm-direct", lastTransport(be))
	assert.Less(t, time.Since(start), time.Minute)
}

// TestAllocPeerKilled: rank 1 dies before the Alloc rank 0 makes; rank 0's
// Alloc fails naming rank 1 rather than waiting.
func TestAllocPeerKilled(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Timeout: 3 * time.Second}
	if pairtest.IsChild() {
		_, err := New(ctx, pairtest.Child(), cfg)
		require.NoError(t, err)
		_ = unix.Kill(os.Getpid(), unix.SIGKILL)
		select {}
	}
	p, died := killedPeer(t, "TestAllocPeerKilled")
	defer died()
	be, err := New(ctx, p, cfg)
	require.NoError(t, err)
	defer be.Close()
	_, _, err = be.(collectives.Registrar).Alloc(ctx, 1<<20)
	require.Error(t, err)
	var pe *collectives.PeerError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 1, pe.Rank)
}
