package gpu

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// TestGPUCopyEngineChunkCost (with -gpu.perf) times what one chunk of the
// copy-engine reductions costs on the link, piece by piece: 256 MiB from
// rank 0 into rank 1's registered buffer as one copy, as 8 MiB copies back
// to back, with a flag written into rank 1 after each (as the push stream
// does), split over two streams, and with rank 1 pushing the same way into
// rank 0 at once (both directions, as in a reduction). Every variant's
// data is checked.
func TestGPUCopyEngineChunkCost(t *testing.T) {
	if !*gpuPerf {
		t.Skip("timing runs only with -gpu.perf")
	}
	const total, chunk = 256 << 20, 8 << 20
	r := newRig(t, 2, total)
	r.requireCE(t)
	recv := r.registeredRecv(t, total)
	be := r.bes[0]
	drv, cx := r.drv, be.ctx
	ins := r.sendRandom(t, rand.New(rand.NewPCG(31, 32)), collectives.Uint8, total)
	reg := be.lookup(uintptr(recv[0]), total)
	require.NotNil(t, reg)
	dst := reg.region.Peers[1]
	be1 := r.bes[1]
	reg1 := be1.lookup(uintptr(recv[1]), total)
	require.NotNil(t, reg1)
	back := reg1.region.Peers[0]       // rank 0's buffer, as rank 1 maps it
	flag := be.ce.peers[1] + ceDataOff // rank 1's data[0]; nothing waits on it here
	start, err := drv.EventCreate(cx, true)
	require.NoError(t, err)
	stop, err := drv.EventCreate(cx, true)
	require.NoError(t, err)
	s0, s1 := r.streams[0], be.ce.red[redSpread]
	seq := uint32(0)
	variants := []struct {
		name string
		run  func()
	}{
		{"one 256 MiB copy", func() {
			require.NoError(t, drv.MemcpyAsync(cx, cuda.DevicePtr(dst), r.send[0], total, s0))
		}},
		{"32 x 8 MiB", func() {
			for off := uint64(0); off < total; off += chunk {
				require.NoError(t, drv.MemcpyAsync(cx, cuda.DevicePtr(dst+uintptr(off)), r.send[0]+cuda.DevicePtr(off), chunk, s0))
			}
		}},
		{"32 x (8 MiB + peer flag)", func() {
			for off := uint64(0); off < total; off += chunk {
				require.NoError(t, drv.MemcpyAsync(cx, cuda.DevicePtr(dst+uintptr(off)), r.send[0]+cuda.DevicePtr(off), chunk, s0))
				seq++
				require.NoError(t, drv.StreamWriteValue32(cx, s0, cuda.DevicePtr(flag), seq))
			}
		}},
		{"32 x (8 MiB + peer flag), 2 streams", func() {
			require.NoError(t, drv.EventRecord(cx, be.ce.fork, s0))
			require.NoError(t, drv.StreamWaitEvent(cx, s1, be.ce.fork))
			for k, off := 0, uint64(0); off < total; k, off = k+1, off+chunk {
				s := []cuda.Stream{s0, s1}[k&1]
				require.NoError(t, drv.MemcpyAsync(cx, cuda.DevicePtr(dst+uintptr(off)), r.send[0]+cuda.DevicePtr(off), chunk, s))
				seq++
				require.NoError(t, drv.StreamWriteValue32(cx, s, cuda.DevicePtr(flag+4*uintptr(k&1)), seq))
			}
			require.NoError(t, drv.EventRecord(cx, be.ce.redJoin[redSpread], s1))
			require.NoError(t, drv.StreamWaitEvent(cx, s0, be.ce.redJoin[redSpread]))
		}},
		{"32 x (8 MiB + peer flag), both directions", func() {
			for off := uint64(0); off < total; off += chunk {
				require.NoError(t, drv.MemcpyAsync(cx, cuda.DevicePtr(dst+uintptr(off)), r.send[0]+cuda.DevicePtr(off), chunk, s0))
				require.NoError(t, drv.MemcpyAsync(be1.ctx, cuda.DevicePtr(back+uintptr(off)), r.send[1]+cuda.DevicePtr(off), chunk, r.streams[1]))
				seq++
				require.NoError(t, drv.StreamWriteValue32(cx, s0, cuda.DevicePtr(flag), seq))
				require.NoError(t, drv.StreamWriteValue32(be1.ctx, r.streams[1], cuda.DevicePtr(be1.ce.peers[0]+ceDataOff+4), seq))
			}
		}},
	}
	for _, v := range variants {
		require.NoError(t, drv.MemsetD8Async(r.bes[1].ctx, recv[1], 0xA5, total, r.streams[1]))
		r.sync(t)
		v.run() // warm-up
		require.NoError(t, drv.EventRecord(cx, start, s0))
		const iters = 5
		for range iters {
			v.run()
		}
		require.NoError(t, drv.EventRecord(cx, stop, s0))
		r.sync(t)
		ms, err := drv.EventElapsed(start, stop)
		require.NoError(t, err)
		us := float64(ms) * 1000 / iters
		require.True(t, bytes.Equal(r.get(t, 1, recv[1], total), ins[0]), "%s: rank 1's buffer differs from rank 0's input", v.name)
		t.Logf("PERF %-38s %9.1f us %7.1f GB/s", v.name, us, float64(total)/us/1e3)
	}
}
