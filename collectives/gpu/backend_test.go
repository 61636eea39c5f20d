package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// newFakeBackends builds one backend per rank of an n-rank in-process group
// over the fake driver and mapper.
func newFakeBackends(t testing.TB, n int, cfg Config) ([]*Backend, []*fakeDriver, []*fakeMapper) {
	t.Helper()
	return newFakeBackendsWith(t, n, cfg, nil)
}

// newFakeBackendsWith lets prep adjust each rank's driver before New; the
// drivers' op logs start empty after New (the probe's ops dropped) and
// their failure injection is cleared.
func newFakeBackendsWith(t testing.TB, n int, cfg Config, prep func(rank int, d *fakeDriver)) ([]*Backend, []*fakeDriver, []*fakeMapper) {
	t.Helper()
	g := transporttest.NewGroup(n)
	bes := make([]*Backend, n)
	drvs := make([]*fakeDriver, n)
	maps := make([]*fakeMapper, n)
	err := g.Run(func(rank int, b transport.Bootstrap) error {
		drvs[rank] = newFakeDriver()
		if prep != nil {
			prep(rank, drvs[rank])
		}
		mk := func(_ context.Context, name string, _ cuda.Driver, b transport.Bootstrap, _ cuda.Device, _ cuda.Context) (transport.Mapper, error) {
			maps[rank] = &fakeMapper{b: b}
			return maps[rank], nil
		}
		c := cfg
		c.Device = rank
		be, err := newBackend(context.Background(), drvs[rank], b, c, []byte("fatbin"), mk)
		bes[rank] = be
		return err
	})
	require.NoError(t, err)
	for _, d := range drvs {
		d.ops, d.failOn = nil, ""
	}
	return bes, drvs, maps
}

func u64at(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
func u32at(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }

func TestRunPacksParamsAndPicksKernel(t *testing.T) {
	bes, drvs, maps := newFakeBackends(t, 3, Config{})
	be, drv := bes[1], drvs[1]
	require.NotNil(t, maps[1])

	cases := []struct {
		name  string
		args  collectives.Args
		want  string
		grid  uint32
		count uint64
	}{
		{"allreduce small f32 sum", collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000, Count: 5, Type: collectives.Float32, Op: collectives.Sum, Stream: 0x55},
			"goccl_allreduce_ll_f32_sum", 1, 5},
		// 64 KiB: LL, a block per 2 KiB.
		{"allreduce 64K f16 prod", collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000, Count: 32 << 10, Type: collectives.Float16, Op: collectives.Prod},
			"goccl_allreduce_ll_f16_prod", 32, 32 << 10},
		// At 3 ranks LL stops where two-shot starts; each block row shares
		// a third of the message, a block per 16 KiB of it.
		{"allreduce 3 ranks at two-shot", collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000, Count: 64 << 10, Type: collectives.Float32, Op: collectives.Sum},
			"goccl_allreduce_twoshot_f32_sum", 6, 64 << 10},
		{"allreduce mid i32 sum at 3 ranks", collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000, Count: 512 << 10, Type: collectives.Int32, Op: collectives.Sum},
			"goccl_allreduce_twoshot_i32_sum", 43, 512 << 10},
		{"allreduce large bf16 max at 3 ranks", collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x1000, Count: 64 << 20, Type: collectives.BFloat16, Op: collectives.Max},
			"goccl_allreduce_twoshot_bf16_max", defaultGrid, 64 << 20},
		{"reduce i8 prod", collectives.Args{Coll: collectives.Reduce, Send: 0x1000, Recv: 0x2000, Count: 100000, Type: collectives.Int8, Op: collectives.Prod, Root: 2},
			"goccl_reduce_oneshot_i8_prod", 7, 100000},
		{"reducescatter u64 avg", collectives.Args{Coll: collectives.ReduceScatter, Send: 0x1000, Recv: 0x2000, Count: 7, Type: collectives.Uint64, Op: collectives.Avg},
			"goccl_reducescatter_oneshot_u64_avg", 1, 7},
		{"broadcast f16", collectives.Args{Coll: collectives.Broadcast, Send: 0x1000, Recv: 0x2000, Count: 3, Type: collectives.Float16, Root: 1},
			"goccl_broadcast_oneshot", 1, 3},
		{"allgather f64", collectives.Args{Coll: collectives.AllGather, Send: 0x1000, Recv: 0x2000, Count: 1 << 20, Type: collectives.Float64},
			"goccl_allgather_oneshot", defaultGrid, 1 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			drv.launches = nil
			require.NoError(t, be.Run(context.Background(), &tc.args))
			require.Len(t, drv.launches, 1)
			l := drv.launches[0]
			assert.Equal(t, tc.want, l.name)
			assert.Equal(t, cuda.Dim3{X: tc.grid, Y: 1, Z: 1}, l.cfg.Grid)
			assert.Equal(t, cuda.Dim3{X: 512, Y: 1, Z: 1}, l.cfg.Block)
			assert.Equal(t, cuda.Stream(tc.args.Stream), l.cfg.Stream)
			p := l.params
			require.Len(t, p, 288)
			assert.Equal(t, uint64(tc.args.Send), u64at(p, 0))
			assert.Equal(t, uint64(tc.args.Recv), u64at(p, 8))
			assert.Equal(t, tc.count, u64at(p, 16))
			assert.Equal(t, uint64(0xabc000), u64at(p, 24), "abort flag")
			// The fake mapper puts rank r's workspace at base + r<<32.
			base := u64at(p, 40)
			assert.Equal(t, base+1<<32, u64at(p, 32), "own signals are rank 1's")
			for r := 0; r < 3; r++ {
				assert.Equal(t, base+uint64(r)<<32, u64at(p, 40+8*r), "peer signals %d", r)
				assert.Equal(t, base+uint64(r)<<32+signalSize, u64at(p, 104+8*r), "peer staging %d", r)
			}
			for r := 3; r < 8; r++ {
				assert.Zero(t, u64at(p, 40+8*r))
				assert.Zero(t, u64at(p, 104+8*r))
			}
			// 64 MiB of staging over 2 halves x 3 sources x 128 blocks,
			// each slot on a 4 KiB boundary.
			const slot = (64 << 20) / (2 * 3 * 128) &^ (4<<10 - 1)
			assert.Equal(t, uint64(slot), u64at(p, 232), "slot bytes")
			assert.Equal(t, uint32(128), u32at(p, 168), "staging slots per source: the grid")
			assert.Equal(t, uint32(16), u32at(p, 172), "shares cut to 16 bytes")
			assert.Equal(t, uint32(1), u32at(p, 240), "rank")
			assert.Equal(t, uint32(3), u32at(p, 244), "nranks")
			assert.Equal(t, uint32(tc.args.Root), u32at(p, 248), "root")
			assert.Equal(t, uint32(tc.args.Type.Size()), u32at(p, 256), "elem size")
			assert.Equal(t, uint64(2*3*128*slot), u64at(p, 264), "LL lines' offset: past the staging")
		})
	}
}

func TestEveryKernelLookedUpOnce(t *testing.T) {
	_, drvs, _ := newFakeBackends(t, 1, Config{})
	// 6 reducing families x 12 types x 6 ops + 2 copy kernels + the
	// point-to-point kernel + the fused AllReduces (12 types x the 5 ops
	// without a scalar) + the one-shot AllToAll + the timestamp kernel.
	assert.Len(t, drvs[0].names, 6*12*6+3+12*5+1+1)
	seen := map[string]bool{}
	for _, n := range drvs[0].names {
		assert.False(t, seen[n], "looked up twice: %s", n)
		seen[n] = true
	}
	for _, n := range []string{"goccl_allreduce_oneshot_i8_sum", "goccl_allreduce_twoshot_f64_avg",
		"goccl_reduce_oneshot_bf16_min", "goccl_reducescatter_oneshot_u32_max",
		"goccl_broadcast_oneshot", "goccl_allgather_oneshot", "goccl_allreduce_ll_u64_max", "goccl_p2p"} {
		assert.True(t, seen[n], n)
	}
}

func TestCountZeroLaunchesNothing(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	for _, c := range collectives.AllCollectives() {
		require.NoError(t, bes[0].Run(context.Background(), &collectives.Args{Coll: c, Type: collectives.Float32}))
	}
	assert.Empty(t, drvs[0].launches)
}

func TestForcedAlgorithm(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{Algo: "twoshot"})
	require.NoError(t, bes[0].Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce, Send: 16, Recv: 16, Count: 1, Type: collectives.Int32, Op: collectives.Min}))
	require.Len(t, drvs[0].launches, 1)
	assert.Equal(t, "goccl_allreduce_twoshot_i32_min", drvs[0].launches[0].name)

	// Forced LL takes what its line buffers hold, one-shot beyond.
	bes, drvs, _ = newFakeBackends(t, 2, Config{Algo: "ll"})
	for _, tc := range []struct {
		count int
		want  string
		grid  uint32
	}{
		{llMaxBytes / 4, "goccl_allreduce_ll_f32_sum", llMaxBlocks},
		{llMaxBytes/4 + 1, "goccl_allreduce_oneshot_f32_sum", 33},
	} {
		drvs[0].launches = nil
		require.NoError(t, bes[0].Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce, Send: 16, Recv: 16, Count: tc.count, Type: collectives.Float32, Op: collectives.Sum}))
		require.Len(t, drvs[0].launches, 1)
		assert.Equal(t, tc.want, drvs[0].launches[0].name)
		assert.Equal(t, tc.grid, drvs[0].launches[0].cfg.Grid.X)
	}

	g := transporttest.NewGroup(1)
	err := g.Run(func(rank int, b transport.Bootstrap) error {
		_, err := newBackend(context.Background(), newFakeDriver(), b, Config{Algo: "ring"}, nil, nil)
		return err
	})
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
}

func TestAbortFailsRunAndSetsFlag(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	cause := errors.New("rank 1 died")
	bes[0].Abort(cause)
	flag := atomic.LoadUint32(&drvs[0].hostMem[0][0])
	assert.Equal(t, uint32(1), flag, "kernels see the abort flag")
	err := bes[0].Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce, Send: 16, Recv: 16, Count: 4, Type: collectives.Float32})
	require.ErrorIs(t, err, collectives.ErrAborted)
	require.ErrorIs(t, err, cause)
	assert.Empty(t, drvs[0].launches)
	// The other rank is untouched.
	assert.Equal(t, uint32(0), atomic.LoadUint32(&drvs[1].hostMem[0][0]))
}

func TestCloseReleasesEverything(t *testing.T) {
	bes, drvs, maps := newFakeBackends(t, 2, Config{})
	allocAll(t, bes, 4096)
	for r, be := range bes {
		require.NoError(t, be.Close())
		assert.Len(t, maps[r].freed, 2, "workspace and registration")
		assert.Equal(t, 1, drvs[r].unloaded)
		assert.Equal(t, len(drvs[r].hostMem), drvs[r].freed, "abort flag, group descriptors")
		assert.Equal(t, 1, drvs[r].released)
		assert.Zero(t, drvs[r].streams, "copy-engine streams destroyed")
		assert.Zero(t, drvs[r].events, "copy-engine events destroyed")
		require.NoError(t, be.Close(), "second close is a no-op")
		assert.Equal(t, 1, drvs[r].released)
		err := be.Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce, Send: 16, Recv: 16, Count: 4, Type: collectives.Float32})
		assert.ErrorIs(t, err, collectives.ErrClosed)
	}
}

// After an abort, Close waits a bounded time for this rank's work; work
// that never finishes (a copy-engine wait on a dead peer) leaves the memory
// allocated instead of freeing it under running work.
func TestCloseAfterAbortBoundsItsWait(t *testing.T) {
	for _, stuck := range []bool{false, true} {
		t.Run(fmt.Sprintf("stuck=%v", stuck), func(t *testing.T) {
			bes, drvs, maps := newFakeBackends(t, 1, Config{})
			be, d := bes[0], drvs[0]
			be.abortDrain = 50 * time.Millisecond
			be.Abort(errors.New("peer died"))
			gate := make(chan struct{})
			defer close(gate)
			d.mu.Lock()
			before := d.syncs
			if stuck {
				d.syncGate = gate
			}
			d.mu.Unlock()
			start := time.Now()
			err := be.Close()
			assert.Less(t, time.Since(start), 2*time.Second)
			d.mu.Lock()
			defer d.mu.Unlock()
			assert.Equal(t, before+1, d.syncs, "Close waited for the work")
			if stuck {
				require.ErrorIs(t, err, ErrStillRunning)
				assert.Empty(t, maps[0].freed, "workspace left in place")
				assert.Zero(t, d.unloaded, "kernels left loaded")
				assert.Zero(t, d.released, "context kept")
				return
			}
			require.NoError(t, err)
			assert.Len(t, maps[0].freed, 1, "workspace freed")
			assert.Equal(t, 1, d.unloaded)
			assert.Equal(t, 1, d.released)
		})
	}
}

func TestTooManyRanks(t *testing.T) {
	g := transporttest.NewGroup(9)
	err := g.Run(func(rank int, b transport.Bootstrap) error {
		_, err := newBackend(context.Background(), newFakeDriver(), b, Config{}, nil, nil)
		return err
	})
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
}
