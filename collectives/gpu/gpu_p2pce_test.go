package gpu

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// pceRig is n ranks sharing GPU 0 with two symmetric registrations of
// n slots of slot bytes each (+ guard): one from Alloc, one of the rig's
// own memory through Register.
type pceRig struct {
	*rig
	slot uint64
	regs [2][]cuda.DevicePtr // [Alloc, Register][rank]
}

func newPCERig(t *testing.T, n int, slot uint64, cfg func(rank int) Config) *pceRig {
	t.Helper()
	size := uint64(n)*slot + guard
	r := &pceRig{rig: newRigWith(t, n, size, cfg), slot: slot}
	ptrs, regs := allocAll(t, r.bes, size)
	for rank := range n {
		r.regs[0] = append(r.regs[0], cuda.DevicePtr(ptrs[rank]))
		r.regs[1] = append(r.regs[1], r.recv[rank])
	}
	other := make([]collectives.Registration, n)
	for rank, err := range together(n, func(rank int) error {
		var err error
		other[rank], err = r.bes[rank].Register(context.Background(), uintptr(r.recv[rank]), size)
		return err
	}) {
		require.NoError(t, err, "rank %d", rank)
	}
	t.Cleanup(func() {
		for _, rs := range [][]collectives.Registration{other, regs} {
			together(n, func(rank int) error { return rs[rank].Close(context.Background()) })
		}
	})
	return r
}

func (r *pceRig) slotAt(which, rank, i int) cuda.DevicePtr {
	return r.regs[which][rank] + cuda.DevicePtr(uint64(i)*r.slot)
}

// ceRound writes random bytes into every rank's own slot of registration
// which and poisons the rest, runs group(rank) on every rank (from(rank):
// the ranks it receives from, into their slots), and checks every byte of
// every rank's registration: received slots against the senders' inputs,
// its own slot unchanged, the other slots and the guard poisoned still.
// It returns the copy-engine ops the round took on rank 0.
func (r *pceRig) ceRound(t *testing.T, rng *rand.Rand, which int, b int, group func(rank int) collectives.Group, from func(rank int) []int, what string) uint32 {
	t.Helper()
	return r.ceRoundRun(t, rng, which, b, func() {
		for rank, be := range r.bes {
			g := group(rank)
			require.NoError(t, be.RunGroup(context.Background(), &g), "%s: rank %d", what, rank)
		}
	}, from, what)
}

// ceRoundRun is ceRound with run enqueueing the exchange.
func (r *pceRig) ceRoundRun(t *testing.T, rng *rand.Rand, which int, b int, run func(), from func(rank int) []int, what string) uint32 {
	t.Helper()
	n := len(r.bes)
	size := int(uint64(n)*r.slot) + guard
	ins := make([][]byte, n)
	for rank, be := range r.bes {
		ins[rank] = make([]byte, b)
		for i := range ins[rank] {
			ins[rank][i] = byte(rng.Uint32())
		}
		require.NoError(t, r.drv.MemsetD8Async(be.ctx, r.regs[which][rank], 0xA5, uint64(size), r.streams[rank]))
		require.NoError(t, r.drv.StreamSynchronize(be.ctx, r.streams[rank]))
		r.put(t, rank, r.slotAt(which, rank, rank), ins[rank])
	}
	pc := &r.bes[0].ce.p2p
	before := pc.sendK[1].Load() + pc.recvK[n-1].Load()
	run()
	r.sync(t)
	for rank := range r.bes {
		want := bytes.Repeat([]byte{0xA5}, size)
		copy(want[uint64(rank)*r.slot:], ins[rank])
		for _, p := range from(rank) {
			copy(want[uint64(p)*r.slot:], ins[p])
		}
		got := r.get(t, rank, r.regs[which][rank], size)
		if !bytes.Equal(want, got) {
			i := 0
			for want[i] == got[i] {
				i++
			}
			t.Fatalf("%s: rank %d: byte %d of the registration (slot %d) is %#02x, want %#02x", what, rank, i, uint64(i)/r.slot, got[i], want[i])
		}
	}
	return pc.sendK[1].Load() + pc.recvK[n-1].Load() - before
}

func ceRingGroup(r *pceRig, which, count int, dt collectives.DataType) func(rank int) collectives.Group {
	n := len(r.bes)
	return func(rank int) collectives.Group {
		s := uintptr(r.streams[rank])
		next, prev := (rank+1)%n, (rank+n-1)%n
		return collectives.Group{P2P: []collectives.P2P{
			{Kind: collectives.SendOp, Peer: next, Buf: uintptr(r.slotAt(which, rank, rank)), Count: count, Type: dt, Stream: s},
			{Kind: collectives.RecvOp, Peer: prev, Buf: uintptr(r.slotAt(which, rank, prev)), Count: count, Type: dt, Stream: s},
		}}
	}
}

func ceAllPairsGroup(r *pceRig, which, count int, dt collectives.DataType) func(rank int) collectives.Group {
	n := len(r.bes)
	return func(rank int) collectives.Group {
		s := uintptr(r.streams[rank])
		var g collectives.Group
		for _, p := range rotated(rank, n) {
			g.P2P = append(g.P2P,
				collectives.P2P{Kind: collectives.RecvOp, Peer: p, Buf: uintptr(r.slotAt(which, rank, p)), Count: count, Type: dt, Stream: s},
				collectives.P2P{Kind: collectives.SendOp, Peer: p, Buf: uintptr(r.slotAt(which, rank, rank)), Count: count, Type: dt, Stream: s})
		}
		return g
	}
}

// TestGPUP2PCopyEngine runs rings and all-pairs exchanges, each in one
// group per rank, on 2 and 3 ranks sharing GPU 0, over an Alloc'd and a
// Registered buffer, with counts of several types around the threshold
// (1 MiB here): every byte of every rank's registration against the
// senders' inputs and the poison, and the path each op took (the copy
// engines from the threshold on, the kernels below).
func TestGPUP2PCopyEngine(t *testing.T) {
	const threshold = 1 << 20
	t.Setenv(EnvTune, "p2pce=1M")
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			r := newPCERig(t, n, 4<<20, func(int) Config { return Config{Device: 0, Transport: "uva"} })
			rng := rand.New(rand.NewPCG(41, uint64(n)))
			for _, dt := range []collectives.DataType{collectives.Uint8, collectives.BFloat16, collectives.Float32, collectives.Float64} {
				es := dt.Size()
				for _, count := range []int{1, threshold/es - 1, threshold / es, threshold/es + 3, (4<<20)/es - 1} {
					b := count * es
					for which := range 2 {
						for _, shape := range []string{"ring", "all pairs"} {
							group, from := ceRingGroup(r, which, count, dt), func(rank int) []int { return []int{(rank + n - 1) % n} }
							if shape == "all pairs" {
								group, from = ceAllPairsGroup(r, which, count, dt), func(rank int) []int { return rotated(rank, n) }
							}
							what := fmt.Sprintf("%s of %d x %s, registration %d", shape, count, dt, which)
							took := r.ceRound(t, rng, which, b, group, from, what)
							if b >= threshold {
								require.Equal(t, uint32(2), took, "%s: rank 0's Send to rank 1 and Recv from rank %d on the copy engines", what, n-1)
							} else {
								require.Zero(t, took, "%s: on the kernels", what)
							}
						}
					}
				}
			}
		})
	}
}

// TestGPUP2PCopyEngineMix puts copy-engine and kernel ops in one group:
// the ring's slots over the copy engines, a ring the other way between
// unregistered buffers and one below the threshold through the kernels,
// in two orders.
func TestGPUP2PCopyEngineMix(t *testing.T) {
	t.Setenv(EnvTune, "p2pce=1M")
	const n, count, small = 3, (1 << 20) + 8, 1000
	r := newPCERig(t, n, 2<<20, func(int) Config { return Config{Device: 0, Transport: "uva"} })
	plain := make([]cuda.DevicePtr, n) // unregistered receive buffers
	for rank, be := range r.bes {
		var err error
		plain[rank], err = r.drv.MemAlloc(be.ctx, count+small)
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.drv.MemFree(be.ctx, plain[rank]) })
	}
	rng := rand.New(rand.NewPCG(43, 44))
	for it := range 4 {
		ins := make([][]byte, n)
		for rank, be := range r.bes {
			ins[rank] = make([]byte, count+small)
			for i := range ins[rank] {
				ins[rank][i] = byte(rng.Uint32())
			}
			r.put(t, rank, r.send[rank], ins[rank])
			require.NoError(t, r.drv.MemsetD8Async(be.ctx, plain[rank], 0xA5, count+small, r.streams[rank]))
		}
		took := r.ceRound(t, rng, 0, count, func(rank int) collectives.Group {
			g := ceRingGroup(r, 0, count, collectives.Uint8)(rank)
			s := uintptr(r.streams[rank])
			next, prev := (rank+1)%n, (rank+n-1)%n
			extra := []collectives.P2P{
				{Kind: collectives.SendOp, Peer: prev, Buf: uintptr(r.send[rank]), Count: count, Type: collectives.Uint8, Stream: s},
				{Kind: collectives.RecvOp, Peer: next, Buf: uintptr(plain[rank]), Count: count, Type: collectives.Uint8, Stream: s},
				{Kind: collectives.SendOp, Peer: next, Buf: uintptr(r.send[rank]) + count, Count: small, Type: collectives.Uint8, Stream: s},
				{Kind: collectives.RecvOp, Peer: prev, Buf: uintptr(plain[rank]) + count, Count: small, Type: collectives.Uint8, Stream: s},
			}
			if it%2 == 1 {
				return collectives.Group{P2P: append(extra, g.P2P...)}
			}
			return collectives.Group{P2P: append(g.P2P, extra...)}
		}, func(rank int) []int { return []int{(rank + n - 1) % n} }, fmt.Sprintf("mix %d", it))
		require.Equal(t, uint32(2), took, "mix %d: the ring's slots on the copy engines", it)
		for rank := range n {
			next, prev := (rank+1)%n, (rank+n-1)%n
			want := append(append([]byte(nil), ins[next][:count]...), ins[prev][count:]...)
			require.True(t, bytes.Equal(want, r.get(t, rank, plain[rank], count+small)), "mix %d: rank %d's kernel Recvs", it, rank)
		}
	}
}

// TestGPUP2PCopyEngineCheck runs a ring under the check (the ranks'
// groups concurrently: each waits for its peers' offers), then a Recv at
// another offset than its Send: both ranks fail naming both, none hangs.
func TestGPUP2PCopyEngineCheck(t *testing.T) {
	t.Setenv(EnvTune, "p2pce=1M")
	const n, count = 2, 1 << 20
	r := newPCERig(t, n, count, func(int) Config { return Config{Device: 0, Transport: "uva", Check: true} })
	rng := rand.New(rand.NewPCG(45, 46))
	ins := make([][]byte, n)
	for rank := range n {
		ins[rank] = make([]byte, count)
		for i := range ins[rank] {
			ins[rank][i] = byte(rng.Uint32())
		}
		r.put(t, rank, r.slotAt(0, rank, rank), ins[rank])
	}
	ring := ceRingGroup(r, 0, count, collectives.Uint8)
	for rank, err := range together(n, func(rank int) error {
		g := ring(rank)
		return r.bes[rank].RunGroup(context.Background(), &g)
	}) {
		require.NoError(t, err, "rank %d", rank)
	}
	r.sync(t)
	for rank := range n {
		prev := (rank + n - 1) % n
		require.True(t, bytes.Equal(ins[prev], r.get(t, rank, r.slotAt(0, rank, prev), count)), "rank %d", rank)
	}
	errs := together(n, func(rank int) error {
		g := collectives.Group{P2P: []collectives.P2P{{Kind: collectives.SendOp, Peer: 1, Buf: uintptr(r.slotAt(0, 0, 0)), Count: count, Type: collectives.Uint8, Stream: uintptr(r.streams[0])}}}
		if rank == 1 {
			g.P2P[0] = collectives.P2P{Kind: collectives.RecvOp, Peer: 0, Buf: uintptr(r.slotAt(0, 1, 1)), Count: count, Type: collectives.Uint8, Stream: uintptr(r.streams[1])}
		}
		return r.bes[rank].RunGroup(context.Background(), &g)
	})
	for rank, err := range errs {
		require.ErrorIs(t, err, ErrNotSymmetric, "rank %d", rank)
		require.Contains(t, err.Error(), "rank 0's Send 2 to rank 1 takes the copy engines at offset 0x0", "rank %d", rank)
		require.Contains(t, err.Error(), fmt.Sprintf("rank 1's matching Recv from rank 0 takes the copy engines at offset %#x", count), "rank %d", rank)
	}
}

// TestGPUP2PCopyEngineTime prints (asserts nothing) a 64 MiB exchange
// between 2 ranks sharing GPU 0 on the copy engines and on the kernels
// (zero copy into the same registered buffers).
func TestGPUP2PCopyEngineTime(t *testing.T) {
	t.Setenv(EnvTune, "p2pce=1M")
	const n, b, iters = 2, 64 << 20, 10
	r := newPCERig(t, n, b, func(int) Config { return Config{Device: 0, Transport: "uva"} })
	ring := ceRingGroup(r, 0, b, collectives.Uint8)
	run := func() time.Duration {
		start := time.Now()
		for range iters {
			for rank, be := range r.bes {
				g := ring(rank)
				require.NoError(t, be.RunGroup(context.Background(), &g))
			}
		}
		r.sync(t)
		return time.Since(start) / iters
	}
	run() // warm up
	ce := run()
	for _, be := range r.bes {
		be.tune.p2pCE = math.MaxInt64
	}
	run()
	kernel := run()
	t.Logf("64 MiB ring, 2 ranks on one GPU: copy engines %v per exchange (%.1f GB/s per rank), kernels %v (%.1f GB/s)",
		ce, float64(b)/ce.Seconds()/1e9, kernel, float64(b)/kernel.Seconds()/1e9)
}

// TestGPUP2PCopyEngineGraphFallsBack captures a ring that would take the
// copy engines and replays it with new inputs: captured, it runs on the
// kernels (whose pair counters live on the device) and takes no number.
func TestGPUP2PCopyEngineGraphFallsBack(t *testing.T) {
	t.Setenv(EnvTune, "p2pce=1M")
	const n, count = 2, 1<<20 + 16
	r := newPCERig(t, n, 2<<20, func(int) Config { return Config{Device: 0, Transport: "uva"} })
	ring := ceRingGroup(r, 0, count, collectives.Uint8)
	for rank, be := range r.bes {
		require.NoError(t, r.drv.StreamBeginCapture(be.ctx, r.streams[rank], cuda.CaptureRelaxed))
	}
	for rank, be := range r.bes {
		g := ring(rank)
		require.NoError(t, be.RunGroup(context.Background(), &g))
	}
	execs := make([]cuda.GraphExec, n)
	for rank := range r.bes {
		execs[rank] = r.endCapture(t, rank)
	}
	require.Zero(t, r.bes[0].ce.p2p.sendK[1].Load(), "the captured group took no copy-engine number")
	rng := rand.New(rand.NewPCG(47, 48))
	for it := range 5 {
		took := r.ceRoundRun(t, rng, 0, count, func() { r.launchGraphs(t, execs) },
			func(rank int) []int { return []int{(rank + n - 1) % n} }, fmt.Sprintf("replay %d", it))
		require.Zero(t, took)
	}
}
