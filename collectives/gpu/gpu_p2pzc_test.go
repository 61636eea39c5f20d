package gpu

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// zcRig is n ranks sharing GPU 0, each with a registered receive buffer
// (Alloc) beside the rig's unregistered one, both of capBytes + guard.
func zcRig(t *testing.T, n int, capBytes uint64) (*rig, []cuda.DevicePtr) {
	r := newRigOn(t, n, capBytes, func(int) int { return 0 })
	ptrs, _ := allocAll(t, r.bes, capBytes+guard)
	regs := make([]cuda.DevicePtr, n)
	for i, p := range ptrs {
		regs[i] = cuda.DevicePtr(p)
	}
	return r, regs
}

// zcRing enqueues on every rank a Send of count elements to the next rank
// and a Recv from the previous one into dst[rank].
func (r *rig) zcRing(t *testing.T, dt collectives.DataType, count int, dst []cuda.DevicePtr) {
	n := len(r.bes)
	for rank, be := range r.bes {
		s := uintptr(r.streams[rank])
		g := &collectives.Group{P2P: []collectives.P2P{
			{Kind: collectives.RecvOp, Peer: (rank + n - 1) % n, Buf: uintptr(dst[rank]), Count: count, Type: dt, Stream: s},
			{Kind: collectives.SendOp, Peer: (rank + 1) % n, Buf: uintptr(r.send[rank]), Count: count, Type: dt, Stream: s},
		}}
		require.NoError(t, be.RunGroup(context.Background(), g))
	}
}

// zcRound fills every rank's input with random bytes and poisons both its
// receive buffers, runs a ring into dst (at off bytes into each buffer),
// and checks every byte of each rank's buffer against the previous rank's
// input and the poison, and the path each Recv took.
func (r *rig) zcRound(t *testing.T, rng *rand.Rand, dt collectives.DataType, count, off int, dst, regs []cuda.DevicePtr,
	registered []bool, zcFrom int, run func(dst []cuda.DevicePtr), what string) {
	t.Helper()
	n := len(r.bes)
	b := count * dt.Size()
	ins := make([][]byte, n)
	at := make([]cuda.DevicePtr, n)
	for rank, be := range r.bes {
		ins[rank] = make([]byte, b)
		for i := range ins[rank] {
			ins[rank][i] = byte(rng.Uint32())
		}
		r.put(t, rank, r.send[rank], ins[rank])
		require.NoError(t, r.drv.MemsetD8Async(be.ctx, r.recv[rank], 0xA5, r.cap+guard, r.streams[rank]))
		require.NoError(t, r.drv.MemsetD8Async(be.ctx, regs[rank], 0xA5, r.cap+guard, r.streams[rank]))
		at[rank] = dst[rank] + cuda.DevicePtr(off)
	}
	run(at)
	r.sync(t)
	for rank := range r.bes {
		prev := (rank + n - 1) % n
		want := bytes.Repeat([]byte{0xA5}, int(r.cap)+guard)
		copy(want[off:], ins[prev])
		got := r.get(t, rank, dst[rank], int(r.cap)+guard)
		if !bytes.Equal(want, got) {
			i := 0
			for want[i] == got[i] {
				i++
			}
			t.Fatalf("%s: rank %d: Recv from rank %d (registered %v): byte %d of the buffer is %#02x, want %#02x",
				what, rank, prev, registered[rank], i, got[i], want[i])
		}
		// Zero copy where the threshold and the registration say, unless
		// the sender found the receiver not yet in the Recv and the Send
		// fits the eager rings; eager where it fits otherwise.
		zc := registered[rank] && zcFrom > 0 && b >= zcFrom
		fits := uint64(b) <= eagerLimit(r.bes[rank].p2p.channels, uint64(r.bes[rank].tune.slot))
		path, wantPath := r.eagerPath(t, rank, prev), uint32(p2pPathStaging)
		switch {
		case zc:
			wantPath = p2pPathZC
		case fits:
			wantPath = p2pPathEager
		}
		if !(zc && fits && path == p2pPathEager) {
			require.Equal(t, wantPath, path, "%s: rank %d: Recv from rank %d (registered %v, %d bytes): path (0 staging, 1 zero copy, 2 eager)",
				what, rank, prev, registered[rank], b)
		}
	}
}

// TestGPUP2PZeroCopy runs rings on 2 and 3 ranks sharing GPU 0 with every
// mix of registered and unregistered receivers, counts 0 to 1Mi+3 of
// several types at an offset into the buffers, the threshold at its
// default and lowered to 16 bytes: every received byte against the
// sender's input, the poison around it untouched, and each Recv's path
// as the threshold and its registration decide.
func TestGPUP2PZeroCopy(t *testing.T) {
	const maxCount = 1<<20 + 3
	for _, tune := range []struct {
		spec string
		from int
	}{{"", defaultP2PZC}, {"p2pzc=16", 16}} {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%d ranks %q", n, tune.spec), func(t *testing.T) {
				t.Setenv(EnvTune, tune.spec)
				r, regs := zcRig(t, n, 8*maxCount+16)
				rng := rand.New(rand.NewPCG(31, uint64(n)))
				for mask := 0; mask < 1<<n; mask++ {
					registered := make([]bool, n)
					dst := make([]cuda.DevicePtr, n)
					for rank := range n {
						registered[rank] = mask&(1<<rank) != 0
						dst[rank] = r.recv[rank]
						if registered[rank] {
							dst[rank] = regs[rank]
						}
					}
					for _, dt := range []collectives.DataType{collectives.Uint8, collectives.BFloat16, collectives.Float32, collectives.Float64} {
						for _, count := range []int{0, 1, 7, 4095, maxCount} {
							if count == maxCount && dt != collectives.Float64 && mask != 1<<n-1 && mask != 1 {
								continue // the largest count once per type on two mixes keeps the run short
							}
							off := dt.Size() * (1 + count%3)
							what := fmt.Sprintf("mask %b %s count %d", mask, dt, count)
							r.zcRound(t, rng, dt, count, off, dst, regs, registered, tune.from,
								func(at []cuda.DevicePtr) { r.zcRing(t, dt, count, at) }, what)
						}
					}
				}
			})
		}
	}
}

// TestGPUP2PZeroCopyGraphReplay captures a ring into registered buffers
// (rank 0's) and an unregistered one (rank 1's) once per rank and
// replays it with new inputs: the pair counters advance on the device on
// both paths.
func TestGPUP2PZeroCopyGraphReplay(t *testing.T) {
	const n, count = 2, 100003
	r, regs := zcRig(t, n, 4*count+16)
	dst := []cuda.DevicePtr{regs[0] + 16, r.recv[1] + 16}
	execs := make([]cuda.GraphExec, n)
	// Relaxed: the ranks share this thread, and instantiating one rank's
	// graph while another's capture is open is refused in the stricter modes.
	for rank, be := range r.bes {
		require.NoError(t, r.drv.StreamBeginCapture(be.ctx, r.streams[rank], cuda.CaptureRelaxed))
	}
	r.zcRing(t, collectives.Float32, count, dst)
	for rank := range r.bes {
		execs[rank] = r.endCapture(t, rank)
	}
	rng := rand.New(rand.NewPCG(33, 34))
	base := []cuda.DevicePtr{regs[0], r.recv[1]}
	for it := range 20 {
		r.zcRound(t, rng, collectives.Float32, count, 16, base, regs, []bool{true, false}, defaultP2PZC,
			func([]cuda.DevicePtr) { r.launchGraphs(t, execs) }, fmt.Sprintf("replay %d", it))
	}
}
