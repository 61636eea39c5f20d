package vmm

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internal/cuda/cudatest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// userBuf is the size of the cuMemAlloc buffer each rank owns in these
// tests, as a framework's tensor would be.
const userBuf = 1 << 20

// allocBoth gives rank r memory of both kinds: an Alloc of m's (1 MiB) and
// a user's cuMemAlloc buffer of userBuf bytes, kept in bufs[r] for
// freeUserBufs.
func allocBoth(ctx context.Context, fake *cudatest.Fake, r int, m *Mapper, bufs []cuda.DevicePtr) (*transport.Region, cuda.DevicePtr, error) {
	a, err := m.Alloc(ctx, 1<<20)
	if err != nil {
		return nil, 0, err
	}
	buf, err := fake.MemAlloc(cudatest.Ctx(r), userBuf)
	bufs[r] = buf
	return a, buf, err
}

// freeUserBufs frees the ranks' own buffers, as their owner would once
// the mappers are done with them.
func freeUserBufs(t *testing.T, fake *cudatest.Fake, bufs []cuda.DevicePtr) {
	t.Helper()
	for r, b := range bufs {
		if b != 0 {
			require.NoError(t, fake.MemFree(cudatest.Ctx(r), b), "rank %d", r)
		}
	}
}

func TestRegisterForeignMemory(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		off   func(r int) uintptr // where each rank's buffer starts in its allocation
		size  uint64
		alloc bool // an Alloc of the mapper's own is live as well
		close bool // Close releases the region instead of Free
	}{
		{name: "2 ranks, whole allocation", n: 2, off: func(int) uintptr { return 0 }, size: userBuf},
		{name: "2 ranks, sub-range", n: 2, off: func(int) uintptr { return 4096 }, size: 8192},
		{name: "3 ranks, sub-range at per-rank offsets", n: 3, off: func(r int) uintptr { return uintptr(65536 + 100*r) }, size: 1000},
		{name: "3 ranks, closed with an Alloc live", n: 3, off: func(int) uintptr { return 512 }, size: 4096, alloc: true, close: true},
		{name: "2 ranks, closed", n: 2, off: func(int) uintptr { return 0 }, size: 64, close: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := cudatest.New()
			fds := transporttest.OpenFDs(t)
			n := tc.n
			bufs := make([]cuda.DevicePtr, n)
			board := newRegionBoard(n)
			errs := onRanks(t, transporttest.NewGroup(n), fake, nil, func(ctx context.Context, r int, m *Mapper) error {
				buf, err := fake.MemAlloc(cudatest.Ctx(r), userBuf)
				if err != nil {
					return err
				}
				bufs[r] = buf // each rank its own element
				if tc.alloc {
					if _, err := m.Alloc(ctx, 1<<20); err != nil {
						return err
					}
				}
				reg, err := m.Register(ctx, uintptr(buf)+tc.off(r), tc.size)
				if err != nil {
					return err
				}
				assert.Equal(t, tc.size, reg.Size)
				assert.Equal(t, uintptr(buf)+tc.off(r), reg.Local)
				if err := board.post(ctx, m, r, reg, func(regions []*transport.Region) {
					checkPeers(t, fake, regions)
					assert.Equal(t, n*(n-1), fake.Outstanding().IpcOpens, "one open per (importer, exporter)")
				}); err != nil {
					return err
				}
				if tc.close {
					if err := m.Close(); err != nil {
						return err
					}
					// Close forgot the region: there is nothing to free.
					assert.ErrorContains(t, m.Free(ctx, reg), "not live")
					return nil
				}
				if err := m.Free(ctx, reg); err != nil {
					return err
				}
				assert.Zero(t, fake.Outstanding().IpcOpens, "Free closed every peer mapping")
				assert.ErrorContains(t, m.Free(ctx, reg), "not live", "a second Free")
				return m.Close()
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			// The memory stays the user's: the mappers did not free it.
			assert.Equal(t, n, fake.Outstanding().Allocs)
			freeUserBufs(t, fake, bufs)
			checkClean(t, fake)
			assert.Equal(t, fds, transporttest.OpenFDs(t), "file descriptors leaked")
		})
	}
}

func TestRegisterMixedRoutesFails(t *testing.T) {
	tests := []struct {
		name      string
		n         int
		foreign   []bool // by rank: registers its own cuMemAlloc buffer
		firstF    int    // the rank the error names
		firstView int    // the peer the error names
		want      string
	}{
		{"2 ranks, rank 0 foreign", 2, []bool{true, false}, 0, 1, "ipc route): rank 0 (first"},
		{"2 ranks, rank 1 foreign", 2, []bool{false, true}, 1, 0, "vmm route): rank 0 (first: Alloc #1, offset 128)"},
		{"3 ranks, rank 1 foreign", 3, []bool{false, true, false}, 1, 0, "vmm route): ranks 0, 2"},
		{"3 ranks, ranks 0 and 2 foreign", 3, []bool{true, false, true}, 0, 1, "ipc route): ranks 0, 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := cudatest.New()
			fds := transporttest.OpenFDs(t)
			n := tc.n
			bufs := make([]cuda.DevicePtr, n)
			errs := onRanks(t, transporttest.NewGroup(n), fake, nil, func(ctx context.Context, r int, m *Mapper) error {
				a, buf, err := allocBoth(ctx, fake, r, m, bufs)
				if err != nil {
					return err
				}
				ptr := a.Local + 128
				if tc.foreign[r] {
					ptr = uintptr(buf) + 128
				}
				_, rerr := m.Register(ctx, ptr, 4096)
				if rerr == nil {
					return fmt.Errorf("Register with mixed routes succeeded")
				}
				// Nothing was mapped, and the mapper is still in step: a
				// Register that every rank routes alike still works.
				if err := m.b.Barrier(ctx); err != nil {
					return err
				}
				assert.Zero(t, fake.Outstanding().IpcOpens, "rank %d: nothing opened", r)
				assert.Equal(t, 1, m.regions.Len(), "rank %d: only the Alloc is live", r)
				assert.Empty(t, m.foreign)
				if _, err := m.Register(ctx, uintptr(buf), 64); err != nil {
					return fmt.Errorf("foreign Register after the failure: %w", err)
				}
				if err := m.Close(); err != nil {
					return err
				}
				return rerr
			})
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				require.ErrorIs(t, err, cuda.ErrNotSupported, "rank %d", r)
				var se *StepError
				require.ErrorAs(t, err, &se, "rank %d", r)
				assert.Equal(t, "vmm", se.Transport)
				assert.Equal(t, tc.firstF, se.Rank, "rank %d: the first foreign rank", r)
				assert.Equal(t, tc.firstView, se.Peer, "rank %d: the first rank inside an Alloc", r)
				assert.Contains(t, err.Error(), "different routes")
				assert.Contains(t, err.Error(), tc.want)
				assert.Equal(t, errs[0].Error(), err.Error(), "every rank returns the same verdict")
			}
			freeUserBufs(t, fake, bufs)
			checkClean(t, fake)
			assert.Equal(t, fds, transporttest.OpenFDs(t), "file descriptors leaked")
		})
	}
}

// TestRegisterForeignFailures: a bad argument or a failed step on one rank
// fails Register on every rank, names that rank, and leaves nothing behind.
func TestRegisterForeignFailures(t *testing.T) {
	const n, bad = 3, 1
	errInjected := fmt.Errorf("injected: %w", cuda.ErrorOutOfMemory)
	tests := []struct {
		name   string
		ptr    func(buf cuda.DevicePtr, a *transport.Region) uintptr // bad's buffer
		size   uint64                                                // bad's size
		hook   string                                                // driver call failing on bad
		step   string
		wantIs error
	}{
		{name: "size 0", ptr: func(b cuda.DevicePtr, _ *transport.Region) uintptr { return uintptr(b) },
			step: "Register", wantIs: cuda.ErrorInvalidValue},
		{name: "straddles an Alloc", ptr: func(_ cuda.DevicePtr, a *transport.Region) uintptr { return a.Local + uintptr(a.Size) - 64 },
			size: 4096, step: "Register", wantIs: cuda.ErrorInvalidValue},
		{name: "not device memory", ptr: func(cuda.DevicePtr, *transport.Region) uintptr { return 0xdead0000 },
			size: 64, step: "cuMemGetAddressRange", wantIs: cuda.ErrorNotFound},
		{name: "overruns its allocation", ptr: func(b cuda.DevicePtr, _ *transport.Region) uintptr { return uintptr(b) + 16 },
			size: userBuf, step: "Register", wantIs: cuda.ErrorInvalidValue},
		{name: "cuIpcGetMemHandle fails", ptr: func(b cuda.DevicePtr, _ *transport.Region) uintptr { return uintptr(b) },
			size: 64, hook: "IpcGetMemHandle", step: "cuIpcGetMemHandle", wantIs: cuda.ErrorOutOfMemory},
		{name: "cuIpcOpenMemHandle fails", ptr: func(b cuda.DevicePtr, _ *transport.Region) uintptr { return uintptr(b) },
			size: 64, hook: "IpcOpenMemHandle", step: "cuIpcOpenMemHandle", wantIs: cuda.ErrorOutOfMemory},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := cudatest.New()
			var fired atomic.Bool
			fake.Hook = func(op string, ctx cuda.Context) error {
				if op == tc.hook && ctx == cudatest.Ctx(bad) && fired.CompareAndSwap(false, true) {
					return errInjected
				}
				return nil
			}
			bufs := make([]cuda.DevicePtr, n)
			errs := onRanks(t, transporttest.NewGroup(n), fake, nil, func(ctx context.Context, r int, m *Mapper) error {
				a, buf, err := allocBoth(ctx, fake, r, m, bufs)
				if err != nil {
					return err
				}
				ptr, size := uintptr(buf), uint64(64)
				if r == bad {
					ptr, size = tc.ptr(buf, a), tc.size
				}
				_, rerr := m.Register(ctx, ptr, size)
				if rerr == nil {
					return fmt.Errorf("Register succeeded despite rank %d", bad)
				}
				assert.Empty(t, m.foreign, "rank %d", r)
				return fmt.Errorf("%w [close: %v]", rerr, m.Close())
			})
			for r, err := range errs {
				var se *StepError
				require.ErrorAs(t, err, &se, "rank %d: %v", r, err)
				assert.Equal(t, bad, se.Rank, "rank %d names the failing rank", r)
				assert.Equal(t, tc.step, se.Step, "rank %d", r)
				if r == bad {
					assert.ErrorIs(t, err, tc.wantIs)
				} else {
					assert.ErrorIs(t, err, ErrPeerFailed)
				}
				assert.Contains(t, err.Error(), "[close: <nil>]")
			}
			freeUserBufs(t, fake, bufs)
			checkClean(t, fake)
		})
	}
}

func TestRankList(t *testing.T) {
	tests := []struct {
		ranks []int
		want  string
	}{
		{[]int{3}, "rank 3"},
		{[]int{0, 2}, "ranks 0, 2"},
		{[]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, "ranks 0, 1, 2, 3, 4, 5, 6, 7 and 2 more"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, rankList(tc.ranks))
	}
}
