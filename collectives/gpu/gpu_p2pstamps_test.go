package gpu

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// TestGPUStampKernel: goccl_stamp around work on a stream stores the
// call's start and end, in order and inside CUDA events recorded around
// them; a later call that claims the slot hides the earlier one's times
// until its own end.
func TestGPUStampKernel(t *testing.T) {
	r := stampRig(t, 1, stampSlots, 64<<20)
	be, s := r.bes[0], r.streams[0]
	require.NotZero(t, be.stamps.fn, "the fatbin lacks goccl_stamp (kernels/stamp.cu)")
	const seq = 37
	e0 := r.event(t, 0)
	// The enqueues' errors are checked after be.mu is released: a failed
	// require with the lock held would deadlock the rig's Close.
	be.mu.Lock()
	slot := be.stamps.slot(seq)
	errStart := be.stampOnStream(s, slot, stampStart)
	errSet := r.drv.MemsetD8Async(be.ctx, r.recv[0], 1, 64<<20, s)
	errEnd := be.stampOnStream(s, slot, stampEnd)
	be.mu.Unlock()
	require.NoError(t, errStart, "goccl_stamp (start)")
	require.NoError(t, errSet, "memset between the stamps")
	require.NoError(t, errEnd, "goccl_stamp (end)")
	e1 := r.event(t, 0)
	r.sync(t)
	start, end, ok := be.CallTimes(seq)
	require.True(t, ok, "the call's times are stored")
	assert.Less(t, start, end, "64 MiB of memset lies between them")
	assert.LessOrEqual(t, end-start, int64(elapsed(t, r.drv, e0, e1)+stampTol), "inside the events around them")

	be.mu.Lock()
	err := be.stampOnStream(s, be.stamps.slot(seq+stampSlots), stampStart)
	be.mu.Unlock()
	require.NoError(t, err, "goccl_stamp (a later call's start)")
	r.sync(t)
	_, _, ok = be.CallTimes(seq)
	assert.False(t, ok, "the slot holds a later call")
	_, _, ok = be.CallTimes(seq + stampSlots)
	assert.False(t, ok, "claimed, not ended")
}

// TestGPUP2PStamps: a numbered group of Sends and Recvs on ranks sharing
// GPU 0, long enough to take two launches per rank, is timed from its
// first launch's start to its last's end.
func TestGPUP2PStamps(t *testing.T) {
	const n, count = 2, 4096
	r := stampRig(t, n, stampSlots, 2*p2pLaneOps*4*count)
	const seq = 9
	for rank, be := range r.bes {
		st := uintptr(r.streams[rank])
		g := &collectives.Group{Kind: collectives.GatherGroup, Seq: seq}
		for k := range p2pLaneOps + 1 {
			off := uintptr(k * 4 * count)
			g.P2P = append(g.P2P,
				collectives.P2P{Kind: collectives.SendOp, Peer: 1 - rank, Buf: uintptr(r.send[rank]) + off, Count: count, Type: collectives.Float32, Stream: st},
				collectives.P2P{Kind: collectives.RecvOp, Peer: 1 - rank, Buf: uintptr(r.recv[rank]) + off, Count: count, Type: collectives.Float32, Stream: st})
		}
		require.NoError(t, be.RunGroup(context.Background(), g))
	}
	r.sync(t)
	for rank, be := range r.bes {
		start, end, ok := be.CallTimes(seq)
		require.True(t, ok, "rank %d: the group's times are stored", rank)
		assert.LessOrEqual(t, start, end, "rank %d", rank)
	}
}

// TestGPUCopyEngineStamps: a Broadcast into a registered buffer on the
// copy engines, with the recorder on, is timed by the goccl_stamp
// launches around its copies: both times stored, in order, inside the
// CUDA events recorded around the call.
func TestGPUCopyEngineStamps(t *testing.T) {
	const capBytes = 8 << 20
	r := stampRig(t, 1, stampSlots, capBytes)
	r.requireCE(t)
	recv := r.registeredRecv(t, capBytes)
	be := r.bes[0]
	require.NotZero(t, be.stamps.fn, "the fatbin lacks goccl_stamp (kernels/stamp.cu)")
	be.forced = collectives.CopyEngine
	const seq = 41
	e0 := r.event(t, 0)
	a := collectives.Args{Coll: collectives.Broadcast, Send: uintptr(r.send[0]), Recv: uintptr(recv[0]), Count: 4 << 20,
		Type: collectives.Int8, Stream: uintptr(r.streams[0]), Seq: seq}
	require.NoError(t, be.Run(context.Background(), &a))
	e1 := r.event(t, 0)
	r.sync(t)
	assert.Equal(t, collectives.CopyEngine, be.LastPath().Algo, "the call took the copy engines")
	start, end, ok := be.CallTimes(seq)
	require.True(t, ok, "the copy-engine call's times are stored")
	assert.Less(t, start, end, "4 MiB of copies lie between them")
	assert.LessOrEqual(t, end-start, int64(elapsed(t, r.drv, e0, e1)+stampTol), "inside the events around the call")
}

// TestGPUP2PCopyEngineStamps: a numbered ring of Sends and Recvs wholly on
// the copy engines, with the recorder on, is timed by the goccl_stamp
// launches around its copies: both times stored, in order, inside the
// CUDA events recorded around the group, and the bytes arrive.
func TestGPUP2PCopyEngineStamps(t *testing.T) {
	t.Setenv(EnvTune, "p2pce=1M")
	const n, count, seq = 2, 4 << 20, 23
	r := newPCERig(t, n, count, func(int) Config { return Config{Device: 0, Transport: "uva", Stamps: stampSlots} })
	require.NotZero(t, r.bes[0].stamps.fn, "the fatbin lacks goccl_stamp (kernels/stamp.cu)")
	ring := ceRingGroup(r, 0, count, collectives.Int8)
	var e0, e1 [n]cuda.Event
	took := r.ceRoundRun(t, rand.New(rand.NewPCG(23, 1)), 0, count, func() {
		for rank, be := range r.bes {
			e0[rank] = r.event(t, rank)
			g := ring(rank)
			g.Seq = seq
			require.NoError(t, be.RunGroup(context.Background(), &g), "rank %d", rank)
			e1[rank] = r.event(t, rank)
		}
	}, func(rank int) []int { return []int{(rank + n - 1) % n} }, "a numbered ring")
	require.Equal(t, uint32(2), took, "rank 0's Send and Recv on the copy engines")
	for rank, be := range r.bes {
		assert.Equal(t, collectives.CopyEngine, be.LastPath().Algo, "rank %d", rank)
		start, end, ok := be.CallTimes(seq)
		require.True(t, ok, "rank %d: the group's times are stored", rank)
		assert.Less(t, start, end, "rank %d: 4 MiB of copies lie between them", rank)
		assert.LessOrEqual(t, end-start, int64(elapsed(t, r.drv, e0[rank], e1[rank])+stampTol), "rank %d: inside the events around the group", rank)
	}
}
