package host

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm/pairtest"
	"github.com/goccl/goccl/transport/transporttest"
)

// cmaMin is the threshold the tests use: small, so that calls on both
// sides of it and over several bounce chunks stay quick.
const cmaMin = 8 << 10

// requireCMA skips where this machine does not let a process read its
// own memory through process_vm_readv (a kernel without it, seccomp).
func requireCMA(t *testing.T) {
	t.Helper()
	var src, dst [8]byte
	src[0] = 1
	liov := []unix.Iovec{{Base: &dst[0]}}
	liov[0].SetLen(8)
	riov := []unix.RemoteIovec{{Base: addr(src[:]), Len: 8}}
	if _, err := unix.ProcessVMReadv(os.Getpid(), liov, riov, 0); err != nil {
		t.Skipf("process_vm_readv is not available here: %v", err)
	}
}

// transportOf is the transport rank r's backend used for its last call.
func (j *job) transportOf(r int) string {
	return j.bes[r].(collectives.PathTeller).LastPath().Transport
}

// wantsCMA is whether c should take the single-copy path at threshold min.
func wantsCMA(c call, min int) bool {
	switch c.coll {
	case collectives.AllReduce, collectives.AllGather, collectives.Broadcast, collectives.ReduceScatter:
		return c.count*c.dt.Size() >= min
	}
	return false
}

// TestCMACollectives runs every collective, datatype and op, in and out
// of place, at counts just under, at and over the threshold and over
// several bounce chunks (with a tail), on 2 and 3 ranks in one process,
// reading each other in place or through the system call, checking every element against the reference and that the calls took
// the path their size says.
func TestCMACollectives(t *testing.T) {
	requireCMA(t)
	for _, tc := range []struct {
		n       int
		syscall bool // ranks read each other through process_vm_readv
	}{{2, false}, {3, false}, {2, true}, {3, true}} {
		n := tc.n
		t.Run(fmt.Sprintf("ranks=%d/syscall=%v", n, tc.syscall), func(t *testing.T) {
			cmaDirectOff = tc.syscall
			j := newJob(t, n, Config{CMAMin: cmaMin})
			cmaDirectOff = false
			require.Equal(t, !tc.syscall, j.bes[0].(*backend).cma.direct[1])
			chunk := j.bes[0].(*backend).cma.chunk
			for _, dt := range collectives.AllDataTypes() {
				es := dt.Size()
				ops := collectives.AllOps()
				for _, count := range []int{cmaMin/es - 1, cmaMin / es, cmaMin/es + 7, (2*n*chunk+4096)/es + 3} {
					if count > 100000 && dt != collectives.Float32 && dt != collectives.BFloat16 && dt != collectives.Int64 {
						ops = []collectives.Op{collectives.Sum}
					}
					for _, c := range calls(n, count, []collectives.DataType{dt}, ops) {
						require.NoError(t, j.verify(c))
						want := "shm"
						if wantsCMA(c, cmaMin) {
							want = "cma"
						}
						for r := 0; r < n; r++ {
							require.Equal(t, want, j.transportOf(r), "%v: rank %d", c, r)
						}
					}
				}
			}
		})
	}
}

// TestCMAMisaligned runs single-copy calls on buffers that start an odd
// number of elements past a cache line, with odd counts, against the
// reference.
func TestCMAMisaligned(t *testing.T) {
	requireCMA(t)
	const n = 2
	cmaDirectOff = true // the system call's path; TestCMACollectives has both
	j := newJob(t, n, Config{CMAMin: cmaMin})
	cmaDirectOff = false
	for _, tc := range []struct {
		coll  collectives.Collective
		dt    collectives.DataType
		op    collectives.Op
		count int
		skew  int // elements
	}{
		{collectives.AllReduce, collectives.Float32, collectives.Sum, 100003, 1},
		{collectives.AllReduce, collectives.Float16, collectives.Max, 77777, 3},
		{collectives.AllReduce, collectives.Int8, collectives.Avg, 300001, 5},
		{collectives.AllReduce, collectives.Float64, collectives.Prod, 33333, 7},
		{collectives.AllGather, collectives.Uint8, collectives.Sum, 123457, 1},
		{collectives.Broadcast, collectives.Int32, collectives.Sum, 54321, 3},
		{collectives.ReduceScatter, collectives.BFloat16, collectives.Sum, 65537, 9},
		{collectives.ReduceScatter, collectives.Uint64, collectives.Min, 12347, 1},
	} {
		c := call{coll: tc.coll, dt: tc.dt, op: tc.op, count: tc.count, root: 1}
		t.Run(c.String(), func(t *testing.T) {
			a := collectives.Args{Coll: c.coll, Count: c.count, Type: c.dt, Op: c.op, Root: c.root}
			skew := tc.skew * c.dt.Size()
			ins, outs, befores := make([][]byte, n), make([][]byte, n), make([][]byte, n)
			args := make([]collectives.Args, n)
			for r := 0; r < n; r++ {
				ins[r] = alloc(a.SendBytes(n) + skew)[skew:]
				fill(j.rng, c.dt, c.op, ins[r])
				outs[r] = alloc(a.RecvBytes(n) + skew)[skew:]
				poison(c.dt, outs[r])
				befores[r] = clone(outs[r])
				args[r] = a
				args[r].Send, args[r].Recv = addr(ins[r]), addr(outs[r])
			}
			for r, err := range j.run(context.Background(), args) {
				require.NoError(t, err, "rank %d", r)
				require.Equal(t, "cma", j.transportOf(r))
			}
			for r := 0; r < n; r++ {
				require.NoError(t, j.checkRank(c, r, ins, outs[r], befores[r]), "rank %d", r)
			}
			runtime.KeepAlive(ins)
		})
	}
}

// TestCMAOff: turned off by the environment or the configuration, on
// every rank or on one, calls above the threshold take staging and stay
// right; thresholds that differ between ranks, or a bad setting, fail
// every rank's initialization.
func TestCMAOff(t *testing.T) {
	big := call{coll: collectives.AllReduce, dt: collectives.Float32, op: collectives.Sum, count: 300007}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		cfgs    []Config // by rank
		want    string   // the transport of a large call
		wantErr string
		why     string // in the DEBUG line of a fallback
	}{
		{name: "on", cfgs: []Config{{CMAMin: cmaMin}, {CMAMin: cmaMin}}, want: "cma"},
		{name: "env min", env: map[string]string{"GOCCL_HOST_CMA_MIN": "1M"}, cfgs: []Config{{}, {}}, want: "cma"},
		{name: "env on", env: map[string]string{"GOCCL_HOST_CMA": "1", "GOCCL_HOST_CMA_MIN": "64K"}, cfgs: []Config{{}, {}}, want: "cma"},
		{name: "env off", env: map[string]string{"GOCCL_HOST_CMA": "0"}, cfgs: []Config{{CMAMin: cmaMin}, {CMAMin: cmaMin}}, want: "shm", why: "turned off on rank 0"},
		{name: "config off", cfgs: []Config{{CMAMin: -1}, {CMAMin: -1}}, want: "shm"},
		{name: "one rank off", cfgs: []Config{{CMAMin: cmaMin}, {CMAMin: -1}}, want: "shm", why: "turned off on rank 1"},
		{name: "thresholds differ", cfgs: []Config{{CMAMin: cmaMin}, {CMAMin: 2 * cmaMin}}, wantErr: "single-copy threshold of"},
		{name: "bad env", env: map[string]string{"GOCCL_HOST_CMA": "maybe"}, cfgs: []Config{{}, {}}, wantErr: `GOCCL_HOST_CMA="maybe"`},
		{name: "bad env min", env: map[string]string{"GOCCL_HOST_CMA_MIN": "lots"}, cfgs: []Config{{}, {}}, wantErr: `GOCCL_HOST_CMA_MIN="lots"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == "cma" {
				requireCMA(t)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			n := len(tc.cfgs)
			j := &job{t: t, n: n, bes: make([]collectives.Backend, n), rng: rand.New(rand.NewPCG(7, 7))}
			errs := make([]error, n)
			var logged syncBuffer
			logger := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
			g := transporttest.NewGroup(n)
			_ = g.Run(func(r int, b transport.Bootstrap) error {
				cfg := tc.cfgs[r]
				cfg.Logger = logger
				j.bes[r], errs[r] = New(context.Background(), b, cfg)
				return errs[r]
			})
			t.Cleanup(j.close)
			if tc.wantErr != "" {
				for r, err := range errs {
					require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
					assert.Contains(t, err.Error(), tc.wantErr, "rank %d", r)
				}
				return
			}
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			if tc.why != "" {
				assert.Contains(t, logged.String(), "single copy off")
				assert.Contains(t, logged.String(), tc.why)
			}
			c := big
			if tc.name == "env min" {
				c.count = 1 << 18 // exactly 1 MiB
			}
			for _, inPlace := range []bool{false, true} {
				c.inPlace = inPlace
				require.NoError(t, j.verify(c))
				for r := 0; r < n; r++ {
					assert.Equal(t, tc.want, j.transportOf(r), "rank %d", r)
				}
			}
		})
	}
}

// mapped returns n bytes of fresh anonymous memory followed by a page
// that is not mapped, or, with readOnly, n bytes that cannot be written.
func mapped(t *testing.T, n int, readOnly bool) []byte {
	t.Helper()
	size := (n + pageBytes - 1) / pageBytes * pageBytes
	m, err := unix.Mmap(-1, 0, size+pageBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	// Raw munmap: x/sys's Munmap takes back only whole mappings.
	base := addr(m)
	_, _, e := unix.Syscall(unix.SYS_MUNMAP, base+uintptr(size), pageBytes, 0)
	require.Zero(t, e)
	t.Cleanup(func() { _, _, _ = unix.Syscall(unix.SYS_MUNMAP, base, uintptr(size), 0) })
	if readOnly {
		require.NoError(t, unix.Mprotect(m[:size], unix.PROT_READ))
	}
	return m[size-n : size]
}

// TestCMABadBuffers: a count past a rank's buffer (its last pages not
// mapped, or a receive buffer that cannot be written) is an error naming
// that rank on every rank, and nothing crashes; a peer's address that is
// not mapped is an error naming the peer.
func TestCMABadBuffers(t *testing.T) {
	requireCMA(t)
	const n, count = 2, 1 << 18
	for _, tc := range []struct {
		name    string
		coll    collectives.Collective
		bad     int  // the rank with the bad buffer
		recv    bool // the receive buffer, else the send buffer
		ro      bool // read-only rather than short
		inPlace bool
	}{
		{name: "allreduce send short", coll: collectives.AllReduce, bad: 1},
		{name: "allreduce recv short", coll: collectives.AllReduce, bad: 0, recv: true},
		{name: "allreduce recv read-only", coll: collectives.AllReduce, bad: 1, recv: true, ro: true},
		{name: "allreduce in place short", coll: collectives.AllReduce, bad: 1, inPlace: true},
		{name: "allgather recv short", coll: collectives.AllGather, bad: 1, recv: true},
		{name: "broadcast root send short", coll: collectives.Broadcast, bad: 0},
		{name: "reducescatter send short", coll: collectives.ReduceScatter, bad: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, n, Config{CMAMin: cmaMin, Timeout: 30 * time.Second})
			a := collectives.Args{Coll: tc.coll, Count: count, Type: collectives.Float32, Op: collectives.Sum}
			args := make([]collectives.Args, n)
			var keep [][]byte
			for r := 0; r < n; r++ {
				sb, rb := a.SendBytes(n), a.RecvBytes(n)
				send, recv := alloc(sb), alloc(rb)
				if r == tc.bad {
					// One element short of the count: the last 4 bytes
					// of the call lie in the page that is not mapped.
					if tc.recv {
						recv = mapped(t, rb-4, tc.ro)
					} else {
						send = mapped(t, sb-4, false)
					}
				}
				keep = append(keep, send, recv)
				args[r] = a
				args[r].Send, args[r].Recv = addr(send), addr(recv)
				if tc.inPlace {
					args[r].Recv = args[r].Send
				}
			}
			errs := j.run(context.Background(), args)
			runtime.KeepAlive(keep)
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				if r == tc.bad {
					require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
					assert.Contains(t, err.Error(), "not all mapped")
					continue
				}
				require.ErrorIs(t, err, collectives.ErrAborted, "rank %d", r)
				var pe *collectives.PeerError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, tc.bad, pe.Rank, "rank %d: %v", r, err)
			}
		})
	}

	t.Run("peer address not mapped", func(t *testing.T) {
		j := newJob(t, n, Config{CMAMin: cmaMin})
		b := j.bes[0].(*backend)
		hole := mapped(t, 0, false)
		dst := make([]byte, 64)
		err := b.cmaRead(1, "send", dst, addr(hole[:1:1]))
		require.ErrorIs(t, err, collectives.ErrInvalidArgument)
		require.ErrorIs(t, err, unix.EFAULT)
		var pe *collectives.PeerError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, 1, pe.Rank)
		assert.Contains(t, err.Error(), "rank 1's send buffer")
	})
}

// TestCMAAcrossProcesses runs single-copy calls between this process and
// a child through process_vm_readv, against the reference (in place where
// verifyPair makes them); without being asked, the two take staging.
func TestCMAAcrossProcesses(t *testing.T) {
	requireCMA(t)
	b, wait := pairRank(t, "TestCMAAcrossProcesses")
	defer wait()
	ctx := context.Background()
	be, err := New(ctx, b, Config{CMAMin: cmaMin, Timeout: 30 * time.Second})
	require.NoError(t, err)
	defer be.Close()
	require.False(t, be.(*backend).cma.direct[1-b.Rank()])
	i := 0
	for _, dt := range []collectives.DataType{collectives.Float32, collectives.BFloat16, collectives.Int8, collectives.Float64, collectives.Float8E4M3} {
		for _, count := range []int{cmaMin/dt.Size() - 1, 300007} {
			for _, c := range calls(2, count, []collectives.DataType{dt}, []collectives.Op{collectives.Sum, collectives.Max, collectives.Avg}) {
				if c.inPlace && c.coll != collectives.ReduceScatter {
					continue // verifyPair makes only ReduceScatter's in-place calls
				}
				i++
				require.NoError(t, verifyPair(ctx, be, b.Rank(), c, uint64(i)), "%v", c)
				want := "shm"
				if wantsCMA(c, cmaMin) {
					want = "cma"
				}
				require.Equal(t, want, be.(collectives.PathTeller).LastPath().Transport, "%v", c)
			}
		}
	}
	// Unasked, ranks in two processes take staging.
	auto, err := New(ctx, b, Config{Timeout: 30 * time.Second})
	require.NoError(t, err)
	defer auto.Close()
	c := call{coll: collectives.AllReduce, dt: collectives.Float32, op: collectives.Sum, count: 1<<20 + 3}
	require.NoError(t, verifyPair(ctx, auto, b.Rank(), c, 99))
	require.Equal(t, "shm", auto.(collectives.PathTeller).LastPath().Transport)
}

// TestCMAPeerKilled: rank 1 (another process) dies inside a single-copy
// AllReduce, after it has arrived at the call's first barrier; rank 0,
// which then makes the call, fails with an error naming rank 1 rather
// than hanging or crashing.
func TestCMAPeerKilled(t *testing.T) {
	requireCMA(t)
	const test = "TestCMAPeerKilled"
	var b transport.Bootstrap
	var parent *pairtest.Parent
	if pairtest.IsChild() {
		b = pairtest.Child()
	} else {
		p, err := pairtest.Start(test)
		require.NoError(t, err)
		b, parent = p, p
	}
	ctx := context.Background()
	be, err := New(ctx, b, Config{CMAMin: cmaMin, Timeout: 20 * time.Second, Logger: discard()})
	require.NoError(t, err)
	buf := alloc(8 << 20)
	a := collectives.Args{Coll: collectives.AllReduce, Send: addr(buf), Recv: addr(buf), Count: len(buf) / 4,
		Type: collectives.Float32, Op: collectives.Sum}
	if parent == nil {
		go func() { _ = be.Run(ctx, &a) }()
		time.Sleep(300 * time.Millisecond)
		_ = unix.Kill(os.Getpid(), unix.SIGKILL)
		select {}
	}
	// Wait for rank 1 to be dead (a zombie until Wait reaps it).
	pid := be.(*backend).cma.pids[1]
	for !dead(pid) {
		time.Sleep(10 * time.Millisecond)
	}
	err = be.Run(ctx, &a)
	runtime.KeepAlive(buf)
	require.Error(t, err)
	t.Logf("rank 0: %v", err)
	var pe *collectives.PeerError
	require.ErrorAs(t, err, &pe, "%v", err)
	assert.Equal(t, 1, pe.Rank, "%v", err)
	assert.True(t, strings.Contains(err.Error(), "is gone") || strings.Contains(err.Error(), "waited"), "%v", err)
	require.NoError(t, be.Close())
	require.Error(t, parent.Wait(60*time.Second), "rank 1 was killed")
}

// dead reports whether process pid has exited (gone, or a zombie).
func dead(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// syncBuffer is a bytes.Buffer that ranks on several goroutines may log to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// BenchmarkCMARead compares process_vm_readv (here of this process's
// own memory: the kernel's path is the same as for a peer's) with a copy,
// from memory and from the caches, into a buffer that stays in L2.
func BenchmarkCMARead(b *testing.B) {
	for _, sz := range []struct {
		name  string
		bytes int
	}{{"256KiB", 256 << 10}, {"32MiB", 32 << 20}} {
		src, dst := alloc(sz.bytes), alloc(256<<10)
		fill(rand.New(rand.NewPCG(1, 2)), collectives.Uint8, collectives.Sum, src)
		c := &cma{pids: []int{os.Getpid()}}
		b.Run("readv/"+sz.name, func(b *testing.B) {
			b.SetBytes(int64(sz.bytes))
			for i := 0; i < b.N; i++ {
				for x := 0; x < len(src); x += len(dst) {
					if err := c.read(c.pids[0], dst, addr(src[x:])); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run("copy/"+sz.name, func(b *testing.B) {
			b.SetBytes(int64(sz.bytes))
			for i := 0; i < b.N; i++ {
				for x := 0; x < len(src); x += len(dst) {
					copy(dst, src[x:])
				}
			}
		})
	}
}
