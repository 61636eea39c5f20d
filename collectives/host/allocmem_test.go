package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
)

// allocMappings counts this process's mappings of Alloc memory.
func allocMappings(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Count(string(b), "memfd:"+allocMemfd)
}

// allocAll makes one Alloc of size on every rank of j.
func (j *job) allocAll(t *testing.T, size int) ([]uintptr, []collectives.Registration) {
	t.Helper()
	ptrs, regs := make([]uintptr, j.n), make([]collectives.Registration, j.n)
	for r, err := range j.each(func(r int) error {
		var err error
		ptrs[r], regs[r], err = j.bes[r].(collectives.Registrar).Alloc(context.Background(), uint64(size))
		return err
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	return ptrs, regs
}

// TestAllocMapsOncePerProcess: ranks of one process map each Alloc once
// per rank (n mappings, not n×n), every rank sees a peer's memory at the
// address the peer itself uses, and the memory stays mapped until the
// last rank holding it lets go, whatever the order of the Closes.
func TestAllocMapsOncePerProcess(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			base := allocMappings(t)
			j := newJob(t, n, Config{})
			const size = 3 << 20
			ptrs1, regs1 := j.allocAll(t, size)
			ptrs2, regs2 := j.allocAll(t, 4096)
			require.Equal(t, base+2*n, allocMappings(t), "two Allocs on %d ranks of one process", n)
			for r := range j.bes {
				be := j.bes[r].(*backend)
				for q := 0; q < n; q++ {
					assert.Equal(t, ptrs1[q], addrOf(be.allocByID(0).seg.Peer(q)), "rank %d's view of rank %d", r, q)
					assert.Equal(t, ptrs2[q], addrOf(be.allocByID(1).seg.Peer(q)), "rank %d's view of rank %d", r, q)
				}
			}
			// Rank 0 lets go first: its memory stays, for the peers that hold it.
			require.NoError(t, regs1[0].Close(context.Background()))
			assert.Equal(t, base+2*n, allocMappings(t), "after rank 0's Close")
			for q := 1; q < n; q++ {
				mem := j.bes[q].(*backend).allocByID(0).seg.Peer(0)
				mem[len(mem)-1-q] = byte(0x40 + q) // a write after the owner's Close
			}
			last := j.bes[n-1].(*backend).allocByID(0).seg.Peer(0)
			for q := 1; q < n; q++ {
				assert.Equal(t, byte(0x40+q), last[len(last)-1-q], "rank %d's write into rank 0's memory", q)
			}
			// Rank 1's whole backend closes: its holds go, the peers' stay.
			require.NoError(t, j.bes[1].Close())
			held := base + n // the second Alloc: ranks 0 and 2.. hold it
			if n > 2 {
				held += n // the first: ranks 2.. hold it
			}
			assert.Equal(t, held, allocMappings(t), "after rank 1's backend closed")
			for q := 0; q < n; q++ {
				if q != 1 {
					v := j.bes[q].(*backend).allocByID(1).seg.Peer(1)
					v[0]++ // rank 1's memory, after its backend's Close
				}
			}
			assert.Equal(t, byte(n-1), j.bes[0].(*backend).allocByID(1).seg.Peer(1)[0])
			for r := 2; r < n; r++ {
				require.NoError(t, regs1[r].Close(context.Background()))
			}
			assert.Equal(t, base+n, allocMappings(t), "the first Alloc gone, the second left")
			for r, reg := range regs2 {
				require.NoError(t, reg.Close(context.Background()), "rank %d", r)
			}
			assert.Equal(t, base, allocMappings(t), "every Alloc gone")
			assert.Empty(t, procMapsFor(t, ptrs1, ptrs2), "table entries left")
		})
	}
}

// procMapsFor lists the table's mappings at any of the addresses.
func procMapsFor(t *testing.T, lists ...[]uintptr) []uintptr {
	t.Helper()
	at := map[uintptr]bool{}
	for _, l := range lists {
		for _, p := range l {
			at[p] = true
		}
	}
	procMaps.Lock()
	defer procMaps.Unlock()
	var left []uintptr
	for _, pm := range procMaps.m {
		if at[addrOf(pm.mem)] {
			left = append(left, addrOf(pm.mem))
		}
	}
	return left
}

// TestAllocManyInProcess: many Allocs on four in-process ranks leave
// no mapping and no descriptor behind once closed.
func TestAllocManyInProcess(t *testing.T) {
	j := newJob(t, 4, Config{})
	_, regs := j.allocAll(t, 4096) // warm up
	for _, reg := range regs {
		require.NoError(t, reg.Close(context.Background()))
	}
	maps, fds := allocMappings(t), countOpenFDs(t)
	for i := 0; i < 20; i++ {
		_, regs := j.allocAll(t, 64<<10)
		for _, reg := range regs {
			require.NoError(t, reg.Close(context.Background()))
		}
	}
	assert.Equal(t, maps, allocMappings(t), "mappings")
	assert.Equal(t, fds, countOpenFDs(t), "descriptors")
}

func countOpenFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// TestAllocCreateFails: a rank whose memfd cannot be made fails its
// Alloc with the system's error; every other rank fails naming it, none
// waits for its descriptor, nothing stays mapped, and the next Alloc
// works.
func TestAllocCreateFails(t *testing.T) {
	const n = 3
	j := newJob(t, n, Config{Timeout: 20 * time.Second})
	maps, fds := allocMappings(t), countOpenFDs(t)
	var first atomic.Bool
	failed := make(chan int, n)
	memfdCreate = func(name string, flags int) (int, error) {
		if first.CompareAndSwap(false, true) {
			return -1, unix.EMFILE
		}
		return unix.MemfdCreate(name, flags)
	}
	t.Cleanup(func() { memfdCreate = unix.MemfdCreate })
	errs := j.each(func(r int) error {
		_, reg, err := j.bes[r].(collectives.Registrar).Alloc(context.Background(), 1<<16)
		if errors.Is(err, unix.EMFILE) {
			failed <- r
		}
		if err == nil {
			_ = reg.Close(context.Background())
		}
		return err
	})
	close(failed)
	bad := -1
	for r := range failed {
		require.Equal(t, -1, bad, "one rank had the injected failure")
		bad = r
	}
	require.NotEqual(t, -1, bad, "the injected errno surfaces: %v", errs)
	assert.ErrorContains(t, errs[bad], "memfd_create")
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		if r == bad {
			continue
		}
		var pe *collectives.PeerError
		require.ErrorAs(t, err, &pe, "rank %d", r)
		assert.Equal(t, bad, pe.Rank, "rank %d: %v", r, err)
		assert.ErrorContains(t, err, "too many open files", "rank %d", r)
	}
	assert.Equal(t, maps, allocMappings(t), "mappings")
	assert.Equal(t, fds, countOpenFDs(t), "descriptors")
	_, regs := j.allocAll(t, 1<<16)
	for _, reg := range regs {
		require.NoError(t, reg.Close(context.Background()))
	}
}
