package uva

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

// onRanks runs f on n ranks, rank r driving device dev(r) through its own
// context, and returns every rank's error.
func onRanks(t *testing.T, n int, fake *cudatest.Fake, dev func(int) int, f func(ctx context.Context, r int, m *Mapper) error) []error {
	t.Helper()
	return transporttest.NewGroup(n).OnRanks(t, func(ctx context.Context, r int, b transport.Bootstrap) error {
		d := dev(r)
		m, err := New(fake, b, cuda.Device(d), cudatest.Ctx(d))
		if err != nil {
			return err
		}
		return f(ctx, r, m)
	})
}

func own(r int) int { return r }

func TestAllocSharesPointersAndEnablesPeerAccess(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			fake := cudatest.New()
			regions := make([]*transport.Region, n)
			var mu sync.Mutex
			errs := onRanks(t, n, fake, own, func(ctx context.Context, r int, m *Mapper) error {
				reg, err := m.Alloc(ctx, 1000)
				if err != nil {
					return err
				}
				mu.Lock()
				regions[r] = reg
				mu.Unlock()
				if err := m.b.Barrier(ctx); err != nil {
					return err
				}
				// A second region must not enable or retain anything again.
				reg2, err := m.Alloc(ctx, 4096)
				if err != nil {
					return err
				}
				if err := m.Free(ctx, reg2); err != nil {
					return err
				}
				return m.Close()
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			for r, reg := range regions {
				require.Len(t, reg.Peers, n)
				for p := range reg.Peers {
					assert.Equal(t, regions[p].Local, reg.Peers[p], "rank %d sees rank %d's own pointer", r, p)
					if p != r {
						assert.True(t, fake.PeerAccessEnabled(cudatest.Ctx(r), cudatest.Ctx(p)), "rank %d -> %d", r, p)
					}
				}
			}
			enables := 0
			for _, c := range fake.Calls() {
				if c.Op == "CtxEnablePeerAccess" {
					enables++
				}
			}
			assert.Equal(t, n*(n-1), enables, "peer access enabled once per ordered pair")
			assert.Equal(t, cudatest.Outstanding{}, fake.Outstanding())
		})
	}
}

func TestPeerAccessAlreadyEnabledIsFine(t *testing.T) {
	fake := cudatest.New()
	require.NoError(t, fake.CtxEnablePeerAccess(cudatest.Ctx(0), cudatest.Ctx(1))) // someone else did it
	errs := onRanks(t, 2, fake, own, func(ctx context.Context, r int, m *Mapper) error {
		if _, err := m.Alloc(ctx, 64); err != nil {
			return err
		}
		return m.Close()
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	assert.Equal(t, cudatest.Outstanding{}, fake.Outstanding())
}

func TestTwoRanksOnOneDeviceNeedNoPeerAccess(t *testing.T) {
	fake := cudatest.New()
	errs := onRanks(t, 2, fake, func(int) int { return 0 }, func(ctx context.Context, r int, m *Mapper) error {
		if _, err := m.Alloc(ctx, 64); err != nil {
			return err
		}
		return m.Close()
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for _, c := range fake.Calls() {
		assert.NotEqual(t, "CtxEnablePeerAccess", c.Op)
	}
}

func TestRegisterLeavesMemoryToItsOwner(t *testing.T) {
	const n = 3
	fake := cudatest.New()
	bufs := make([]cuda.DevicePtr, n)
	errs := onRanks(t, n, fake, own, func(ctx context.Context, r int, m *Mapper) error {
		buf, err := fake.MemAlloc(cudatest.Ctx(r), 1<<20)
		if err != nil {
			return err
		}
		bufs[r] = buf
		reg, err := m.Register(ctx, uintptr(buf)+128, 256)
		if err != nil {
			return err
		}
		if err := m.b.Barrier(ctx); err != nil {
			return err
		}
		for p := range reg.Peers {
			if reg.Peers[p] != uintptr(bufs[p])+128 {
				return fmt.Errorf("Peers[%d] = %#x, want %#x", p, reg.Peers[p], uintptr(bufs[p])+128)
			}
		}
		if err := m.Free(ctx, reg); err != nil {
			return err
		}
		return m.Close()
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	assert.Equal(t, n, fake.Outstanding().Allocs, "Register's memory is not freed by Free")
}

func TestFailureInjection(t *testing.T) {
	errInjected := fmt.Errorf("injected: %w", cuda.ErrorOutOfMemory)
	steps := []struct{ op, step string }{
		{"MemAlloc", "cuMemAlloc"},
		{"PrimaryCtxRetain", "cuCtxEnablePeerAccess"},
		{"CtxEnablePeerAccess", "cuCtxEnablePeerAccess"},
	}
	const n = 3
	for _, st := range steps {
		for failRank := 0; failRank < n; failRank++ {
			t.Run(fmt.Sprintf("%s on rank %d", st.op, failRank), func(t *testing.T) {
				fake := cudatest.New()
				var fired atomic.Bool
				fake.Hook = func(op string, ctx cuda.Context) error {
					// PrimaryCtxRetain names the retained device's context, so
					// it fails on some rank reaching failRank's device.
					if op == st.op && ctx == cudatest.Ctx(failRank) && fired.CompareAndSwap(false, true) {
						return errInjected
					}
					return nil
				}
				errs := onRanks(t, n, fake, own, func(ctx context.Context, r int, m *Mapper) error {
					_, err := m.Alloc(ctx, 1<<20)
					if err == nil {
						return errors.New("Alloc succeeded despite the injected failure")
					}
					return fmt.Errorf("%w [close: %v]", err, m.Close())
				})
				failed := -1
				for r, err := range errs {
					var se *StepError
					require.ErrorAs(t, err, &se, "rank %d: %v", r, err)
					if failed < 0 {
						failed = se.Rank
					}
					assert.Equal(t, failed, se.Rank, "every rank names the same failing rank")
					assert.Equal(t, st.step, se.Step)
					if r == se.Rank {
						assert.ErrorIs(t, err, cuda.ErrorOutOfMemory)
					} else {
						assert.ErrorIs(t, err, ErrPeerFailed)
					}
					assert.Contains(t, err.Error(), "[close: <nil>]")
				}
				if st.op != "PrimaryCtxRetain" {
					assert.Equal(t, failRank, failed)
				} else {
					assert.NotEqual(t, failRank, failed)
				}
				assert.Equal(t, cudatest.Outstanding{}, fake.Outstanding())
			})
		}
	}
}

func TestFreeWaitsForEveryRank(t *testing.T) {
	const n = 3
	fake := cudatest.New()
	var freedEarly atomic.Bool
	var slowDone atomic.Bool
	errs := onRanks(t, n, fake, own, func(ctx context.Context, r int, m *Mapper) error {
		reg, err := m.Alloc(ctx, 64)
		if err != nil {
			return err
		}
		if r == 2 {
			time.Sleep(50 * time.Millisecond) // a slow rank still using peers' memory
			slowDone.Store(true)
		}
		if err := m.Free(ctx, reg); err != nil {
			return err
		}
		if !slowDone.Load() {
			freedEarly.Store(true)
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	assert.False(t, freedEarly.Load(), "a rank freed before the slow rank was done")
}
