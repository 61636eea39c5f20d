package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// Addresses of the fake mapper's single address space, written out here
// from its scheme (rank r's copy of the k-th Alloc at k*0x1000_0000 +
// r<<32) and the documented flag layout (signal area + 32 KiB: ready[8],
// then done[8] 128 bytes further), independent of the backend's constants.
const (
	userStream = cuda.Stream(0x55)
	wsBase     = uintptr(0x1000_0000) // the workspace is every rank's first Alloc
	regBase0   = uintptr(0x2000_0000) // the first user Alloc
	sendBase   = uintptr(0x7000_0000) // unregistered input buffers
)

func rankAddr(base uintptr, r int) uintptr { return base + uintptr(r)<<32 }
func readyFlag(owner, slot int) uintptr    { return rankAddr(wsBase, owner) + 0x8000 + 4*uintptr(slot) }
func doneFlag(owner, slot int) uintptr {
	return rankAddr(wsBase, owner) + 0x8000 + 128 + 4*uintptr(slot)
}

// A Broadcast root's flags, which only its signal stream writes.
func sigDataFlag(owner, slot int) uintptr {
	return rankAddr(wsBase, owner) + 0x8000 + 768 + 4*uintptr(slot)
}
func sigDoneFlag(owner, slot int) uintptr {
	return rankAddr(wsBase, owner) + 0x8000 + 896 + 4*uintptr(slot)
}

// signalOps is a root's raise of a flag (at(p) in every peer p) from the
// signal stream behind everything on the user's stream so far, through the
// rec-th record of the pushed event.
func signalOps(be *Backend, peers []int, at func(p int) uintptr, val uint32, rec uint64) []fakeOp {
	sig := be.ce.red[redSignal]
	ops := []fakeOp{
		{kind: "record", stream: userStream, event: be.ce.pushed, rec: rec},
		{kind: "waitEvent", stream: sig, event: be.ce.pushed, rec: rec},
	}
	for _, p := range peers {
		ops = append(ops, fakeOp{kind: "write", stream: sig, dst: at(p), val: val})
	}
	return ops
}

// together runs f on every rank concurrently (collective calls).
// ceAt1MiB puts the copy-engine thresholds at 1 MiB for the test: the
// cases below were written around that size (the defaults are larger).
func ceAt1MiB(t *testing.T) {
	t.Setenv(EnvTune, "ce.broadcast=1M,ce.all_gather=1M,ce.all_reduce=1M,ce.reduce_scatter=1M")
}

// registerAt4G registers 8 MiB at 0x4000_0000 (rank r's copy at
// rankAddr) on every rank of bes.
func registerAt4G(t *testing.T, bes []*Backend) []collectives.Registration {
	t.Helper()
	regs := make([]collectives.Registration, len(bes))
	for r, err := range together(len(bes), func(r int) error {
		var err error
		regs[r], err = bes[r].Register(context.Background(), rankAddr(0x4000_0000, r), 8<<20)
		return err
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	return regs
}

func together(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errs
}

// allocAll is a collective Alloc of size bytes on every rank.
func allocAll(t testing.TB, bes []*Backend, size uint64) ([]uintptr, []collectives.Registration) {
	t.Helper()
	ptrs := make([]uintptr, len(bes))
	regs := make([]collectives.Registration, len(bes))
	for r, err := range together(len(bes), func(r int) error {
		var err error
		ptrs[r], regs[r], err = bes[r].Alloc(context.Background(), size)
		return err
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	return ptrs, regs
}

// forgetOps drops the ops recorded so far (setup's), for the exact-sequence
// checks that follow.
func forgetOps(drvs []*fakeDriver) {
	for _, d := range drvs {
		d.mu.Lock()
		d.ops = nil
		d.mu.Unlock()
	}
}

func rotated(me, n int) []int {
	var ps []int
	for i := 1; i < n; i++ {
		ps = append(ps, (me+i)%n)
	}
	return ps
}

// forkOps and joinOp are the side-stream local copy of an out-of-place call.
func forkOps(be *Backend, dst, src uintptr, n uint64, rec uint64) []fakeOp {
	return []fakeOp{
		{kind: "record", stream: userStream, event: be.ce.fork, rec: rec},
		{kind: "waitEvent", stream: be.ce.side, event: be.ce.fork, rec: rec},
		{kind: "copy", stream: be.ce.side, dst: dst, src: src, n: n},
		{kind: "record", stream: be.ce.side, event: be.ce.join, rec: rec},
	}
}

func joinOp(be *Backend, rec uint64) fakeOp {
	return fakeOp{kind: "waitEvent", stream: userStream, event: be.ce.join, rec: rec}
}

func TestCEAllGatherEnqueuesCopiesAndFlags(t *testing.T) {
	ceAt1MiB(t)
	cases := []struct {
		n       int
		inPlace bool
		count   int
		algo    string
	}{
		{2, false, 1 << 18, ""}, // 1 MiB of float32: copy engines by size
		{2, true, 1 << 18, ""},
		{3, false, 7, "ce"}, // forced at a tiny odd size
		{3, true, 1<<18 + 3, ""},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d ranks inplace=%v count=%d algo=%q", tc.n, tc.inPlace, tc.count, tc.algo), func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, tc.n, Config{Algo: tc.algo})
			bytes := uint64(tc.count * 4)
			recv, _ := allocAll(t, bes, bytes*uint64(tc.n)+64)
			for call := uint32(1); call <= 2; call++ {
				for me, be := range bes {
					require.Equal(t, rankAddr(regBase0, me), recv[me])
					slot := recv[me] + uintptr(me)*uintptr(bytes)
					send := rankAddr(sendBase, me)
					if tc.inPlace {
						send = slot
					}
					drvs[me].ops = nil
					require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: collectives.AllGather,
						Send: send, Recv: recv[me], Count: tc.count, Type: collectives.Float32, Stream: uintptr(userStream)}))

					var want []fakeOp
					peers := rotated(me, tc.n)
					for _, p := range peers {
						want = append(want, fakeOp{kind: "write", stream: userStream, dst: readyFlag(p, me), val: call})
					}
					for _, p := range peers {
						want = append(want, fakeOp{kind: "wait", stream: userStream, dst: readyFlag(me, p), val: call, geq: true})
					}
					if !tc.inPlace {
						// The local copy forks after ready, behind the peer copies' claim on the engines.
						want = append(want, forkOps(be, slot, send, bytes, uint64(call))...)
					}
					for _, p := range peers {
						want = append(want, fakeOp{kind: "copy", stream: userStream,
							dst: rankAddr(regBase0, p) + uintptr(me)*uintptr(bytes), src: send, n: bytes})
					}
					for _, p := range peers {
						want = append(want, fakeOp{kind: "write", stream: userStream, dst: doneFlag(p, me), val: call})
					}
					for _, p := range peers {
						want = append(want, fakeOp{kind: "wait", stream: userStream, dst: doneFlag(me, p), val: call, geq: true})
					}
					if !tc.inPlace {
						want = append(want, joinOp(be, uint64(call)))
					}
					assert.Equal(t, want, drvs[me].opsOf(), "rank %d call %d", me, call)
					assert.Empty(t, drvs[me].launches, "no kernel")
				}
			}
		})
	}
}

func TestCEBroadcastEnqueuesCopiesAndFlags(t *testing.T) {
	ceAt1MiB(t)
	const n, count = 3, 1<<20 + 1 // int8: just over 1 MiB
	for _, root := range []int{0, 2} {
		for _, inPlace := range []bool{false, true} {
			t.Run(fmt.Sprintf("root %d inplace=%v", root, inPlace), func(t *testing.T) {
				bes, drvs, _ := newFakeBackends(t, n, Config{})
				recv, _ := allocAll(t, bes, count)
				forgetOps(drvs) // the zero-copy table's writes
				for me, be := range bes {
					send := rankAddr(sendBase, me)
					if inPlace {
						send = recv[me]
					}
					require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: collectives.Broadcast,
						Send: send, Recv: recv[me], Count: count, Type: collectives.Int8, Root: root, Stream: uintptr(userStream)}))
					var want []fakeOp
					if me != root {
						want = []fakeOp{
							{kind: "write", stream: userStream, dst: readyFlag(root, me), val: 1},
							{kind: "wait", stream: userStream, dst: sigDoneFlag(me, root), val: 1, geq: true},
						}
					} else {
						peers := rotated(me, n)
						for _, p := range peers {
							want = append(want, fakeOp{kind: "wait", stream: userStream, dst: readyFlag(me, p), val: 1, geq: true})
						}
						if !inPlace {
							want = append(want, forkOps(be, recv[me], send, count, 1)...)
						}
						for _, p := range peers {
							want = append(want, fakeOp{kind: "copy", stream: userStream, dst: rankAddr(regBase0, p), src: send, n: count})
						}
						want = append(want, signalOps(be, peers, func(p int) uintptr { return sigDoneFlag(p, me) }, 1, 1)...)
						if !inPlace {
							want = append(want, joinOp(be, 1))
						}
					}
					assert.Equal(t, want, drvs[me].opsOf(), "rank %d", me)
					assert.Empty(t, drvs[me].launches)
				}
			})
		}
	}
}

func TestCESingleRank(t *testing.T) {
	ceAt1MiB(t)
	bes, drvs, _ := newFakeBackends(t, 1, Config{})
	be, drv := bes[0], drvs[0]
	recv, _ := allocAll(t, bes, 4<<20)
	forgetOps(drvs) // the zero-copy table's writes
	send := rankAddr(sendBase, 0)
	require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: collectives.AllGather,
		Send: send, Recv: recv[0], Count: 1 << 20, Type: collectives.Int32, Stream: uintptr(userStream)}))
	want := append(forkOps(be, recv[0], send, 4<<20, 1), joinOp(be, 1))
	assert.Equal(t, want, drv.opsOf())
	drv.ops = nil
	require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: collectives.Broadcast,
		Send: recv[0], Recv: recv[0], Count: 1 << 20, Type: collectives.Int32, Stream: uintptr(userStream)}))
	assert.Empty(t, drv.opsOf(), "in-place broadcast on one rank moves nothing")
}

// path runs one call on every rank and reports "ce" (copies, no kernel) or
// "kernel" (one launch, no copy, no flag); anything else fails.
func path(t *testing.T, bes []*Backend, drvs []*fakeDriver, args func(r int) collectives.Args) string {
	t.Helper()
	got := ""
	for r, be := range bes {
		drvs[r].ops, drvs[r].launches = nil, nil
		a := args(r)
		require.NoError(t, be.Run(context.Background(), &a))
		var p string
		launches, waits := drvs[r].launches, len(drvs[r].opsOf("wait"))
		switch ops := drvs[r].opsOf(); {
		case len(launches) == 1 && len(ops) == 1 && !strings.HasPrefix(launches[0].name, "goccl_cereduce"):
			p = "kernel"
		case len(launches) == 0 && waits > 0:
			p = "ce"
		case len(launches) >= 1 && strings.HasPrefix(launches[0].name, "goccl_cereduce") && waits > 0:
			p = "ce" // the copy engines move the data, kernels reduce it
		default:
			t.Fatalf("rank %d: neither path: %+v", r, ops)
		}
		if r > 0 {
			require.Equal(t, got, p, "rank %d chose differently", r)
		}
		got = p
	}
	return got
}

func TestCESelection(t *testing.T) {
	ceAt1MiB(t)
	const n = 2
	type tc struct {
		name       string
		algo       string
		coll       collectives.Collective
		count      int // float32 elements
		registered bool
		short      int // registration this many bytes short of the receive span
		capturing  bool
		want       string
	}
	cases := []tc{
		{"allgather registered 1 MiB", "", collectives.AllGather, 1 << 18, true, 0, false, "ce"},
		{"allgather registered below 1 MiB", "", collectives.AllGather, 1<<18 - 1, true, 0, false, "kernel"},
		{"allgather unregistered large", "", collectives.AllGather, 1 << 22, false, 0, false, "kernel"},
		{"allgather span overruns registration", "", collectives.AllGather, 1 << 22, true, 4, false, "kernel"},
		{"allgather registered small forced ce", "ce", collectives.AllGather, 1, true, 0, false, "ce"},
		{"allgather unregistered forced ce", "ce", collectives.AllGather, 1 << 22, false, 0, false, "kernel"},
		{"allgather registered large forced oneshot", "oneshot", collectives.AllGather, 1 << 22, true, 0, false, "kernel"},
		{"allgather registered large capturing", "", collectives.AllGather, 1 << 22, true, 0, true, "kernel"},
		{"broadcast registered large", "", collectives.Broadcast, 1 << 22, true, 0, false, "ce"},
		{"broadcast registered below 1 MiB", "", collectives.Broadcast, 1<<18 - 1, true, 0, false, "kernel"},
		{"broadcast registered forced twoshot", "twoshot", collectives.Broadcast, 1 << 22, true, 0, false, "kernel"},
		{"broadcast capturing forced ce", "ce", collectives.Broadcast, 1 << 22, true, 0, true, "kernel"},
		{"allreduce registered large", "", collectives.AllReduce, 1 << 22, true, 0, false, "ce"},
		{"allreduce registered below 1 MiB", "", collectives.AllReduce, 1<<18 - 1, true, 0, false, "kernel"},
		{"allreduce unregistered large forced ce", "ce", collectives.AllReduce, 1 << 22, false, 0, false, "kernel"},
		{"allreduce registered large capturing", "", collectives.AllReduce, 1 << 22, true, 0, true, "kernel"},
		{"allreduce registered small forced ce", "ce", collectives.AllReduce, 3, true, 0, false, "ce"},
		{"reducescatter registered large", "", collectives.ReduceScatter, 1 << 22, true, 0, false, "ce"},
		{"reducescatter unregistered large", "", collectives.ReduceScatter, 1 << 22, false, 0, false, "ce"},
		{"reducescatter unregistered below 1 MiB", "", collectives.ReduceScatter, 1<<18 - 1, false, 0, false, "kernel"},
		{"reducescatter capturing", "", collectives.ReduceScatter, 1 << 22, false, 0, true, "kernel"},
		{"reduce registered large", "", collectives.Reduce, 1 << 22, true, 0, false, "kernel"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, n, Config{Algo: c.algo})
			a := collectives.Args{Coll: c.coll, Count: c.count, Type: collectives.Float32, Op: collectives.Sum, Stream: uintptr(userStream)}
			span := uint64(a.RecvBytes(n))
			recv := []uintptr{rankAddr(0x3000_0000, 0), rankAddr(0x3000_0000, 1)}
			if c.registered {
				recv, _ = allocAll(t, bes, span-uint64(c.short))
			}
			for r := range bes {
				drvs[r].capturing = map[cuda.Stream]bool{userStream: c.capturing}
			}
			got := path(t, bes, drvs, func(r int) collectives.Args {
				x := a
				x.Send, x.Recv = rankAddr(sendBase, r), recv[r]
				return x
			})
			assert.Equal(t, c.want, got)
		})
	}
}

func TestCECaptureFallsBackWithoutUsingASequenceNumber(t *testing.T) {
	ceAt1MiB(t)
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	recv, _ := allocAll(t, bes, 8<<20)
	args := func(r int) collectives.Args {
		return collectives.Args{Coll: collectives.AllGather, Send: rankAddr(sendBase, r), Recv: recv[r],
			Count: 1 << 20, Type: collectives.Float32, Stream: uintptr(userStream)}
	}
	for r := range bes {
		drvs[r].capturing = map[cuda.Stream]bool{userStream: true}
	}
	require.Equal(t, "kernel", path(t, bes, drvs, args))
	assert.Equal(t, "goccl_allgather_oneshot", drvs[0].launches[0].name)
	for r := range bes {
		drvs[r].capturing[userStream] = false
	}
	require.Equal(t, "ce", path(t, bes, drvs, args))
	for r := range bes {
		for _, o := range drvs[r].opsOf("write", "wait") {
			assert.Equal(t, uint32(1), o.val, "the captured call took no sequence number")
		}
	}
}

func TestCEAbort(t *testing.T) {
	ceAt1MiB(t)
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	recv, _ := allocAll(t, bes, 8<<20)
	ag := collectives.Args{Coll: collectives.AllGather, Send: rankAddr(sendBase, 0), Recv: recv[0],
		Count: 1 << 20, Type: collectives.Float32, Stream: uintptr(userStream)}

	// Before any copy-engine call there is nothing to release.
	bes[1].Abort(errors.New("early"))
	assert.Empty(t, drvs[1].opsOf("memset32"))

	be, drv := bes[0], drvs[0]
	for range 3 {
		require.NoError(t, be.Run(context.Background(), &ag))
	}
	drv.ops = nil
	cause := errors.New("peer 1 vanished")
	be.Abort(cause)
	assert.Equal(t, []fakeOp{
		{kind: "memset32", stream: be.ce.rescue, dst: readyFlag(0, 0), val: 3 + 1<<30, n: ceLandedOff / 4},
		{kind: "memset32", stream: be.ce.rescue, dst: readyFlag(0, 0) + ceLandedOff + 4, val: 3 + 1<<30, n: (ceFlagBytes - ceLandedOff - 4) / 4},
	}, drv.opsOf(), "this rank's flags released past every issued call, but the kernel's landed flag")
	assert.NotEqual(t, userStream, be.ce.rescue)

	drv.ops = nil
	err := be.Run(context.Background(), &ag)
	require.ErrorIs(t, err, collectives.ErrAborted)
	require.ErrorIs(t, err, cause)
	assert.Empty(t, drv.opsOf(), "nothing enqueued after Abort")
}

func TestCEEnqueueFailureAborts(t *testing.T) {
	ceAt1MiB(t)
	for _, fail := range []string{"copy", "write", "wait", "record", "isCapturing"} {
		t.Run(fail, func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, 2, Config{})
			recv, _ := allocAll(t, bes, 8<<20)
			drvs[0].failOn = fail
			err := bes[0].Run(context.Background(), &collectives.Args{Coll: collectives.AllGather, Send: rankAddr(sendBase, 0),
				Recv: recv[0], Count: 1 << 20, Type: collectives.Float32, Stream: uintptr(userStream)})
			require.ErrorIs(t, err, collectives.ErrAborted, "the peers may be waiting: the communicator must stop")
			require.ErrorIs(t, err, errFake)
			assert.True(t, bes[0].aborted.Load())
			assert.Equal(t, uint32(1), atomic32(drvs[0]), "kernels see the abort flag")
		})
	}
}

func atomic32(d *fakeDriver) uint32 { return atomic.LoadUint32(&d.hostMem[0][0]) }

func TestCEOffUnlessEveryRankProbes(t *testing.T) {
	for _, failing := range []string{"write", "wait", "streamCreate"} {
		t.Run(failing, func(t *testing.T) {
			bes, drvs, _ := newFakeBackendsWith(t, 3, Config{}, func(rank int, d *fakeDriver) {
				if rank == 1 {
					d.failOn = failing
				}
			})
			for r, be := range bes {
				assert.False(t, be.ce.ok, "rank %d", r)
			}
			recv, _ := allocAll(t, bes, 3*(8<<20))
			got := path(t, bes, drvs, func(r int) collectives.Args {
				return collectives.Args{Coll: collectives.AllGather, Send: rankAddr(sendBase, r), Recv: recv[r],
					Count: 2 << 20, Type: collectives.Float32, Stream: uintptr(userStream)}
			})
			assert.Equal(t, "kernel", got)
		})
	}
	bes, _, _ := newFakeBackends(t, 3, Config{})
	for r, be := range bes {
		assert.True(t, be.ce.ok, "rank %d: every rank probed fine", r)
	}
}

func TestRegistrationMustBeSymmetric(t *testing.T) {
	ceAt1MiB(t)
	t.Run("alloc sizes differ", func(t *testing.T) {
		bes, _, maps := newFakeBackends(t, 3, Config{})
		errs := together(3, func(r int) error {
			_, _, err := bes[r].Alloc(context.Background(), 4096+uint64(r/2))
			return err
		})
		for r, err := range errs {
			require.ErrorIs(t, err, ErrNotSymmetric, "rank %d", r)
			require.ErrorIs(t, err, collectives.ErrInvalidArgument)
			assert.Contains(t, err.Error(), "4097", "names the odd size")
			assert.Equal(t, 1, maps[r].allocs, "rank %d: nothing but the workspace was mapped", r)
		}
	})
	t.Run("register sizes differ", func(t *testing.T) {
		bes, _, maps := newFakeBackends(t, 2, Config{})
		errs := together(2, func(r int) error {
			_, err := bes[r].Register(context.Background(), rankAddr(0x4000_0000, r), 1<<20+uint64(r))
			return err
		})
		for r, err := range errs {
			require.ErrorIs(t, err, ErrNotSymmetric, "rank %d", r)
			assert.Zero(t, maps[r].regs)
		}
	})
	t.Run("one rank passes nil", func(t *testing.T) {
		bes, _, maps := newFakeBackends(t, 2, Config{})
		errs := together(2, func(r int) error {
			p := rankAddr(0x4000_0000, r)
			if r == 1 {
				p = 0
			}
			_, err := bes[r].Register(context.Background(), p, 4096)
			return err
		})
		require.ErrorIs(t, errs[0], ErrNotSymmetric, "rank 0 learns that rank 1 failed")
		assert.Contains(t, errs[0].Error(), "rank 1")
		require.ErrorIs(t, errs[1], collectives.ErrInvalidArgument)
		assert.Zero(t, maps[0].regs+maps[1].regs)
	})
	t.Run("symmetric register then close", func(t *testing.T) {
		bes, drvs, maps := newFakeBackends(t, 2, Config{})
		regs := registerAt4G(t, bes)
		args := func(r int) collectives.Args {
			return collectives.Args{Coll: collectives.Broadcast, Send: rankAddr(0x4000_0000, r), Recv: rankAddr(0x4000_0000, r),
				Count: 2 << 20, Type: collectives.Float32, Stream: uintptr(userStream)}
		}
		require.Equal(t, "ce", path(t, bes, drvs, args))
		for r, err := range together(2, func(r int) error {
			syncs := drvs[r].syncs
			err := regs[r].Close(context.Background())
			assert.Greater(t, drvs[r].syncs, syncs, "rank %d: work drained before unmapping", r)
			return err
		}) {
			require.NoError(t, err, "rank %d", r)
			assert.Len(t, maps[r].freed, 1)
		}
		require.Equal(t, "kernel", path(t, bes, drvs, args), "closed registrations are forgotten")
	})
}

func TestRegistrationLookup(t *testing.T) {
	be := &Backend{log: slog.Default()}
	a := be.track(&registration{base: 0x1000, size: 0x1000})
	b := be.track(&registration{base: 0x8000, size: 0x100})
	c := be.track(&registration{base: 0x1800, size: 0x100}) // inside a
	d := be.track(&registration{base: 0x0, size: 0x10})
	require.Equal(t, []*registration{d, a, c, b}, be.regs, "sorted by base")
	cases := []struct {
		p    uintptr
		n    uint64
		want *registration
	}{
		{0x1000, 0x1000, a},
		{0x1000, 0x1001, nil},
		{0x1800, 0x100, c},
		{0x1800, 0x101, a}, // past c's end but inside a
		{0x1fff, 1, a},
		{0x2000, 1, nil},
		{0x8000, 0x100, b},
		{0x80ff, 2, nil},
		{0x7fff, 1, nil},
		{0x0, 0x10, d},
		{0x10, 0, d}, // an empty span at the end
		{0x9000, 4, nil},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, be.lookup(tc.p, tc.n), "[%#x,+%#x)", tc.p, tc.n)
	}
	require.True(t, be.untrack(c))
	require.False(t, be.untrack(c))
	assert.Equal(t, a, be.lookup(0x1800, 0x100))
}

func TestCERunAllocatesNothing(t *testing.T) {
	// As ceAt1MiB, and 1 MiB landing slots, so that the Broadcast lands.
	t.Setenv(EnvTune, "ce.broadcast=1M,ce.all_gather=1M,ce.all_reduce=1M,ce.reduce_scatter=1M,celand=1M")
	bes, drvs, _ := newFakeBackends(t, 3, Config{})
	recv, _ := allocAll(t, bes, 3*(4<<20))
	for i := 0; i < 16; i++ { // registrations around the one used
		allocAll(t, bes, 4096)
	}
	for _, d := range drvs {
		d.failOn = "none"
		d.capturing = map[cuda.Stream]bool{}
	}
	drv := drvs[1]
	drv.quiet = true
	for _, coll := range []collectives.Collective{collectives.AllGather, collectives.Broadcast, collectives.AllReduce, collectives.ReduceScatter} {
		a := collectives.Args{Coll: coll, Send: rankAddr(sendBase, 1), Recv: recv[1], Count: 1 << 20, Type: collectives.Float32,
			Op: collectives.Sum, Stream: uintptr(userStream)}
		before, lands := bes[1].ce.seq, bes[1].ce.lands
		allocs := testing.AllocsPerRun(50, func() {
			if err := bes[1].Run(context.Background(), &a); err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, "%s", coll)
		// One flag value per call; the reductions take one per chunk (one
		// here: the default chunk holds a 4 MiB message's piece).
		assert.Equal(t, uint32(51), bes[1].ce.seq-before, "%s took the copy-engine path", coll)
		if coll == collectives.Broadcast {
			assert.Equal(t, uint32(51), bes[1].ce.lands-lands, "the Broadcast landed")
		}
	}
}
