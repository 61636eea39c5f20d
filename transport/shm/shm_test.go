package shm

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm/pairtest"
	"github.com/goccl/goccl/transport/transporttest"
)

func TestMapSharesMemory(t *testing.T) {
	for _, tc := range []struct {
		ranks, size int
	}{{1, 1}, {2, 4096}, {3, 10000}, {5, 1 << 20}} {
		page := os.Getpagesize()
		want := (tc.size + page - 1) / page * page
		g := transporttest.NewGroup(tc.ranks)
		err := g.Run(func(rank int, b transport.Bootstrap) error {
			ctx := context.Background()
			s, err := Map(ctx, b, tc.size)
			if err != nil {
				return err
			}
			defer s.Close()
			assert.Equal(t, want, s.Size())
			assert.Equal(t, rank, s.Rank())
			for i := range s.Local {
				assert.Zero(t, s.Local[i], "fresh segment byte %d", i)
				if s.Local[i] != 0 {
					break
				}
				s.Local[i] = byte(rank*7 + i)
			}
			if err := b.Barrier(ctx); err != nil {
				return err
			}
			for r := 0; r < tc.ranks; r++ {
				p := s.Peer(r)
				require.Len(t, p, want)
				for _, i := range []int{0, 1, want/2 + 3, want - 1} {
					assert.Equal(t, byte(r*7+i), p[i], "rank %d sees rank %d byte %d", rank, r, i)
				}
			}
			// A write into a peer's segment is seen by its owner.
			if err := b.Barrier(ctx); err != nil {
				return err
			}
			next := (rank + 1) % tc.ranks
			s.Peer(next)[8+rank%8] = 0xC0 | byte(rank)
			if err := b.Barrier(ctx); err != nil {
				return err
			}
			prev := (rank + tc.ranks - 1) % tc.ranks
			assert.Equal(t, 0xC0|byte(prev), s.Local[8+prev%8])
			return b.Barrier(ctx)
		})
		require.NoError(t, err, "%d ranks", tc.ranks)
	}
}

func TestMapRejectsBadSize(t *testing.T) {
	for _, size := range []int{0, -1} {
		s, err := Map(context.Background(), transporttest.NewGroup(1).Rank(0), size)
		require.ErrorIs(t, err, ErrBadSize)
		assert.Nil(t, s)
	}
}

// withSys swaps the system calls for one test.
func withSys(t *testing.T, edit func(*sysOps)) {
	saved := sys
	edit(&sys)
	t.Cleanup(func() { sys = saved })
}

func TestMapFailuresNameTheResourceAndRank(t *testing.T) {
	real := sys
	for _, tc := range []struct {
		name   string
		errno  error
		inject func(s *sysOps, first *atomic.Bool)
		want   string
	}{
		{"memfd EMFILE", unix.EMFILE, func(s *sysOps, first *atomic.Bool) {
			s.memfdCreate = func(name string, flags int) (int, error) {
				if first.CompareAndSwap(false, true) {
					return -1, unix.EMFILE
				}
				return real.memfdCreate(name, flags)
			}
		}, "memfd_create: "},
		{"own mmap ENOMEM", unix.ENOMEM, func(s *sysOps, first *atomic.Bool) {
			s.mmap = func(fd, size, flags int) ([]byte, error) {
				if flags != 0 && first.CompareAndSwap(false, true) {
					return nil, unix.ENOMEM
				}
				return real.mmap(fd, size, flags)
			}
		}, "mmap own"},
		{"peer mmap ENOMEM", unix.ENOMEM, func(s *sysOps, first *atomic.Bool) {
			s.mmap = func(fd, size, flags int) ([]byte, error) {
				if flags == 0 && first.CompareAndSwap(false, true) {
					return nil, unix.ENOMEM
				}
				return real.mmap(fd, size, flags)
			}
		}, "mmap rank "},
		{"ftruncate EFBIG", unix.EFBIG, func(s *sysOps, first *atomic.Bool) {
			s.ftruncate = func(fd int, size int64) error {
				if first.CompareAndSwap(false, true) {
					return unix.EFBIG
				}
				return real.ftruncate(fd, size)
			}
		}, "ftruncate memfd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first atomic.Bool
			withSys(t, func(s *sysOps) { tc.inject(s, &first) })
			const n = 3
			errs := make([]error, n)
			g := transporttest.NewGroup(n)
			_ = g.Run(func(rank int, b transport.Bootstrap) error {
				s, err := Map(context.Background(), b, 8192)
				if s != nil {
					s.Close()
				}
				errs[rank] = err
				return nil
			})
			failed := -1
			for r, err := range errs {
				require.Error(t, err, "rank %d must fail too", r)
				if errors.Is(err, tc.errno) {
					require.Equal(t, -1, failed, "only one rank had the injected failure")
					failed = r
					assert.Contains(t, err.Error(), tc.want)
				}
			}
			require.NotEqual(t, -1, failed, "the injected errno surfaces: %v", errs)
			for r, err := range errs {
				if r == failed {
					continue
				}
				var re *RankError
				require.ErrorAs(t, err, &re, "rank %d", r)
				assert.Equal(t, failed, re.Rank)
				assert.True(t, strings.Contains(re.Msg, tc.want), re.Msg)
			}
		})
	}
}

func TestMapHugeSizeFailsCleanly(t *testing.T) {
	// More than the address space: a real ENOMEM (or EFBIG), not a crash.
	s, err := Map(context.Background(), transporttest.NewGroup(1).Rank(0), 1<<50)
	require.Error(t, err)
	assert.Nil(t, s)
	assert.True(t, errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EFBIG) || errors.Is(err, unix.ENOSPC), "%v", err)
}

func countLines(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

func TestMapCloseLeavesNothing(t *testing.T) {
	cycle := func() {
		g := transporttest.NewGroup(4)
		require.NoError(t, g.Run(func(rank int, b transport.Bootstrap) error {
			s, err := Map(context.Background(), b, 64<<10)
			if err != nil {
				return err
			}
			s.Local[0] = 1
			if err := s.Close(); err != nil {
				return err
			}
			assert.Nil(t, s.Peer(rank))
			return s.Close() // twice is fine
		}))
	}
	cycle() // warm up whatever the runtime maps once
	fds, maps := countFDs(t), countLines(t, "/proc/self/maps")
	for i := 0; i < 50; i++ {
		cycle()
	}
	assert.Equal(t, fds, countFDs(t), "open descriptors")
	assert.InDelta(t, maps, countLines(t, "/proc/self/maps"), 8, "mappings (the Go heap may add a few)")
}

// TestMapAcrossProcesses maps segments between this process and a child.
func TestMapAcrossProcesses(t *testing.T) {
	var b transport.Bootstrap
	var parent *pairtest.Parent
	if pairtest.IsChild() {
		b = pairtest.Child()
	} else {
		p, err := pairtest.Start("TestMapAcrossProcesses")
		require.NoError(t, err)
		parent, b = p, p
	}
	ctx := context.Background()
	s, err := Map(ctx, b, 1<<20)
	require.NoError(t, err)
	defer s.Close()
	me, peer := b.Rank(), 1-b.Rank()
	for i := range s.Local {
		s.Local[i] = byte(i*3 + me*101)
	}
	require.NoError(t, b.Barrier(ctx))
	for _, i := range []int{0, 4095, 1 << 19, 1<<20 - 1} {
		require.Equal(t, byte(i*3+peer*101), s.Peer(peer)[i], "byte %d of rank %d's segment", i, peer)
	}
	require.NoError(t, b.Barrier(ctx))
	s.Peer(peer)[100] = 0xE0 | byte(me)
	require.NoError(t, b.Barrier(ctx))
	require.Equal(t, 0xE0|byte(peer), s.Local[100])
	require.NoError(t, b.Barrier(ctx))
	if parent != nil {
		require.NoError(t, parent.Wait(30*time.Second))
	}
}
