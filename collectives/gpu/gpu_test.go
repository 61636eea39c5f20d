package gpu

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

var (
	gpuRanks = flag.Int("gpu.ranks", 0, "ranks (GPUs) for the GPU tests; 0: every GPU, at most 8")
	gpuLarge = flag.Bool("gpu.large", false, "also run 64 MiB cases")
	gpuPerf  = flag.Bool("gpu.perf", false, "time AllReduce, Broadcast, AllGather and ReduceScatter")
)

// rig is n in-process ranks, one GPU each, over the uva transport.
type rig struct {
	drv     cuda.Driver
	bes     []*Backend
	streams []cuda.Stream
	send    []cuda.DevicePtr // per rank, cap bytes (+ guard)
	recv    []cuda.DevicePtr
	cap     uint64
}

const guard = 256

func newRig(t *testing.T, n int, capBytes uint64) *rig {
	t.Helper()
	return newRigOn(t, n, capBytes, func(rank int) int { return rank })
}

// newRigOn is newRig with rank r on device dev(r) (ranks may share one).
func newRigOn(t *testing.T, n int, capBytes uint64, dev func(rank int) int) *rig {
	t.Helper()
	return newRigWith(t, n, capBytes, func(rank int) Config { return Config{Device: dev(rank), Transport: "uva"} })
}

// newRigWith is newRig with each rank's Config from cfg.
func newRigWith(t *testing.T, n int, capBytes uint64, cfg func(rank int) Config) *rig {
	t.Helper()
	drv, err := cuda.Load()
	if err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	cnt, err := drv.DeviceCount()
	if err != nil || cnt == 0 {
		t.Skipf("no CUDA device: %v", err)
	}
	for rank := range n {
		if d := cfg(rank).Device; d >= cnt {
			t.Skipf("needs GPU %d, have %d", d, cnt)
		}
	}
	image, err := kernels.Image()
	if err != nil {
		t.Skipf("no kernels: %v", err)
	}
	r := &rig{drv: drv, bes: make([]*Backend, n), streams: make([]cuda.Stream, n),
		send: make([]cuda.DevicePtr, n), recv: make([]cuda.DevicePtr, n), cap: capBytes}
	g := transporttest.NewGroup(n)
	require.NoError(t, g.Run(func(rank int, b transport.Bootstrap) error {
		be, err := newBackend(context.Background(), drv, b, cfg(rank), image, newMapper)
		r.bes[rank] = be
		return err
	}))
	for i, be := range r.bes {
		var err error
		r.streams[i], err = drv.StreamCreate(be.ctx, true)
		require.NoError(t, err)
		r.send[i], err = drv.MemAlloc(be.ctx, capBytes+guard)
		require.NoError(t, err)
		r.recv[i], err = drv.MemAlloc(be.ctx, capBytes+guard)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for i, be := range r.bes {
			_ = drv.StreamSynchronize(be.ctx, r.streams[i])
			_ = drv.MemFree(be.ctx, r.send[i])
			_ = drv.MemFree(be.ctx, r.recv[i])
			_ = drv.StreamDestroy(be.ctx, r.streams[i])
		}
		require.NoError(t, g.Run(func(rank int, _ transport.Bootstrap) error { return r.bes[rank].Close() }))
	})
	return r
}

func (r *rig) put(t *testing.T, rank int, dst cuda.DevicePtr, b []byte) {
	if len(b) == 0 {
		return
	}
	require.NoError(t, r.drv.MemcpyHtoD(r.bes[rank].ctx, dst, unsafe.Pointer(&b[0]), uint64(len(b))))
	// From pageable memory cuMemcpyHtoD may return before the DMA lands,
	// and the kernels run on non-blocking streams.
	require.NoError(t, r.drv.CtxSynchronize(r.bes[rank].ctx))
}

func (r *rig) get(t *testing.T, rank int, src cuda.DevicePtr, n int) []byte {
	b := make([]byte, n)
	if n > 0 {
		require.NoError(t, r.drv.MemcpyDtoH(r.bes[rank].ctx, unsafe.Pointer(&b[0]), src, uint64(n)))
	}
	return b
}

// endCapture ends rank's stream capture and returns the graph made
// executable, both destroyed when the test ends.
func (r *rig) endCapture(t *testing.T, rank int) cuda.GraphExec {
	t.Helper()
	ctx := r.bes[rank].ctx
	g, err := r.drv.StreamEndCapture(ctx, r.streams[rank])
	require.NoError(t, err)
	ge, err := r.drv.GraphInstantiate(ctx, g)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = r.drv.GraphExecDestroy(ctx, ge)
		_ = r.drv.GraphDestroy(ctx, g)
	})
	return ge
}

// launchGraphs launches execs[rank] on every rank's stream.
func (r *rig) launchGraphs(t *testing.T, execs []cuda.GraphExec) {
	t.Helper()
	for rank, be := range r.bes {
		require.NoError(t, r.drv.GraphLaunch(be.ctx, execs[rank], r.streams[rank]))
	}
}

func (r *rig) sync(t *testing.T) {
	for i, be := range r.bes {
		require.NoError(t, r.drv.StreamSynchronize(be.ctx, r.streams[i]))
	}
}

func rigRanks(t *testing.T) int {
	n := *gpuRanks
	if n == 0 {
		drv, err := cuda.Load()
		if err != nil {
			t.Skipf("no CUDA driver: %v", err)
		}
		n, _ = drv.DeviceCount()
		n = min(n, 8)
	}
	if n == 0 {
		t.Skip("no CUDA device")
	}
	return n
}

// gpuCase runs one collective on every rank and checks every rank's output
// against the host reference; inPlace uses NCCL's in-place layouts;
// misalign shifts both buffers by one element.
func (r *rig) gpuCase(t *testing.T, rng *rand.Rand, c collectives.Collective, dt collectives.DataType, op collectives.Op, count int, inPlace, misalign bool, root int) error {
	n := len(r.bes)
	es := dt.Size()
	a := collectives.Args{Coll: c, Count: count, Type: dt, Op: op, Root: root}
	sendBytes, recvBytes := a.SendBytes(n), a.RecvBytes(n)
	shift := 0
	if misalign {
		shift = es
	}
	ins := make([][]byte, n)
	for rank := 0; rank < n; rank++ {
		ins[rank] = make([]byte, sendBytes)
		fill(rng, dt, op, ins[rank])
		// Poison the whole receive buffer, guard included.
		require.NoError(t, r.drv.MemsetD8Async(r.bes[rank].ctx, r.recv[rank], 0xA5, r.cap+guard, r.streams[rank]))
		require.NoError(t, r.drv.StreamSynchronize(r.bes[rank].ctx, r.streams[rank]))
		recv := uintptr(r.recv[rank]) + uintptr(shift)
		send := uintptr(r.send[rank]) + uintptr(shift)
		if inPlace {
			switch c {
			case collectives.AllGather:
				send = recv + uintptr(rank*count*es)
			case collectives.ReduceScatter:
				send = recv
				recv = send + uintptr(rank*count*es)
			default:
				send = recv
			}
		}
		r.put(t, rank, cuda.DevicePtr(send), ins[rank])
		a.Send, a.Recv, a.Stream = send, recv, uintptr(r.streams[rank])
		if err := a.Validate(rank, n); err != nil {
			return err
		}
		if err := r.bes[rank].Run(context.Background(), &a); err != nil {
			return err
		}
	}
	r.sync(t)
	for rank := 0; rank < n; rank++ {
		base := r.recv[rank] + cuda.DevicePtr(shift)
		outOff, outBytes := 0, recvBytes
		if inPlace && c == collectives.ReduceScatter {
			outOff = rank * count * es
		}
		if c == collectives.Reduce && rank != root {
			continue
		}
		got := r.get(t, rank, base+cuda.DevicePtr(outOff), outBytes+guard)
		if !bytes.Equal(got[outBytes:], bytes.Repeat([]byte{0xA5}, guard)) && !(inPlace && c == collectives.ReduceScatter) {
			return fmt.Errorf("rank %d: wrote past the end of recv", rank)
		}
		got = got[:outBytes]
		var err error
		switch c {
		case collectives.AllReduce, collectives.Reduce:
			err = checkReduced(dt, op, ins, 0, got, count)
		case collectives.ReduceScatter:
			err = checkReduced(dt, op, ins, rank*count, got, count)
		case collectives.Broadcast:
			if !bytes.Equal(got, ins[root]) {
				err = fmt.Errorf("broadcast output differs from root's input")
			}
		case collectives.AllGather:
			for s := 0; s < n && err == nil; s++ {
				if !bytes.Equal(got[s*count*es:(s+1)*count*es], ins[s]) {
					err = fmt.Errorf("allgather slot %d differs", s)
				}
			}
		}
		if err != nil {
			return fmt.Errorf("rank %d: %w", rank, err)
		}
	}
	return nil
}

func TestGPUCollectives(t *testing.T) {
	n := rigRanks(t)
	counts := []int{0, 1, 7, 4095, 1<<20 + 3}
	r := newRig(t, n, uint64((1<<20+3)*8*n)+64)
	rng := rand.New(rand.NewPCG(1, 2))
	failed, run := 0, 0
	for _, c := range collectives.AllCollectives() {
		ops := collectives.AllOps()
		if !c.Reduces() {
			ops = ops[:1]
		}
		for _, dt := range collectives.AllDataTypes() {
			for _, op := range ops {
				for _, count := range counts {
					for _, inPlace := range []bool{false, true} {
						for _, mis := range []bool{false, true} {
							if mis && count != 4095 {
								continue
							}
							root := (count + int(dt)) % n
							run++
							if err := r.gpuCase(t, rng, c, dt, op, count, inPlace, mis, root); err != nil {
								failed++
								t.Errorf("%s %s %s count=%d inplace=%v misaligned=%v root=%d: %v", c, dt, op, count, inPlace, mis, root, err)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("GPU collectives on %d ranks: %d cases, %d failed", n, run, failed)
}

func TestGPUAlgorithmsForced(t *testing.T) {
	n := rigRanks(t)
	r := newRig(t, n, 64<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []int{1, 4095, 1<<20 + 3}
	if *gpuLarge {
		sizes = append(sizes, 16<<20)
	}
	// LL above what its lines hold falls back to one-shot.
	for _, algo := range []collectives.Algorithm{collectives.OneShot, collectives.TwoShot, collectives.LL} {
		for _, be := range r.bes {
			be.forced = algo
		}
		for _, dt := range []collectives.DataType{collectives.Float32, collectives.BFloat16, collectives.Int32} {
			for _, op := range []collectives.Op{collectives.Sum, collectives.Max} {
				for _, count := range sizes {
					for _, inPlace := range []bool{false, true} {
						if err := r.gpuCase(t, rng, collectives.AllReduce, dt, op, count, inPlace, false, 0); err != nil {
							t.Errorf("%s %s %s count=%d inplace=%v: %v", algo, dt, op, count, inPlace, err)
						}
					}
				}
			}
		}
	}
}

// TestGPUGraphReplay captures one AllReduce per rank in a CUDA graph and
// replays it 100 times with new inputs: the device-side epochs keep every
// replay synchronized without host bookkeeping.
func TestGPUGraphReplay(t *testing.T) {
	n := rigRanks(t)
	r := newRig(t, n, 1<<20)
	const count = 40000
	dt, op := collectives.Float32, collectives.Sum
	execs := make([]cuda.GraphExec, n)
	for rank, be := range r.bes {
		s := r.streams[rank]
		require.NoError(t, r.drv.StreamBeginCapture(be.ctx, s, cuda.CaptureThreadLocal))
		a := collectives.Args{Coll: collectives.AllReduce, Send: uintptr(r.send[rank]), Recv: uintptr(r.recv[rank]), Count: count, Type: dt, Op: op, Stream: uintptr(s)}
		require.NoError(t, be.Run(context.Background(), &a))
		execs[rank] = r.endCapture(t, rank)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for it := 0; it < 100; it++ {
		ins := make([][]byte, n)
		for rank, be := range r.bes {
			ins[rank] = make([]byte, count*4)
			fill(rng, dt, op, ins[rank])
			r.put(t, rank, r.send[rank], ins[rank])
			require.NoError(t, r.drv.MemsetD8Async(be.ctx, r.recv[rank], 0xA5, count*4, r.streams[rank]))
		}
		r.launchGraphs(t, execs)
		r.sync(t)
		for rank := range r.bes {
			require.NoError(t, checkReduced(dt, op, ins, 0, r.get(t, rank, r.recv[rank], count*4), count), "replay %d rank %d", it, rank)
		}
	}
}

// TestGPUBackToBack enqueues 1,000 mixed collectives without waiting, then
// checks every output.
func TestGPUBackToBack(t *testing.T) {
	n := rigRanks(t)
	const count = 3001
	r := newRig(t, n, uint64(count*4*n*6))
	rng := rand.New(rand.NewPCG(7, 8))
	dt := collectives.Int32
	colls := collectives.AllCollectives()
	ins := make([][]byte, n)
	for rank := range r.bes {
		ins[rank] = make([]byte, count*4*n)
		fill(rng, dt, collectives.Sum, ins[rank])
		r.put(t, rank, r.send[rank], ins[rank])
	}
	slot := uint64(count * 4 * n)
	for i := 0; i < 1000; i++ {
		c := colls[i%len(colls)]
		for rank, be := range r.bes {
			a := collectives.Args{Coll: c, Send: uintptr(r.send[rank]), Recv: uintptr(r.recv[rank]) + uintptr(uint64(i%len(colls))*slot),
				Count: count, Type: dt, Op: collectives.Op(i % 5), Root: i % n, Stream: uintptr(r.streams[rank])}
			require.NoError(t, be.Run(context.Background(), &a))
		}
	}
	r.sync(t)
	// The last call of each collective decides its slot's contents.
	for k, c := range colls {
		last := 1000 - len(colls) + k
		for last%len(colls) != k {
			last--
		}
		op, root := collectives.Op(last%5), last%n
		for rank := range r.bes {
			got := r.get(t, rank, r.recv[rank]+cuda.DevicePtr(uint64(k)*slot), count*4*n)
			var err error
			inputs := make([][]byte, n)
			for s := range inputs {
				inputs[s] = ins[s][:count*4]
			}
			switch c {
			case collectives.AllReduce:
				err = checkReduced(dt, op, inputs, 0, got, count)
			case collectives.Reduce:
				if rank == root {
					err = checkReduced(dt, op, inputs, 0, got, count)
				}
			case collectives.ReduceScatter:
				err = checkReduced(dt, op, ins, rank*count, got, count)
			case collectives.Broadcast:
				if !bytes.Equal(got[:count*4], ins[root][:count*4]) {
					err = fmt.Errorf("broadcast differs")
				}
			case collectives.AllGather:
				for s := 0; s < n; s++ {
					if !bytes.Equal(got[s*count*4:(s+1)*count*4], ins[s][:count*4]) {
						err = fmt.Errorf("allgather slot %d differs", s)
					}
				}
			}
			require.NoError(t, err, "%s rank %d", c, rank)
		}
	}
}

// TestGPUPerf times each collective (float32 sum) with CUDA events on rank
// 0, nccl-tests style: 5 warm-up ops, then 20 timed ones.
func TestGPUPerf(t *testing.T) {
	if !*gpuPerf {
		t.Skip("timing runs only with -gpu.perf")
	}
	n := rigRanks(t)
	const maxBytes = 1 << 30
	r := newRig(t, n, maxBytes*2)
	be0 := r.bes[0]
	start, err := r.drv.EventCreate(be0.ctx, true)
	require.NoError(t, err)
	stop, err := r.drv.EventCreate(be0.ctx, true)
	require.NoError(t, err)
	for _, c := range []collectives.Collective{collectives.AllReduce, collectives.Broadcast, collectives.AllGather, collectives.ReduceScatter} {
		for bytes := 8; bytes <= maxBytes; bytes *= 8 {
			count := bytes / 4
			if c == collectives.ReduceScatter || c == collectives.AllGather {
				count /= n
			}
			if count == 0 {
				continue
			}
			iters := 20
			run := func(k int) {
				for i := 0; i < k; i++ {
					for rank, be := range r.bes {
						a := collectives.Args{Coll: c, Send: uintptr(r.send[rank]), Recv: uintptr(r.recv[rank]), Count: count,
							Type: collectives.Float32, Op: collectives.Sum, Stream: uintptr(r.streams[rank])}
						require.NoError(t, be.Run(context.Background(), &a))
					}
				}
			}
			run(5)
			require.NoError(t, r.drv.EventRecord(be0.ctx, start, r.streams[0]))
			run(iters)
			require.NoError(t, r.drv.EventRecord(be0.ctx, stop, r.streams[0]))
			r.sync(t)
			ms, err := r.drv.EventElapsed(start, stop)
			require.NoError(t, err)
			us := float64(ms) * 1000 / float64(iters)
			algbw := float64(bytes) / us / 1e3
			factor := 1.0
			switch c {
			case collectives.AllReduce:
				factor = 2 * float64(n-1) / float64(n)
			case collectives.AllGather, collectives.ReduceScatter:
				factor = float64(n-1) / float64(n)
			}
			t.Logf("PERF %-14s %11d B %9.2f us algbw %7.2f busbw %7.2f GB/s", c, bytes, us, algbw, algbw*factor)
		}
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(m.Run())
}
