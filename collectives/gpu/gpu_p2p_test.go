package gpu

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// p2pRing enqueues, on every rank, one group: a Send of count elements
// from send to the next rank and a Recv from the previous one into recv
// (shifted by off bytes), and with selfToo a Send to itself from send
// into recv+half (a local copy).
func (r *rig) p2pRing(t *testing.T, dt collectives.DataType, count int, off uintptr, selfToo bool) {
	n := len(r.bes)
	half := uintptr(r.cap / 2)
	for rank, be := range r.bes {
		s := uintptr(r.streams[rank])
		g := &collectives.Group{P2P: []collectives.P2P{
			{Kind: collectives.RecvOp, Peer: (rank + n - 1) % n, Buf: uintptr(r.recv[rank]) + off, Count: count, Type: dt, Stream: s},
			{Kind: collectives.SendOp, Peer: (rank + 1) % n, Buf: uintptr(r.send[rank]), Count: count, Type: dt, Stream: s},
		}}
		if selfToo {
			g.P2P = append(g.P2P,
				collectives.P2P{Kind: collectives.SendOp, Peer: rank, Buf: uintptr(r.send[rank]), Count: count, Type: dt, Stream: s},
				collectives.P2P{Kind: collectives.RecvOp, Peer: rank, Buf: uintptr(r.recv[rank]) + half, Count: count, Type: dt, Stream: s})
		}
		require.NoError(t, be.RunGroup(context.Background(), g))
	}
}

// checkRing compares every rank's recv (and its self copy) with the inputs,
// and the bytes after each with the poison.
func (r *rig) checkRing(t *testing.T, ins [][]byte, off int, selfToo bool, what string) {
	n := len(r.bes)
	half := int(r.cap / 2)
	for rank := range r.bes {
		b := len(ins[rank])
		got := r.get(t, rank, r.recv[rank], int(r.cap))
		want := bytes.Repeat([]byte{0xA5}, off+b+guard)
		copy(want[off:], ins[(rank+n-1)%n])
		require.True(t, bytes.Equal(want, got[:off+b+guard]), "%s: rank %d: Recv from rank %d", what, rank, (rank+n-1)%n)
		if selfToo {
			want = append(append([]byte(nil), ins[rank]...), bytes.Repeat([]byte{0xA5}, guard)...)
			require.True(t, bytes.Equal(want, got[half:half+b+guard]), "%s: rank %d: Recv from itself", what, rank)
		}
	}
}

// TestGPUP2P runs rings of every element size at counts 0 to 1Mi+3, with
// self copies, on every GPU of the machine (a self copy only with one).
func TestGPUP2P(t *testing.T) {
	n := rigRanks(t)
	const maxCount = 1<<20 + 3
	r := newRig(t, n, 2*(8*maxCount+guard+16))
	rng := rand.New(rand.NewPCG(11, 12))
	for _, dt := range []collectives.DataType{collectives.Uint8, collectives.BFloat16, collectives.Float32, collectives.Float64} {
		for _, count := range []int{0, 1, 7, 4095, maxCount} {
			off := uintptr(dt.Size() * (count % 2))
			ins := make([][]byte, n)
			for rank, be := range r.bes {
				ins[rank] = make([]byte, count*dt.Size())
				for i := range ins[rank] {
					ins[rank][i] = byte(rng.Uint32())
				}
				r.put(t, rank, r.send[rank], ins[rank])
				require.NoError(t, r.drv.MemsetD8Async(be.ctx, r.recv[rank], 0xA5, r.cap, r.streams[rank]))
			}
			r.p2pRing(t, dt, count, off, true)
			r.sync(t)
			r.checkRing(t, ins, int(off), true, dt.String())
		}
	}
}

// TestGPUP2PGraphReplay captures a ring (and self copy) once per rank and
// replays it with new inputs: the kernel's pair counters live on the device.
func TestGPUP2PGraphReplay(t *testing.T) {
	n := rigRanks(t)
	const count = 100003
	r := newRig(t, n, 2*(4*count+guard+16))
	execs := make([]cuda.GraphExec, n)
	// Relaxed: the ranks share this thread, and instantiating one rank's
	// graph while another's capture is open is refused in the stricter modes.
	for rank, be := range r.bes {
		require.NoError(t, r.drv.StreamBeginCapture(be.ctx, r.streams[rank], cuda.CaptureRelaxed))
	}
	r.p2pRing(t, collectives.Float32, count, 0, true)
	for rank := range r.bes {
		execs[rank] = r.endCapture(t, rank)
	}
	rng := rand.New(rand.NewPCG(13, 14))
	for it := 0; it < 30; it++ {
		ins := make([][]byte, n)
		for rank, be := range r.bes {
			ins[rank] = make([]byte, 4*count)
			for i := range ins[rank] {
				ins[rank][i] = byte(rng.Uint32())
			}
			r.put(t, rank, r.send[rank], ins[rank])
			require.NoError(t, r.drv.MemsetD8Async(be.ctx, r.recv[rank], 0xA5, r.cap, r.streams[rank]))
		}
		r.launchGraphs(t, execs)
		r.sync(t)
		r.checkRing(t, ins, 0, true, "replay")
	}
}
