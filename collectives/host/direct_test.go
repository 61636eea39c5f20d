package host

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// directAlways makes calls of every size probe the direct path for the
// rest of the test (directMin).
func directAlways(t *testing.T) {
	kept := directMin
	directMin = 0
	t.Cleanup(func() { directMin = kept })
}

// allocArenas gives every rank of j an arena of size bytes from Alloc
// (collective), closed with the job.
func (j *job) allocArenas(t *testing.T, size int) {
	t.Helper()
	j.arenas = make([]*arena, j.n)
	regs := make([]collectives.Registration, j.n)
	errs := j.each(func(r int) error {
		p, reg, err := j.bes[r].(collectives.Registrar).Alloc(context.Background(), uint64(size))
		if err == nil {
			j.arenas[r] = &arena{mem: hostBytes(p, size)}
			regs[r] = reg
		}
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() {
		for r, reg := range regs {
			assert.NoError(t, reg.Close(context.Background()), "rank %d", r)
		}
	})
}

// lastTransports is every rank's transport of its last call.
func (j *job) lastTransports() []string {
	out := make([]string, j.n)
	for r, be := range j.bes {
		out[r] = be.(collectives.PathTeller).LastPath().Transport
	}
	return out
}

func same(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// directCounts are the counts every AllReduce of the direct path is
// checked at: none, one, a few, less than a chunk's part, and over a MiB
// (a prime tail: chunks and parts end mid-line).
var directCounts = []int{0, 1, 7, 4095, 1<<20 + 3}

// TestDirectAllReduce checks every type and op of AllReduce on buffers
// from Alloc, in and out of place, against the reference, and that the
// call took the direct path (PreMulSum, which needs scalars:
// TestDirectPreMulSum).
func TestDirectAllReduce(t *testing.T) {
	directAlways(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			j := newJob(t, n, Config{StagingBytes: 64 << 10})
			j.allocArenas(t, 2*(8<<20)+4096)
			for _, count := range directCounts {
				dts := collectives.AllDataTypes()
				if count > 1<<20 && n == 3 {
					dts = []collectives.DataType{collectives.Float32, collectives.BFloat16, collectives.Int64}
				}
				for _, dt := range dts {
					for _, op := range collectives.AllOps() {
						for _, inPlace := range []bool{false, true} {
							c := call{coll: collectives.AllReduce, dt: dt, op: op, count: count, inPlace: inPlace}
							require.NoError(t, j.verify(c))
							if count > 0 {
								require.Equal(t, same(n, "shm-direct"), j.lastTransports(), "%v", c)
							}
						}
					}
				}
			}
		})
	}
}

// TestDirectOthers checks AllGather, Broadcast, ReduceScatter and Reduce
// on the direct path.
func TestDirectOthers(t *testing.T) {
	directAlways(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			j := newJob(t, n, Config{StagingBytes: 64 << 10})
			j.allocArenas(t, 2*n*(1<<20)*8+4096)
			for _, count := range []int{1, 7, 4095, 1<<18 + 3} {
				for _, c := range calls(n, count, []collectives.DataType{collectives.Float32, collectives.Int8, collectives.BFloat16}, []collectives.Op{collectives.Sum, collectives.Max}) {
					require.NoError(t, j.verify(c))
					require.Equal(t, same(n, "shm-direct"), j.lastTransports(), "%v", c)
				}
			}
		})
	}
}

// TestDirectReduce checks every type and op of Reduce on buffers from
// Alloc, at every root, in and out of place, against the reference (the
// non-roots' outputs left as they were), and that the call took the
// direct path (PreMulSum: TestDirectPreMulSum).
func TestDirectReduce(t *testing.T) {
	directAlways(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			j := newJob(t, n, Config{StagingBytes: 64 << 10})
			j.allocArenas(t, 2*(8<<20)+4096)
			for _, count := range directCounts {
				dts := collectives.AllDataTypes()
				if count > 1<<20 {
					dts = []collectives.DataType{collectives.Float32, collectives.BFloat16, collectives.Int64, collectives.Float8E4M3}
				}
				for root := 0; root < n; root++ {
					for _, dt := range dts {
						for _, op := range collectives.AllOps() {
							for _, inPlace := range []bool{false, true} {
								c := call{coll: collectives.Reduce, dt: dt, op: op, count: count, root: root, inPlace: inPlace}
								require.NoError(t, j.verify(c))
								if count > 0 {
									require.Equal(t, same(n, "shm-direct"), j.lastTransports(), "%v", c)
								}
							}
						}
					}
				}
			}
		})
	}
}

// TestDirectMixed: one rank's buffers are not from Alloc, so every rank
// takes the ordinary path, and results stay right; the next call, all
// from Alloc again, is direct again.
func TestDirectMixed(t *testing.T) {
	directAlways(t)
	j := newJob(t, 3, Config{StagingBytes: 64 << 10})
	j.allocArenas(t, 4<<20)
	for _, private := range []int{0, 2} {
		for _, c := range []call{
			{coll: collectives.AllReduce, dt: collectives.Float32, op: collectives.Sum, count: 100003},
			{coll: collectives.AllReduce, dt: collectives.Int32, op: collectives.Max, count: 5, inPlace: true},
			{coll: collectives.AllGather, dt: collectives.Uint8, count: 70001},
			{coll: collectives.ReduceScatter, dt: collectives.Float64, op: collectives.Avg, count: 3001, inPlace: true},
			{coll: collectives.Broadcast, dt: collectives.Int64, count: 20011, root: 1},
		} {
			kept := j.arenas[private]
			j.arenas[private] = nil
			require.NoError(t, j.verify(c), "rank %d private", private)
			assert.NotContains(t, j.lastTransports(), "shm-direct", "%v", c)
			j.arenas[private] = kept
			require.NoError(t, j.verify(c))
			assert.Equal(t, same(3, "shm-direct"), j.lastTransports(), "%v", c)
		}
	}
}

// TestDirectAfterClose: once the allocations are closed, calls on private
// buffers take the ordinary path without probing (one barrier fewer), and
// results stay right.
func TestDirectAfterClose(t *testing.T) {
	directAlways(t)
	j := newJob(t, 2, Config{})
	regs := make([]collectives.Registration, 2)
	for r, err := range j.each(func(r int) error {
		var err error
		_, regs[r], err = j.bes[r].(collectives.Registrar).Alloc(context.Background(), 1<<20)
		return err
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	for _, reg := range regs {
		require.NoError(t, reg.Close(context.Background()))
		require.NoError(t, reg.Close(context.Background()), "a second Close")
	}
	c := call{coll: collectives.AllReduce, dt: collectives.Float32, op: collectives.Sum, count: 4097}
	require.NoError(t, j.verify(c))
	assert.Equal(t, same(2, "shm"), j.lastTransports())
}

// TestDirectMin: below directMin, calls on buffers from Alloc take the
// ordinary path (no probe); from it, the direct one.
func TestDirectMin(t *testing.T) {
	j := newJob(t, 2, Config{})
	j.allocArenas(t, 1<<20)
	for _, tc := range []struct {
		count int
		want  string
	}{{directMin/4 - 1, "shm"}, {directMin / 4, "shm-direct"}} {
		require.NoError(t, j.verify(call{coll: collectives.AllReduce, dt: collectives.Float32, op: collectives.Sum, count: tc.count}))
		assert.Equal(t, same(2, tc.want), j.lastTransports(), "count %d", tc.count)
	}
}

// TestAllocBadInput: a bad size on one rank, or sizes that differ, fail
// every rank with ErrInvalidArgument naming the size; Register's bad
// arguments fail with the argument's name, and good ones enable nothing.
func TestAllocBadInput(t *testing.T) {
	j := newJob(t, 2, Config{Timeout: 20 * time.Second})
	for _, tc := range []struct {
		name  string
		sizes []uint64
		want  string
	}{
		{"zero on one rank", []uint64{0, 4096}, "size"},
		{"zero on all", []uint64{0, 0}, "size 0"},
		{"huge", []uint64{1 << 50, 1 << 50}, "size"},
		{"sizes differ", []uint64{4096, 8192}, "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) { allocFailsEverywhere(t, j, tc.sizes, tc.want) })
	}
	reg := j.bes[0].(collectives.Registrar)
	_, err := reg.Register(context.Background(), 0, 64)
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "ptr")
	_, err = reg.Register(context.Background(), 0x1000, 0)
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "size")
	// A good Register enables nothing: the calls stay on their path.
	buf := alloc(4096)
	regs := make([]collectives.Registration, 2)
	for r := range regs {
		regs[r], err = j.bes[r].(collectives.Registrar).Register(context.Background(), addr(buf), 4096)
		require.NoError(t, err)
	}
	require.NoError(t, j.verify(call{coll: collectives.AllReduce, dt: collectives.Float32, op: collectives.Sum, count: 1000}))
	assert.Equal(t, same(2, "shm"), j.lastTransports())
	for _, r := range regs {
		require.NoError(t, r.Close(context.Background()))
	}
	// Alloc after Close is ErrClosed.
	require.NoError(t, j.bes[1].Close())
	_, _, err = j.bes[1].(collectives.Registrar).Alloc(context.Background(), 4096)
	require.ErrorIs(t, err, collectives.ErrClosed)
}
