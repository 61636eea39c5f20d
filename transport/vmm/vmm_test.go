package vmm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internal/cuda/cudatest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// onRanks runs f on g's ranks (goroutines), rank r with device r and its own
// Mapper over the shared fake; wrap, when set, wraps each rank's bootstrap.
func onRanks(t *testing.T, g *transporttest.Group, fake *cudatest.Fake,
	wrap func(r int, b transport.Bootstrap) transport.Bootstrap,
	f func(ctx context.Context, r int, m *Mapper) error) []error {
	t.Helper()
	return g.OnRanks(t, func(ctx context.Context, r int, b transport.Bootstrap) error {
		if wrap != nil {
			b = wrap(r, b)
		}
		m, err := New(fake, b, cudatest.Ctx(r), cuda.Device(r))
		if err != nil {
			return err
		}
		return f(ctx, r, m)
	})
}

// regionBoard gathers every rank's region of one collective Alloc or
// Register, so that rank 0 can check them all while every rank still holds
// its own.
type regionBoard struct {
	mu      sync.Mutex
	regions []*transport.Region
	checked chan struct{}
}

func newRegionBoard(n int) *regionBoard {
	return &regionBoard{regions: make([]*transport.Region, n), checked: make(chan struct{})}
}

// post records rank r's region, waits for every rank's, lets rank 0 run
// check on them all, and returns once it has.
func (b *regionBoard) post(ctx context.Context, m *Mapper, r int, reg *transport.Region, check func([]*transport.Region)) error {
	b.mu.Lock()
	b.regions[r] = reg
	b.mu.Unlock()
	if err := m.b.Barrier(ctx); err != nil {
		return err
	}
	if r == 0 {
		check(b.regions)
		close(b.checked)
	}
	<-b.checked
	return nil
}

func checkPeers(t *testing.T, fake *cudatest.Fake, regions []*transport.Region) {
	t.Helper()
	for r, reg := range regions {
		require.Len(t, reg.Peers, len(regions))
		assert.Equal(t, reg.Local, reg.Peers[r])
		for p, addr := range reg.Peers {
			want, ok := fake.Target(cudatest.Ctx(p), cuda.DevicePtr(regions[p].Local))
			require.True(t, ok, "rank %d's local buffer is unknown", p)
			got, ok := fake.Target(cudatest.Ctx(r), cuda.DevicePtr(addr))
			require.True(t, ok, "rank %d: Peers[%d]=%#x maps nothing", r, p, addr)
			assert.Equal(t, want, got, "rank %d: Peers[%d] reaches rank %d's buffer", r, p, p)
		}
	}
}

// checkClean: nothing left, no rule broken, and every exporter released
// its memory only after every importer unmapped it (VMM) or closed it (the
// IPC fallback).
func checkClean(t *testing.T, fake *cudatest.Fake) {
	t.Helper()
	assert.Equal(t, cudatest.Outstanding{}, fake.Outstanding())
	assert.Empty(t, fake.Violations())
	lastPeerUnmap := map[uint64]int{}
	lastClose := map[uint64]int{}
	owner := map[uint64]cuda.Context{}
	for _, c := range fake.Calls() {
		switch c.Op {
		case "IpcCloseMemHandle":
			lastClose[c.Obj] = c.Seq
		case "MemFree":
			if s, ok := lastClose[c.Obj]; ok {
				assert.Less(t, s, c.Seq, "allocation %d freed before an importer closed it", c.Obj)
			}
		case "MemCreate":
			owner[c.Obj] = c.Ctx
		case "MemUnmap":
			if owner[c.Obj] != c.Ctx {
				lastPeerUnmap[c.Obj] = c.Seq
			}
		case "MemRelease":
			if owner[c.Obj] == c.Ctx {
				if s, ok := lastPeerUnmap[c.Obj]; ok {
					assert.Less(t, s, c.Seq, "memory %d released by its exporter before an importer unmapped it", c.Obj)
				}
			}
		}
	}
}

func TestAllocMapsEveryPeerAndRoundsUp(t *testing.T) {
	const gran = 2 << 20
	sizes := []struct{ ask, want uint64 }{{1, gran}, {gran, gran}, {gran + 1, 2 * gran}, {5*gran - 3, 5 * gran}}
	for _, n := range []int{1, 2, 3, 4} {
		for _, sz := range sizes {
			t.Run(fmt.Sprintf("%d ranks, %d bytes", n, sz.ask), func(t *testing.T) {
				fds := transporttest.OpenFDs(t)
				fake := cudatest.New()
				board := newRegionBoard(n)
				errs := onRanks(t, transporttest.NewGroup(n), fake, nil, func(ctx context.Context, r int, m *Mapper) error {
					reg, err := m.Alloc(ctx, sz.ask)
					if err != nil {
						return err
					}
					if err := board.post(ctx, m, r, reg, func(regions []*transport.Region) {
						checkPeers(t, fake, regions)
						// One handle, reservation and mapping per (rank, allocation seen).
						o := fake.Outstanding()
						assert.Equal(t, n*n, o.Handles)
						assert.Equal(t, n*n, o.Mappings)
					}); err != nil {
						return err
					}
					assert.Equal(t, sz.want, reg.Size)
					return m.Free(ctx, reg)
				})
				for r, err := range errs {
					require.NoError(t, err, "rank %d", r)
				}
				checkClean(t, fake)
				assert.Equal(t, fds, transporttest.OpenFDs(t), "file descriptors leaked")
			})
		}
	}
}

func TestRegisterViewsOfAlloc(t *testing.T) {
	const n = 3
	fake := cudatest.New()
	fds := transporttest.OpenFDs(t)
	errs := onRanks(t, transporttest.NewGroup(n), fake, nil, func(ctx context.Context, r int, m *Mapper) error {
		a, err := m.Alloc(ctx, 4<<20)
		if err != nil {
			return err
		}
		off := uintptr(4096 * (r + 1)) // each rank its own offset
		v, err := m.Register(ctx, a.Local+off, 1000)
		if err != nil {
			return err
		}
		if v.Local != a.Local+off {
			return fmt.Errorf("view Local %#x, want %#x", v.Local, a.Local+off)
		}
		for p := range v.Peers {
			want := a.Peers[p] + uintptr(4096*(p+1))
			if v.Peers[p] != want {
				return fmt.Errorf("view Peers[%d] = %#x, want %#x", p, v.Peers[p], want)
			}
		}
		before := fake.Outstanding()
		if err := m.Free(ctx, v); err != nil {
			return err
		}
		if err := m.b.Barrier(ctx); err != nil {
			return err
		}
		assert.Equal(t, before.Mappings, fake.Outstanding().Mappings, "freeing a view unmaps nothing")

		// A view left live is dropped with its Alloc by Close.
		if _, err := m.Register(ctx, a.Local, 64); err != nil {
			return err
		}
		return m.Close()
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	checkClean(t, fake)
	for _, c := range fake.Calls() {
		assert.NotContains(t, []string{"MemGetAddressRange", "IpcGetMemHandle", "IpcOpenMemHandle"}, c.Op,
			"views of an Alloc never take the ipc route")
	}
	assert.Equal(t, fds, transporttest.OpenFDs(t), "file descriptors leaked")
}

// failingRecv fails RecvFDs on its rank, after that rank's sends went out.
type failingRecv struct{ transport.Bootstrap }

func (f failingRecv) RecvFDs(ctx context.Context, peer, n int) ([]int, error) {
	return nil, errors.New("injected recv failure")
}

func TestFailureInjection(t *testing.T) {
	errInjected := fmt.Errorf("injected: %w", cuda.ErrorOutOfMemory)
	steps := []struct {
		op, step string
		nth      int32 // fail the nth such call on the failing rank
		peer     bool  // the step concerns a peer's memory
	}{
		{"MemGetAllocationGranularity", "cuMemGetAllocationGranularity", 1, false},
		{"MemCreate", "cuMemCreate", 1, false},
		{"MemAddressReserve", "cuMemAddressReserve", 1, false},
		{"MemMap", "cuMemMap", 1, false},
		{"MemSetAccess", "cuMemSetAccess", 1, false},
		{"MemExportToFD", "cuMemExportToShareableHandle", 1, false},
		{"MemImportFromFD", "cuMemImportFromShareableHandle", 1, true},
		{"MemImportFromFD", "cuMemImportFromShareableHandle", 2, true},
		{"MemAddressReserve", "cuMemAddressReserve", 2, true},
		{"MemMap", "cuMemMap", 3, true},
		{"MemSetAccess", "cuMemSetAccess", 2, true},
	}
	const n = 3
	for _, st := range steps {
		for failRank := 0; failRank < n; failRank++ {
			t.Run(fmt.Sprintf("%s#%d on rank %d", st.op, st.nth, failRank), func(t *testing.T) {
				fds := transporttest.OpenFDs(t)
				fake := cudatest.New()
				var seen atomic.Int32
				fake.Hook = func(op string, ctx cuda.Context) error {
					if op == st.op && ctx == cudatest.Ctx(failRank) && seen.Add(1) == st.nth {
						return errInjected
					}
					return nil
				}
				errs := onRanks(t, transporttest.NewGroup(n), fake, nil, func(ctx context.Context, r int, m *Mapper) error {
					_, err := m.Alloc(ctx, 3<<20)
					if err == nil {
						return errors.New("Alloc succeeded despite the injected failure")
					}
					return fmt.Errorf("%w [close: %v]", err, m.Close())
				})
				for r, err := range errs {
					var se *StepError
					require.ErrorAs(t, err, &se, "rank %d: %v", r, err)
					assert.Equal(t, failRank, se.Rank, "rank %d names the failing rank", r)
					assert.Equal(t, st.step, se.Step)
					if st.peer {
						assert.GreaterOrEqual(t, se.Peer, 0, "the error names the peer")
						assert.NotEqual(t, failRank, se.Peer)
					}
					if r == failRank {
						assert.ErrorIs(t, err, cuda.ErrorOutOfMemory)
					} else {
						assert.ErrorIs(t, err, ErrPeerFailed)
						assert.Contains(t, err.Error(), "injected")
					}
					assert.Contains(t, err.Error(), "[close: <nil>]")
				}
				checkClean(t, fake)
				assert.Equal(t, fds, transporttest.OpenFDs(t), "file descriptors leaked")
			})
		}
	}
}

func TestExchangeFailureReleasesEverything(t *testing.T) {
	const n, bad = 3, 2
	fds := transporttest.OpenFDs(t)
	fake := cudatest.New()
	g := transporttest.NewGroup(n)
	wrap := func(r int, b transport.Bootstrap) transport.Bootstrap {
		if r == bad {
			return failingRecv{b}
		}
		return b
	}
	errs := onRanks(t, g, fake, wrap, func(ctx context.Context, r int, m *Mapper) error {
		_, err := m.Alloc(ctx, 1<<20)
		return err
	})
	for r, err := range errs {
		var se *StepError
		require.ErrorAs(t, err, &se, "rank %d", r)
		assert.Equal(t, bad, se.Rank)
		assert.Equal(t, "exchange fds", se.Step)
	}
	// The fake bootstrap still holds what the peers sent to the failed
	// rank; drain it so the count compares what the mapper owns.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for p := 0; p < n; p++ {
		if p == bad {
			continue
		}
		got, err := g.Rank(bad).RecvFDs(ctx, p, 1)
		require.NoError(t, err)
		for _, fd := range got {
			require.NoError(t, closeFD(fd))
		}
	}
	checkClean(t, fake)
	assert.Equal(t, fds, transporttest.OpenFDs(t), "file descriptors leaked")
}

func TestCloseFreesRemainingRegions(t *testing.T) {
	const n = 2
	fake := cudatest.New()
	fds := transporttest.OpenFDs(t)
	errs := onRanks(t, transporttest.NewGroup(n), fake, nil, func(ctx context.Context, r int, m *Mapper) error {
		for i := 0; i < 3; i++ {
			if _, err := m.Alloc(ctx, 1<<20); err != nil {
				return err
			}
		}
		if err := m.Close(); err != nil {
			return err
		}
		if _, err := m.Alloc(ctx, 1); !errors.Is(err, transport.ErrClosed) {
			return fmt.Errorf("Alloc after Close: %v, want ErrClosed", err)
		}
		return m.Close()
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	checkClean(t, fake)
	assert.Equal(t, fds, transporttest.OpenFDs(t), "file descriptors leaked")
}

func TestRoundUp(t *testing.T) {
	tests := []struct {
		size, gran, want uint64
		ok               bool
	}{
		{0, 2 << 20, 0, true},
		{1, 2 << 20, 2 << 20, true},
		{2 << 20, 2 << 20, 2 << 20, true},
		{2<<20 + 1, 2 << 20, 4 << 20, true},
		{^uint64(0) - 5, 2 << 20, 0, false},
	}
	for _, tc := range tests {
		got, ok := RoundUp(tc.size, tc.gran)
		assert.Equal(t, tc.ok, ok, "RoundUp(%d, %d)", tc.size, tc.gran)
		if tc.ok {
			assert.Equal(t, tc.want, got, "RoundUp(%d, %d)", tc.size, tc.gran)
		}
	}
}
