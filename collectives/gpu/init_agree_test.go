package gpu

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// initFailDriver fails one step of New on its rank only.
type initFailDriver struct {
	*fakeDriver
	step string
}

func (d *initFailDriver) DeviceGet(ordinal int) (cuda.Device, error) {
	if d.step == "device" {
		return 0, errFake
	}
	return d.fakeDriver.DeviceGet(ordinal)
}

func (d *initFailDriver) ModuleLoadData(c cuda.Context, image []byte) (cuda.Module, error) {
	if d.step == "module" {
		return 0, errFake
	}
	return d.fakeDriver.ModuleLoadData(c, image)
}

func (d *initFailDriver) MemAllocHost(c cuda.Context, n uint64) (unsafe.Pointer, error) {
	if d.step == "abort flag" {
		return nil, errFake
	}
	return d.fakeDriver.MemAllocHost(c, n)
}

func (d *initFailDriver) FuncSetMaxDynamicSharedMem(c cuda.Context, f cuda.Function, bytes int) error {
	if d.step == "stash" {
		return errFake
	}
	return d.fakeDriver.FuncSetMaxDynamicSharedMem(c, f, bytes)
}

// A step of New that fails on one rank only fails New on every rank
// promptly: the others must not wait for the failed rank in a later
// bootstrap exchange (the init barrier) until their context expires.
func TestNewLocalFailureFailsEveryRank(t *testing.T) {
	for _, step := range []string{"device", "abort flag", "module", "stash"} {
		t.Run(step, func(t *testing.T) {
			const n, bad = 3, 1
			g := transporttest.NewGroup(n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs := make([]error, n)
			drvs := make([]*fakeDriver, n)
			maps := make([]*fakeMapper, n)
			start := time.Now()
			_ = g.Run(func(rank int, b transport.Bootstrap) error {
				drvs[rank] = newFakeDriver()
				d := &initFailDriver{fakeDriver: drvs[rank]}
				if rank == bad {
					d.step = step
				}
				mk := func(_ context.Context, _ string, _ cuda.Driver, b transport.Bootstrap, _ cuda.Device, _ cuda.Context) (transport.Mapper, error) {
					maps[rank] = &fakeMapper{b: b}
					return maps[rank], nil
				}
				_, errs[rank] = newBackend(ctx, d, b, Config{Device: rank, Transport: "uva"}, []byte("fatbin"), mk)
				return nil
			})
			assert.Less(t, time.Since(start), 5*time.Second, "no rank waited for the failed one")
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				assert.NotErrorIs(t, err, context.DeadlineExceeded, "rank %d", r)
				if r == bad {
					assert.ErrorIs(t, err, errFake)
				} else {
					assert.Contains(t, err.Error(), "rank 1", "rank %d names the failed rank", r)
				}
				// Everything New took is given back on every rank.
				retained := 1
				if step == "device" && r == bad {
					retained = 0 // it never got a context
				}
				assert.Equal(t, retained, drvs[r].released, "rank %d context released", r)
				if maps[r] != nil && maps[r].allocs > 0 {
					assert.Len(t, maps[r].freed, maps[r].allocs, "rank %d workspace freed", r)
				}
			}
		})
	}
}

// Register and Alloc on a closed backend fail with ErrClosed on every rank
// instead of reaching the transport, which Close has dropped.
func TestRegisterAfterCloseFails(t *testing.T) {
	bes, _, maps := newFakeBackends(t, 2, Config{})
	for _, be := range bes {
		require.NoError(t, be.Close())
	}
	errs := together(len(bes), func(r int) error {
		_, err := bes[r].Register(context.Background(), 0x1000, 64)
		return err
	})
	for _, err := range errs {
		assert.ErrorIs(t, err, collectives.ErrClosed)
	}
	errs = together(len(bes), func(r int) error {
		_, _, err := bes[r].Alloc(context.Background(), 64)
		return err
	})
	for r, err := range errs {
		assert.ErrorIs(t, err, collectives.ErrClosed)
		assert.Zero(t, maps[r].regs)
		assert.Equal(t, 1, maps[r].allocs, "only the workspace")
	}
}

// freeHostGate holds MemFreeHost of the abort flag until the test lets it go, and records
// whether the freed memory was written afterwards.
type freeHostGate struct {
	*fakeDriver
	entered, proceed chan struct{}
}

func (d *freeHostGate) MemFreeHost(c cuda.Context, p unsafe.Pointer) error {
	if p != unsafe.Pointer(d.hostMem[0]) { // not the abort flag
		return d.fakeDriver.MemFreeHost(c, p)
	}
	close(d.entered)
	<-d.proceed
	return d.fakeDriver.MemFreeHost(c, p)
}

// Abort may run on any goroutine, also while Close frees the abort flag
// (a bootstrap failure handler firing as the peers go away): it must not
// write the flag's pinned memory once Close has started freeing it.
func TestAbortDuringCloseLeavesFreedFlagAlone(t *testing.T) {
	g := transporttest.NewGroup(1)
	d := &freeHostGate{fakeDriver: newFakeDriver(), entered: make(chan struct{}), proceed: make(chan struct{})}
	mk := func(_ context.Context, _ string, _ cuda.Driver, b transport.Bootstrap, _ cuda.Device, _ cuda.Context) (transport.Mapper, error) {
		return &fakeMapper{b: b}, nil
	}
	be, err := newBackend(context.Background(), d, g.Rank(0), Config{Transport: "uva"}, []byte("fatbin"), mk)
	require.NoError(t, err)
	flag := &d.hostMem[0][0]

	closed := make(chan error)
	go func() { closed <- be.Close() }()
	<-d.entered // Close is freeing the flag
	aborted := make(chan struct{})
	go func() {
		be.Abort(errFake)
		close(aborted)
	}()
	select {
	case <-aborted:
	case <-time.After(100 * time.Millisecond):
	}
	written := atomic.LoadUint32(flag)
	close(d.proceed)
	require.NoError(t, <-closed)
	<-aborted
	assert.Zero(t, written, "Abort wrote the abort flag while it was being freed")
	assert.Zero(t, atomic.LoadUint32(flag), "Abort wrote the abort flag after it was freed")
}

// A failed launch aborts the communicator: the peers' kernels wait for
// this rank's at a barrier and only the abort flag releases them.
func TestLaunchFailureAborts(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	drvs[0].failOn = "launch"
	a := collectives.Args{Coll: collectives.AllReduce, Send: 0x10000000, Recv: 0x20000000,
		Count: 1024, Type: collectives.Float32, Op: collectives.Sum, Stream: 0x55}
	err := bes[0].Run(context.Background(), &a)
	require.Error(t, err)
	assert.ErrorIs(t, err, collectives.ErrAborted)
	assert.ErrorContains(t, err, "launch all_reduce")
	assert.NotZero(t, atomic.LoadUint32((*uint32)(bes[0].abortHost)), "abort flag raised for the kernels")
	// Later calls fail at once, launching nothing.
	drvs[0].failOn = ""
	n := len(drvs[0].launches)
	require.ErrorIs(t, bes[0].Run(context.Background(), &a), collectives.ErrAborted)
	assert.Equal(t, n, len(drvs[0].launches))
}
