package gpu

import (
	"context"
	"os"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// stampAt is the Stamp at device address dev of the fake driver's
// mapped host memory.
func stampAt(d *fakeDriver, dev uint64) *[4]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return (*[4]uint64)(d.hostAt(dev))
}

// tableWords are the words of be's timestamp table.
func tableWords(be *Backend) []uint64 {
	return unsafe.Slice((*uint64)(be.stamps.host), be.stamps.n*stampBytes/8)
}

func TestStampsGivenToKernels(t *testing.T) {
	const slots = 8
	bes, drvs, _ := newFakeBackends(t, 2, Config{Stamps: slots})
	be, d := bes[0], drvs[0]
	require.Equal(t, uint64(slots), be.stamps.n)
	table := uint64(be.stamps.dev)
	require.NotNil(t, stampAt(d, table), "the table is mapped host memory")
	ar := func(seq uint64) *collectives.Args {
		return &collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000, Count: 2, Type: collectives.Float32,
			Op: collectives.Sum, Stream: 0x55, Seq: seq}
	}
	cases := []struct {
		name string
		seq  uint64
		want uint64
	}{
		{"numbered call", 5, table + 5*stampBytes},
		{"wraps at the table's size", 13, table + 5*stampBytes},
		{"slot 0", 16, table},
		{"unnumbered call stores nothing", 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := len(d.launches)
			require.NoError(t, be.Run(context.Background(), ar(tc.seq)))
			require.Len(t, d.launches, n+1)
			assert.Equal(t, tc.want, u64at(d.launches[n].params, offStamp))
			assert.Equal(t, tc.seq, u64at(d.launches[n].params, offSeq))
			assert.Equal(t, collectives.Path{Algo: collectives.LL, Transport: "uva"}, be.LastPath())
		})
	}

	t.Run("GPU times read back", func(t *testing.T) {
		require.NoError(t, be.Run(context.Background(), ar(21)))
		s := stampAt(d, u64at(d.launches[len(d.launches)-1].params, offStamp))
		_, _, ok := be.CallTimes(21)
		assert.False(t, ok, "not written yet")
		s[0], s[1] = 1_700_000_000_000_000_000, 1_700_000_000_000_004_000 // as the kernel stores them
		_, _, ok = be.CallTimes(21)
		assert.False(t, ok, "the number comes last")
		s[2] = 21
		st, fin, ok := be.CallTimes(21)
		require.True(t, ok)
		assert.Equal(t, int64(1_700_000_000_000_000_000), st)
		assert.Equal(t, int64(1_700_000_000_000_004_000), fin)
		_, _, ok = be.CallTimes(29)
		assert.False(t, ok, "call 29 shares the slot but has not run")
		_, _, ok = be.CallTimes(13)
		assert.False(t, ok, "call 13's times were overwritten")
		s[0] = 1_700_000_000_000_009_000 // call 29 started; 21's end is still there
		_, _, ok = be.CallTimes(21)
		assert.False(t, ok, "a start after the end is another call's")
	})
}

func TestStampsOff(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	be, d := bes[0], drvs[0]
	assert.Nil(t, be.stamps.host, "no table without a recorder")
	require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000,
		Count: 2, Type: collectives.Float32, Op: collectives.Sum, Seq: 3}))
	assert.Zero(t, u64at(d.launches[len(d.launches)-1].params, offStamp))
	_, _, ok := be.CallTimes(3)
	assert.False(t, ok)
}

// TestStampsCopyEnginesStoreNothing: without goccl_stamp (a fatbin that
// lacks it) a copy-engine call stores no timestamp and its copies are all
// it enqueues; cestamps_test.go checks the stamps around them.
func TestStampsCopyEnginesStoreNothing(t *testing.T) {
	ceAt1MiB(t)
	old := ceStampLaunch
	t.Cleanup(func() { ceStampLaunch = old })
	ceStampLaunch = func(*Backend, cuda.Stream, uint64, uint64, int) error { return nil }
	bes, drvs, _ := newFakeBackends(t, 2, Config{Stamps: 16})
	registerAt4G(t, bes)
	args := func(r int) collectives.Args {
		return collectives.Args{Coll: collectives.Broadcast, Send: rankAddr(0x4000_0000, r), Recv: rankAddr(0x4000_0000, r),
			Count: 2 << 20, Type: collectives.Float32, Stream: uintptr(userStream), Seq: 7}
	}
	require.Equal(t, "ce", path(t, bes, drvs, args))
	for r := range drvs {
		assert.Equal(t, collectives.Path{Algo: collectives.CopyEngine, Transport: "uva"}, bes[r].LastPath(), "rank %d", r)
		for _, w := range tableWords(bes[r]) {
			require.Zero(t, w, "rank %d: the copy engines wrote no timestamp", r)
		}
		_, _, ok := bes[r].CallTimes(7)
		assert.False(t, ok, "rank %d", r)
	}
	// A reduction's copies land where a kernel reduces them: the kernel,
	// one launch of several in the call, stores nothing either, also after
	// a kernel's call that did.
	for r, be := range bes {
		require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000,
			Count: 2, Type: collectives.Float32, Op: collectives.Sum, Seq: 6}), "rank %d", r)
		require.NotZero(t, u64at(drvs[r].launches[len(drvs[r].launches)-1].params, offStamp), "rank %d", r)
	}
	reduce := func(r int) collectives.Args {
		return collectives.Args{Coll: collectives.AllReduce, Send: rankAddr(0x4000_0000, r), Recv: rankAddr(0x4000_0000, r) + 4<<20,
			Count: 512 << 10, Type: collectives.Float32, Op: collectives.Sum, Stream: uintptr(userStream), Seq: 8}
	}
	require.Equal(t, "ce", path(t, bes, drvs, reduce))
	for r, d := range drvs {
		require.NotEmpty(t, d.launches, "rank %d: the reduction's kernels", r)
		for i, l := range d.launches {
			assert.Zero(t, u64at(l.params, offStamp), "rank %d launch %d (%s)", r, i, l.name)
		}
		assert.Equal(t, collectives.CopyEngine, bes[r].LastPath().Algo, "rank %d", r)
	}
}

func TestStampsFreedOnClose(t *testing.T) {
	freed := [2]int{}
	for i, stamps := range []int{0, 4} {
		bes, drvs, _ := newFakeBackends(t, 2, Config{Stamps: stamps})
		for r, err := range together(2, func(r int) error { return bes[r].Close() }) {
			require.NoError(t, err, "rank %d", r)
			assert.Nil(t, bes[r].stamps.host)
			_, _, ok := bes[r].CallTimes(1)
			assert.False(t, ok, "rank %d: nothing read after the free", r)
		}
		freed[i] = drvs[0].freed
	}
	assert.Equal(t, freed[0]+1, freed[1], "the table is freed too")
}

// A fused launch times its calls in its last call's slot, under that
// call's number, after a plain call's launch left its own in the
// parameters; a one-shot AllToAll in its group's slot.
func TestStampsFusedAndAllToAll(t *testing.T) {
	const slots = 16
	bes, drvs, _ := newFakeBackends(t, 3, Config{Stamps: slots})
	be, d := bes[0], drvs[0]
	table := uint64(be.stamps.dev)
	ctx := context.Background()
	require.NoError(t, be.Run(ctx, &collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000, Count: 2,
		Type: collectives.Float32, Op: collectives.Sum, Stream: 0x55, Seq: 4}))
	colls := []collectives.Args{ar(100, collectives.Float32, collectives.Sum, 0x55, 5), ar(200, collectives.Float32, collectives.Sum, 0x55, 6)}
	d.launches = nil
	require.NoError(t, be.RunGroup(ctx, &collectives.Group{Seq: 5, Colls: colls}))
	require.Len(t, d.launches, 1)
	require.Equal(t, "goccl_fused_allreduce_ll_f32_sum", d.launches[0].name)
	assert.Equal(t, table+6*stampBytes, u64at(d.launches[0].params, offStamp), "the last call's slot")
	assert.Equal(t, uint64(6), u64at(d.launches[0].params, offSeq), "under the last call's number")
	assert.Equal(t, collectives.Path{Algo: collectives.LL, Transport: "uva"}, be.LastPath())

	d.launches = nil
	require.NoError(t, be.RunGroup(ctx, a2aGroup(3, 0x10000000, 0x20000000, 100, collectives.Float32, 0x55, 7)))
	require.Len(t, d.launches, 1)
	require.Equal(t, "goccl_alltoall_ll", d.launches[0].name)
	assert.Equal(t, table+7*stampBytes, u64at(d.launches[0].params, offStamp))

	// The point-to-point kernel times its group in the group's slot
	// (TestP2PStamps), in parameters of its own.
	g := a2aGroup(3, 0x10000000, 0x20000000, 100, collectives.Float32, 0x55, 8)
	g.Kind = collectives.PlainGroup
	d.launches = nil
	require.NoError(t, be.RunGroup(ctx, g))
	require.NotEmpty(t, d.launches)
	assert.Equal(t, "goccl_p2p", d.launches[0].name)
	assert.Equal(t, table+8*stampBytes, u64at(d.launches[0].params, offStamp))
}

// stampOnStream launches goccl_stamp on the stream with the slot, which
// and the number of the call the slot was handed to; nothing for slot 0 or
// a fatbin without the kernel; a slot outside the table is refused.
func TestStampOnStream(t *testing.T) {
	const slots = 16
	cases := []struct {
		name    string
		missing bool
		slot    func(be *Backend) uint64
		which   uint32
		seq     uint64 // 0: no launch
		err     error
	}{
		{"start", false, func(be *Backend) uint64 { return be.stamps.slot(21) }, stampStart, 21, nil},
		{"end", false, func(be *Backend) uint64 { return be.stamps.slot(37) }, stampEnd, 37, nil},
		{"slot 0", false, func(*Backend) uint64 { return 0 }, stampEnd, 0, nil},
		{"old fatbin", true, func(be *Backend) uint64 { return be.stamps.slot(21) }, stampStart, 0, nil},
		{"outside", false, func(be *Backend) uint64 { return uint64(be.stamps.dev) + slots*stampBytes }, stampEnd, 0, collectives.ErrInvalidArgument},
		{"unaligned", false, func(be *Backend) uint64 { return uint64(be.stamps.dev) + 8 }, stampEnd, 0, collectives.ErrInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bes, drvs, _ := newFakeBackendsWith(t, 1, Config{Stamps: slots}, func(_ int, d *fakeDriver) {
				if c.missing {
					d.missing = func(name string) bool { return name == "goccl_stamp" }
				}
			})
			be, d := bes[0], drvs[0]
			d.launches = nil
			be.mu.Lock()
			slot := c.slot(be)
			err := be.stampOnStream(0x77, slot, c.which)
			be.mu.Unlock()
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				assert.Empty(t, d.launches)
				return
			}
			require.NoError(t, err)
			if c.seq == 0 {
				assert.Empty(t, d.launches)
				return
			}
			require.Len(t, d.launches, 1)
			l := d.launches[0]
			assert.Equal(t, "goccl_stamp", l.name)
			assert.Equal(t, cuda.Stream(0x77), l.cfg.Stream)
			assert.Equal(t, cuda.Dim3{X: 1, Y: 1, Z: 1}, l.cfg.Grid)
			require.Len(t, l.params, 24)
			assert.Equal(t, uint64(be.stamps.dev)+c.seq%slots*stampBytes, u64at(l.params, 0))
			assert.Equal(t, c.which, u32at(l.params, 8))
			assert.Equal(t, c.seq, u64at(l.params, 16))
		})
	}
}

// goccl_stamp's arguments are where stamp.cu asserts them.
func TestStampArgsMatchKernel(t *testing.T) {
	src, err := os.ReadFile("../../kernels/stamp.cu")
	require.NoError(t, err)
	assert.Contains(t, string(src), "sizeof(StampArgs) == "+strconv.Itoa(stampArgsBytes)+" && __builtin_offsetof(StampArgs, seq) == 16")
	assert.Contains(t, string(src), "constexpr u32 kStampStart = "+strconv.Itoa(stampStart)+", kStampEnd = "+strconv.Itoa(stampEnd)+";")
}
