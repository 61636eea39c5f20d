package ipc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internal/cuda/cudatest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// onRanks runs f on n ranks (goroutines), each with its own Mapper over the
// shared fake, and returns every rank's error.
func onRanks(t *testing.T, n int, fake *cudatest.Fake, f func(ctx context.Context, r int, m *Mapper) error) []error {
	t.Helper()
	return transporttest.NewGroup(n).OnRanks(t, func(ctx context.Context, r int, b transport.Bootstrap) error {
		m, err := New(fake, b, cudatest.Ctx(r))
		if err != nil {
			return err
		}
		return f(ctx, r, m)
	})
}

// checkPeers asserts that every rank's Peers[p] reaches rank p's Local.
func checkPeers(t *testing.T, fake *cudatest.Fake, regions []*transport.Region) {
	t.Helper()
	for r, reg := range regions {
		require.Len(t, reg.Peers, len(regions))
		assert.Equal(t, reg.Local, reg.Peers[r], "rank %d: Peers[self] is Local", r)
		for p, addr := range reg.Peers {
			want, ok := fake.Target(cudatest.Ctx(p), cuda.DevicePtr(regions[p].Local))
			require.True(t, ok, "rank %d's local buffer is unknown", p)
			got, ok := fake.Target(cudatest.Ctx(r), cuda.DevicePtr(addr))
			require.True(t, ok, "rank %d: Peers[%d]=%#x maps nothing", r, p, addr)
			assert.Equal(t, want, got, "rank %d: Peers[%d] reaches rank %d's buffer", r, p, p)
		}
	}
}

// checkClean asserts that nothing is left and no ordering rule was broken,
// and that every exporter freed only after every importer closed.
func checkClean(t *testing.T, fake *cudatest.Fake) {
	t.Helper()
	assert.Equal(t, cudatest.Outstanding{}, fake.Outstanding())
	assert.Empty(t, fake.Violations())
	lastClose := map[uint64]int{}
	for _, c := range fake.Calls() {
		switch c.Op {
		case "IpcCloseMemHandle":
			lastClose[c.Obj] = c.Seq
		case "MemFree":
			if s, ok := lastClose[c.Obj]; ok {
				assert.Less(t, s, c.Seq, "allocation %d freed before an importer closed it", c.Obj)
			}
		}
	}
}

func TestAllocMapsEveryPeer(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			fake := cudatest.New()
			regions := make([]*transport.Region, n)
			var mu sync.Mutex
			freed := make(chan struct{})
			errs := onRanks(t, n, fake, func(ctx context.Context, r int, m *Mapper) error {
				reg, err := m.Alloc(ctx, 3<<20+5)
				if err != nil {
					return err
				}
				assert.Equal(t, uint64(3<<20+5), reg.Size)
				mu.Lock()
				regions[r] = reg
				mu.Unlock()
				if err := m.b.Barrier(ctx); err != nil {
					return err
				}
				if r == 0 {
					checkPeers(t, fake, regions)
					assert.Equal(t, n*(n-1), fake.Outstanding().IpcOpens)
					close(freed)
				}
				<-freed
				return m.Free(ctx, reg)
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			checkClean(t, fake)
		})
	}
}

func TestRegisterSharesOneOpenPerPeerAllocation(t *testing.T) {
	const n = 3
	fake := cudatest.New()
	type regs struct{ a, b *transport.Region }
	all := make([]regs, n)
	var mu sync.Mutex
	errs := onRanks(t, n, fake, func(ctx context.Context, r int, m *Mapper) error {
		buf, err := fake.MemAlloc(cudatest.Ctx(r), 1<<20) // the user's own allocation
		if err != nil {
			return err
		}
		a, err := m.Register(ctx, uintptr(buf)+4096, 8192)
		if err != nil {
			return err
		}
		b, err := m.Register(ctx, uintptr(buf)+65536+uintptr(r), 100)
		if err != nil {
			return err
		}
		mu.Lock()
		all[r] = regs{a, b}
		mu.Unlock()
		if err := m.b.Barrier(ctx); err != nil {
			return err
		}
		if r == 0 {
			as, bs := make([]*transport.Region, n), make([]*transport.Region, n)
			for i := range all {
				as[i], bs[i] = all[i].a, all[i].b
			}
			checkPeers(t, fake, as)
			checkPeers(t, fake, bs)
			// One open per (importer, exporter allocation), shared by both registrations.
			assert.Equal(t, n*(n-1), fake.Outstanding().IpcOpens)
		}
		if err := m.b.Barrier(ctx); err != nil {
			return err
		}
		if err := m.Free(ctx, a); err != nil {
			return err
		}
		// b still needs the mappings.
		assert.Equal(t, n*(n-1), fake.Outstanding().IpcOpens)
		if err := m.b.Barrier(ctx); err != nil {
			return err
		}
		if err := m.Free(ctx, b); err != nil {
			return err
		}
		// Registered memory stays the user's: Free did not free it.
		if err := m.b.Barrier(ctx); err != nil {
			return err
		}
		assert.Equal(t, n, fake.Outstanding().Allocs)
		if err := m.b.Barrier(ctx); err != nil {
			return err
		}
		return fake.MemFree(cudatest.Ctx(r), buf)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	checkClean(t, fake)
	opens := 0
	for _, c := range fake.Calls() {
		if c.Op == "IpcOpenMemHandle" {
			opens++
		}
	}
	assert.Equal(t, n*(n-1), opens, "the second Register reused the first's mappings")
}

func TestRegisterRejectsBadRange(t *testing.T) {
	const n, bad = 3, 1
	fake := cudatest.New()
	bufs := make([]cuda.DevicePtr, n)
	errs := onRanks(t, n, fake, func(ctx context.Context, r int, m *Mapper) error {
		buf, err := fake.MemAlloc(cudatest.Ctx(r), 1<<20)
		if err != nil {
			return err
		}
		bufs[r] = buf
		size := uint64(4096)
		if r == bad {
			size = 1 << 20 // overruns from offset 16
		}
		_, err = m.Register(ctx, uintptr(buf)+16, size)
		return err
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		var se *StepError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, bad, se.Rank)
		if r == bad {
			assert.ErrorIs(t, err, cuda.ErrorInvalidValue)
			assert.Contains(t, err.Error(), "overruns")
		} else {
			assert.ErrorIs(t, err, ErrPeerFailed)
			assert.Contains(t, err.Error(), "rank 1")
		}
	}
	for r, b := range bufs {
		require.NoError(t, fake.MemFree(cudatest.Ctx(r), b))
	}
	checkClean(t, fake)
}

func TestFailureInjection(t *testing.T) {
	errInjected := fmt.Errorf("injected: %w", cuda.ErrorOutOfMemory)
	steps := []struct {
		op, step string
		nth      int32 // fail the nth such call on the failing rank
	}{
		{"MemAlloc", "cuMemAlloc", 1},
		{"IpcGetMemHandle", "cuIpcGetMemHandle", 1},
		{"IpcOpenMemHandle", "cuIpcOpenMemHandle", 1},
		{"IpcOpenMemHandle", "cuIpcOpenMemHandle", 2}, // after one peer was opened
	}
	const n = 3
	for _, st := range steps {
		for failRank := 0; failRank < n; failRank++ {
			t.Run(fmt.Sprintf("%s#%d on rank %d", st.op, st.nth, failRank), func(t *testing.T) {
				fake := cudatest.New()
				var seen atomic.Int32
				fake.Hook = func(op string, ctx cuda.Context) error {
					if op == st.op && ctx == cudatest.Ctx(failRank) && seen.Add(1) == st.nth {
						return errInjected
					}
					return nil
				}
				errs := onRanks(t, n, fake, func(ctx context.Context, r int, m *Mapper) error {
					_, err := m.Alloc(ctx, 1<<20)
					if err == nil {
						return errors.New("Alloc succeeded despite the injected failure")
					}
					// The mapper is still usable and empty.
					return fmt.Errorf("%w [close: %v]", err, m.Close())
				})
				for r, err := range errs {
					require.Error(t, err)
					assert.NotContains(t, err.Error(), "succeeded despite")
					var se *StepError
					require.ErrorAs(t, err, &se, "rank %d: %v", r, err)
					assert.Equal(t, failRank, se.Rank, "rank %d names the failing rank", r)
					assert.Equal(t, st.step, se.Step)
					if r == failRank {
						assert.ErrorIs(t, err, cuda.ErrorOutOfMemory)
					} else {
						assert.ErrorIs(t, err, ErrPeerFailed)
						assert.Contains(t, err.Error(), "injected")
					}
					assert.Contains(t, err.Error(), "[close: <nil>]")
				}
				checkClean(t, fake)
			})
		}
	}
}

func TestCloseFreesRemainingRegions(t *testing.T) {
	const n = 2
	fake := cudatest.New()
	errs := onRanks(t, n, fake, func(ctx context.Context, r int, m *Mapper) error {
		for i := 0; i < 3; i++ {
			if _, err := m.Alloc(ctx, 1<<20); err != nil {
				return err
			}
		}
		if err := m.Close(); err != nil {
			return err
		}
		if _, err := m.Alloc(ctx, 1<<20); !errors.Is(err, transport.ErrClosed) {
			return fmt.Errorf("Alloc after Close: %v, want ErrClosed", err)
		}
		return m.Close() // idempotent
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	checkClean(t, fake)
}

func TestFreeRejectsForeignRegion(t *testing.T) {
	fake := cudatest.New()
	errs := onRanks(t, 1, fake, func(ctx context.Context, r int, m *Mapper) error {
		err := m.Free(ctx, &transport.Region{Local: 0x1000})
		assert.ErrorContains(t, err, "not live")
		assert.Error(t, m.Free(ctx, nil))
		return nil
	})
	require.NoError(t, errs[0])
}
