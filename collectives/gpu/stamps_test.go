package gpu

import (
	"context"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// stampAt is the Stamp at device address dev of the fake driver's
// table, whose device address is its host address.
func stampAt(d *fakeDriver, dev uint64) *[4]uint64 {
	base := uint64(uintptr(unsafe.Pointer(&d.bigHost[0][0])))
	return (*[4]uint64)(d.bigHost[0][(dev-base)/8:])
}

func TestStampsGivenToKernels(t *testing.T) {
	const slots = 8
	bes, drvs, _ := newFakeBackends(t, 2, Config{Stamps: slots})
	be, d := bes[0], drvs[0]
	require.Len(t, d.bigHost, 1, "one table")
	assert.Equal(t, 2, d.allocs, "the abort flag and the table")
	table := uint64(uintptr(unsafe.Pointer(&d.bigHost[0][0])))
	for i, w := range d.bigHost[0][:slots*stampBytes/8] {
		require.Zero(t, w, "word %d of the table is cleared", i)
	}
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

	t.Run("device times read back", func(t *testing.T) {
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
	assert.Empty(t, d.bigHost, "no table without a recorder")
	assert.Equal(t, 1, d.allocs, "host memory for the abort flag only")
	require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce, Send: 0x1000, Recv: 0x2000,
		Count: 2, Type: collectives.Float32, Op: collectives.Sum, Seq: 3}))
	assert.Zero(t, u64at(d.launches[len(d.launches)-1].params, offStamp))
	_, _, ok := be.CallTimes(3)
	assert.False(t, ok)
}

func TestStampsCopyEnginesStoreNothing(t *testing.T) {
	ceAt1MiB(t)
	bes, drvs, _ := newFakeBackends(t, 2, Config{Stamps: 16})
	regs := make([]collectives.Registration, 2)
	for r, err := range together(2, func(r int) error {
		var err error
		regs[r], err = bes[r].Register(context.Background(), rankAddr(0x4000_0000, r), 8<<20)
		return err
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	args := func(r int) collectives.Args {
		return collectives.Args{Coll: collectives.Broadcast, Send: rankAddr(0x4000_0000, r), Recv: rankAddr(0x4000_0000, r),
			Count: 2 << 20, Type: collectives.Float32, Stream: uintptr(userStream), Seq: 7}
	}
	require.Equal(t, "ce", path(t, bes, drvs, args))
	for r, d := range drvs {
		assert.Equal(t, collectives.Path{Algo: collectives.CopyEngine, Transport: "uva"}, bes[r].LastPath(), "rank %d", r)
		for _, w := range d.bigHost[0] {
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
	bes, drvs, _ := newFakeBackends(t, 2, Config{Stamps: 4})
	for r, err := range together(2, func(r int) error { return bes[r].Close() }) {
		require.NoError(t, err, "rank %d", r)
		assert.Equal(t, 2, drvs[r].freed, "rank %d: the abort flag and the table", r)
		_, _, ok := bes[r].CallTimes(1)
		assert.False(t, ok, "rank %d: nothing read after the free", r)
	}
}
