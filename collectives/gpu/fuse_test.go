package gpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// ar is a validated AllReduce of count elements for the fusion tests.
func ar(count int, dt collectives.DataType, op collectives.Op, stream uintptr, seq uint64) collectives.Args {
	base := uintptr(0x10000000) + uintptr(seq)<<20
	return collectives.Args{Coll: collectives.AllReduce, Send: base, Recv: base + 0x80000, Count: count,
		Type: dt, Op: op, Stream: stream, Seq: seq}
}

// fusedDesc is one decoded kernels/fused.cu FusedDesc.
type fusedDesc struct {
	send, recv, seq uint64
	count, blocks   uint32
}

// descsOf decodes a fused launch's descriptors from the fake's host memory
// and returns them with the launch's ticket.
func descsOf(t *testing.T, d *fakeDriver, l fakeLaunch) ([]fusedDesc, uint32) {
	t.Helper()
	word := u64at(l.params, offFuseCount)
	n := int(uint32(word))
	d.mu.Lock()
	h := d.hostAt(u64at(l.params, offFuseDescs))
	d.mu.Unlock()
	require.NotNil(t, h, "descriptors at %#x are not in mapped host memory", u64at(l.params, offFuseDescs))
	b := unsafe.Slice((*byte)(h), n*fuseDescSize)
	out := make([]fusedDesc, n)
	for i := range out {
		x := b[i*fuseDescSize:]
		out[i] = fusedDesc{binary.LittleEndian.Uint64(x), binary.LittleEndian.Uint64(x[8:]), binary.LittleEndian.Uint64(x[16:]),
			binary.LittleEndian.Uint32(x[24:]), binary.LittleEndian.Uint32(x[28:])}
	}
	return out, uint32(word >> 32)
}

// wantFused: a kernel name and, for a fused launch, the calls (indexes
// into the group) it carries.
type wantFused struct {
	name  string
	calls []int
}

// checkLaunches compares the launches of one group with want, and each
// fused launch's descriptors, grid and parameters with the calls'.
func checkLaunches(t *testing.T, be *Backend, d *fakeDriver, colls []collectives.Args, want []wantFused) {
	t.Helper()
	require.Len(t, d.launches, len(want), "launches: %v", launchNames(d.launches))
	for i, w := range want {
		l := d.launches[i]
		assert.Equal(t, w.name, l.name, "launch %d", i)
		if w.calls == nil {
			assert.Zero(t, u64at(l.params, offFuseDescs), "launch %d: a plain launch carries no descriptors", i)
			continue
		}
		descs, ticket := descsOf(t, d, l)
		require.Len(t, descs, len(w.calls), "launch %d", i)
		assert.NotZero(t, ticket, "launch %d: a ring slot's ticket", i)
		grid := 0
		for k, ci := range w.calls {
			a := colls[ci]
			blocks := be.tune.shape(famAllReduceLL, int64(a.Count*a.Type.Size()))
			grid = max(grid, blocks)
			assert.Equal(t, fusedDesc{uint64(a.Send), uint64(a.Recv), a.Seq, uint32(a.Count), uint32(blocks)}, descs[k],
				"launch %d descriptor %d (call %d)", i, k, ci)
		}
		assert.Equal(t, uint32(grid), l.cfg.Grid.X, "launch %d: the grid of its widest call", i)
		assert.Equal(t, cuda.Stream(colls[w.calls[0]].Stream), l.cfg.Stream, "launch %d", i)
		assert.Equal(t, u64at(d.launches[0].params, offPeerSignals), u64at(l.params, offPeerSignals), "communicator fields")
	}
	assert.Equal(t, len(want), be.fuse.groupLaunches, "the group's launch count")
	// The parameter block goes back to plain launches' zeros.
	assert.Zero(t, u64at(be.prm[:], offFuseDescs))
	assert.Zero(t, u64at(be.prm[:], offFuseCount))
}

func launchNames(ls []fakeLaunch) []string {
	var s []string
	for _, l := range ls {
		s = append(s, l.name)
	}
	return s
}

func TestGroupFusionBatches(t *testing.T) {
	f32, i32 := collectives.Float32, collectives.Int32
	sum, max_ := collectives.Sum, collectives.Max
	fusedF32Sum := "goccl_fused_allreduce_ll_f32_sum"
	rng := rand.New(rand.NewPCG(7, 8))
	eight := make([]collectives.Args, 8)
	eightIdx := make([]int, 8)
	for i := range eight {
		eight[i] = ar(1+rng.IntN(4096), f32, sum, 0x55, uint64(i+1))
		eightIdx[i] = i
	}
	var seventy []collectives.Args
	for i := range 70 {
		seventy = append(seventy, ar(16, f32, sum, 0x55, uint64(i+1)))
	}
	idx := func(lo, hi int) []int {
		var s []int
		for i := lo; i < hi; i++ {
			s = append(s, i)
		}
		return s
	}
	cases := []struct {
		name  string
		colls []collectives.Args
		want  []wantFused
	}{
		{"eight small AllReduces: one launch", eight, []wantFused{{fusedF32Sum, eightIdx}}},
		{"other ops, types, collectives and sizes break the batch", []collectives.Args{
			ar(100, f32, sum, 0x55, 1), ar(7, f32, sum, 0x55, 2), ar(3000, f32, sum, 0x55, 3),
			ar(5, f32, max_, 0x55, 4), ar(9, f32, max_, 0x55, 5),
			{Coll: collectives.Broadcast, Send: 0x1000, Recv: 0x2000, Count: 64, Type: f32, Stream: 0x55, Seq: 6},
			ar(1<<20, f32, sum, 0x55, 7), // over the LL threshold
			ar(10, i32, sum, 0x55, 8), ar(11, i32, sum, 0x55, 9),
			ar(12, i32, sum, 0x66, 10), // another stream
		}, []wantFused{
			{fusedF32Sum, []int{0, 1, 2}}, {"goccl_fused_allreduce_ll_f32_max", []int{3, 4}},
			{"goccl_broadcast_oneshot", nil}, {"goccl_allreduce_oneshot_f32_sum", nil},
			{"goccl_fused_allreduce_ll_i32_sum", []int{7, 8}}, {"goccl_allreduce_ll_i32_sum", nil},
		}},
		{"zero counts join and launch nothing", []collectives.Args{
			ar(0, f32, sum, 0x55, 1), ar(100, f32, sum, 0x55, 2), ar(0, f32, sum, 0x55, 3), ar(200, f32, sum, 0x55, 4),
		}, []wantFused{{fusedF32Sum, []int{1, 3}}}},
		{"one call with data is a plain launch", []collectives.Args{ar(0, f32, sum, 0x55, 1), ar(100, f32, sum, 0x55, 2)},
			[]wantFused{{"goccl_allreduce_ll_f32_sum", nil}}},
		{"at most 64 calls a launch", seventy, []wantFused{{fusedF32Sum, idx(0, 64)}, {fusedF32Sum, idx(64, 70)}}},
		{"at most the LL threshold a launch", []collectives.Args{
			ar(50<<10, f32, sum, 0x55, 1), ar(50<<10, f32, sum, 0x55, 2), ar(50<<10, f32, sum, 0x55, 3),
			ar(100, f32, sum, 0x55, 4),
		}, []wantFused{{fusedF32Sum, []int{0, 1}}, {fusedF32Sum, []int{2, 3}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, 2, Config{})
			require.True(t, bes[0].fuse.on)
			require.NoError(t, bes[0].RunGroup(context.Background(), &collectives.Group{Colls: tc.colls}))
			checkLaunches(t, bes[0], drvs[0], tc.colls, tc.want)
		})
	}
}

func TestGroupFusionOff(t *testing.T) {
	colls := []collectives.Args{ar(100, collectives.Float32, collectives.Sum, 0x55, 1), ar(200, collectives.Float32, collectives.Sum, 0x55, 2)}
	plain := []wantFused{{"goccl_allreduce_ll_f32_sum", nil}, {"goccl_allreduce_ll_f32_sum", nil}}
	t.Run("GOCCL_GROUP_FUSE=0", func(t *testing.T) {
		t.Setenv(EnvGroupFuse, "0")
		bes, drvs, _ := newFakeBackends(t, 2, Config{})
		assert.False(t, bes[0].fuse.on)
		assert.Len(t, drvs[0].hostMem, 1, "no descriptor memory")
		require.NoError(t, bes[0].RunGroup(context.Background(), &collectives.Group{Colls: colls}))
		checkLaunches(t, bes[0], drvs[0], colls, plain)
	})
	t.Run("a fatbin without the fused kernels", func(t *testing.T) {
		bes, drvs, _ := newFakeBackendsWith(t, 2, Config{}, func(_ int, d *fakeDriver) { d.noFunc = "goccl_fused_" })
		assert.False(t, bes[0].fuse.on)
		require.NoError(t, bes[0].RunGroup(context.Background(), &collectives.Group{Colls: colls}))
		checkLaunches(t, bes[0], drvs[0], colls, plain)
	})
	t.Run("no pinned memory for the descriptors", func(t *testing.T) {
		bes, drvs, _ := newFakeBackendsWith(t, 2, Config{}, func(_ int, d *fakeDriver) { d.failOn = "allocHost" })
		assert.False(t, bes[0].fuse.on)
		require.NoError(t, bes[0].RunGroup(context.Background(), &collectives.Group{Colls: colls}))
		checkLaunches(t, bes[0], drvs[0], colls, plain)
	})
	t.Run("a bad value fails New naming the variable", func(t *testing.T) {
		t.Setenv(EnvGroupFuse, "yes")
		mk := func(_ context.Context, _ string, _ cuda.Driver, b transport.Bootstrap, _ cuda.Device, _ cuda.Context) (transport.Mapper, error) {
			return &fakeMapper{b: b}, nil
		}
		_, err := newBackend(context.Background(), newFakeDriver(), transporttest.NewGroup(1).Rank(0), Config{}, []byte("fatbin"), mk)
		require.ErrorIs(t, err, collectives.ErrInvalidArgument)
		assert.Contains(t, err.Error(), EnvGroupFuse+`="yes"`)
	})
}

// A ring slot is written again only after its launch has read it; until
// then the group's calls launch one by one.
func TestGroupFusionRingSlotInUse(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	be, d := bes[0], drvs[0]
	d.keepSlots = true // the fused kernels never get to read their slots
	colls := []collectives.Args{ar(100, collectives.Float32, collectives.Sum, 0x55, 1), ar(200, collectives.Float32, collectives.Sum, 0x55, 2)}
	g := &collectives.Group{Colls: colls}
	ctx := context.Background()
	seen := map[uint64]bool{}
	for i := range fuseSlots {
		d.launches = nil
		require.NoError(t, be.RunGroup(ctx, g))
		checkLaunches(t, be, d, colls, []wantFused{{"goccl_fused_allreduce_ll_f32_sum", []int{0, 1}}})
		at := u64at(d.launches[0].params, offFuseDescs)
		assert.False(t, seen[at], "group %d reuses a slot", i)
		seen[at] = true
	}
	d.launches = nil
	require.NoError(t, be.RunGroup(ctx, g))
	checkLaunches(t, be, d, colls, []wantFused{{"goccl_allreduce_ll_f32_sum", nil}, {"goccl_allreduce_ll_f32_sum", nil}})

	// Slot 0's launch reads it: the next group takes it.
	d.keepSlots = false
	done := (*uint32)(unsafe.Add(be.fuse.ring, fuseSlotHead-fuseDoneBack))
	*done = be.fuse.tickets[0]
	d.launches = nil
	require.NoError(t, be.RunGroup(ctx, g))
	checkLaunches(t, be, d, colls, []wantFused{{"goccl_fused_allreduce_ll_f32_sum", []int{0, 1}}})
	assert.Equal(t, uint64(be.fuse.ringDev)+fuseSlotHead, u64at(d.launches[0].params, offFuseDescs))
}

// While the stream is captured, descriptors go to storage that is never
// written again, without a ticket; when it is full a captured group runs
// one by one, and the next group outside capture adds storage.
func TestGroupFusionCapture(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	be, d := bes[0], drvs[0]
	var colls []collectives.Args
	for i := range fuseMaxDescs {
		colls = append(colls, ar(4, collectives.Float64, collectives.Min, 0x55, uint64(i+1)))
	}
	g := &collectives.Group{Colls: colls}
	ctx := context.Background()
	d.capturing = map[cuda.Stream]bool{0x55: true}
	arena := be.fuse.arenas[0]
	perArena := fuseArenaBytes / (fuseMaxDescs * fuseDescSize)
	for i := range perArena {
		d.launches = nil
		require.NoError(t, be.RunGroup(ctx, g))
		require.Len(t, d.launches, 1)
		l := d.launches[0]
		assert.Equal(t, "goccl_fused_allreduce_ll_f64_min", l.name)
		assert.Equal(t, uint64(arena.dev)+uint64(i*fuseMaxDescs*fuseDescSize), u64at(l.params, offFuseDescs),
			"captured group %d: the next free descriptors", i)
		descs, ticket := descsOf(t, d, l)
		assert.Zero(t, ticket, "a graph's descriptors carry no ticket")
		require.Len(t, descs, fuseMaxDescs)
		assert.Equal(t, uint64(fuseMaxDescs), descs[fuseMaxDescs-1].seq)
	}
	d.launches = nil
	require.NoError(t, be.RunGroup(ctx, g))
	assert.Len(t, d.launches, fuseMaxDescs, "storage full: one launch per call")
	assert.Equal(t, "goccl_allreduce_ll_f64_min", d.launches[0].name)

	d.capturing[0x55] = false
	hosts := len(d.hostMem)
	d.launches = nil
	require.NoError(t, be.RunGroup(ctx, g))
	assert.Len(t, d.hostMem, hosts+1, "more capture storage, outside capture")
	require.Len(t, d.launches, 1)
	_, ticket := descsOf(t, d, d.launches[0])
	assert.NotZero(t, ticket, "outside capture: the ring")

	d.capturing[0x55] = true
	d.launches = nil
	require.NoError(t, be.RunGroup(ctx, g))
	require.Len(t, d.launches, 1)
	assert.Equal(t, uint64(be.fuse.arenas[1].dev), u64at(d.launches[0].params, offFuseDescs))
}

// GOCCL_DEBUG=TRACE says how many launches each group took, INFO says it
// of the first group fused.
func TestGroupFusionLogsLaunches(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: levelTrace}))
	bes, _, _ := newFakeBackends(t, 2, Config{Logger: log})
	colls := []collectives.Args{ar(100, collectives.Float32, collectives.Sum, 0x55, 1), ar(200, collectives.Float32, collectives.Sum, 0x55, 2),
		ar(1<<20, collectives.Float32, collectives.Sum, 0x55, 3)}
	buf.Reset()
	require.NoError(t, bes[0].RunGroup(context.Background(), &collectives.Group{Colls: colls}))
	require.NoError(t, bes[0].RunGroup(context.Background(), &collectives.Group{Colls: colls}))
	out := buf.String()
	assert.Equal(t, 1, strings.Count(out, "level=INFO msg=\"goccl: gpu backend: group fusion"), out)
	assert.Equal(t, 2, strings.Count(out, "level=DEBUG-4 msg=\"goccl: gpu backend: group\" rank=0 collectives=3 launches=2"), out)
}

// A warm group of eight small AllReduces allocates nothing on its way to
// the launch.
func TestGroupFusionAllocatesNothing(t *testing.T) {
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	drvs[0].quiet = true
	g := groupOf8()
	ctx := context.Background()
	require.NoError(t, bes[0].RunGroup(ctx, g))
	allocs := testing.AllocsPerRun(200, func() {
		if err := bes[0].RunGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
	assert.Equal(t, 1, bes[0].fuse.groupLaunches)
}

func groupOf8() *collectives.Group {
	g := &collectives.Group{}
	for i := range 8 {
		g.Colls = append(g.Colls, ar(256, collectives.Float32, collectives.Sum, 0x55, uint64(i+1)))
	}
	return g
}

// BenchmarkEnqueueGroupOf8AllReduces is the host CPU cost of a group of 8
// small AllReduces on the GPU backend up to the launch, fused (one launch)
// and not (GOCCL_GROUP_FUSE=0: eight), on a driver that records nothing.
//
//	go test -run XXX -bench EnqueueGroup -benchmem ./collectives/gpu/
func BenchmarkEnqueueGroupOf8AllReduces(b *testing.B) {
	for _, fused := range []bool{true, false} {
		name := "fused"
		if !fused {
			name = "unfused"
		}
		b.Run(name, func(b *testing.B) {
			bes, drvs, _ := newFakeBackends(b, 2, Config{})
			be := bes[0]
			drvs[0].quiet = true
			be.fuse.on = be.fuse.on && fused
			g := groupOf8()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := be.RunGroup(ctx, g); err != nil {
					b.Fatal(err)
				}
			}
			want := 8
			if fused {
				want = 1
			}
			if be.fuse.groupLaunches != want {
				b.Fatalf("%d launches, want %d", be.fuse.groupLaunches, want)
			}
		})
	}
}

// The GPU fusion tests' check (gpu_fuse_test.go) passes the area a correct
// group leaves and fails one wrong element or one byte written outside.
func TestGPUFusionCaseCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []collectives.DataType{collectives.Int8, collectives.BFloat16, collectives.Float64} {
		c := newFuseCase(rng, 3, dt, collectives.Sum, 20, 8<<10, 1<<20)
		area := bytes.Repeat([]byte{0xA5}, c.rcvN)
		for i, cl := range c.calls {
			for e := range cl.count {
				if dt.IsFloat() {
					putFloat(dt, area[cl.roff:], e, reduceFloat(dt, collectives.Sum, c.ins[i], 0, e))
				} else {
					putInt(dt, area[cl.roff:], e, reduceInt(dt, collectives.Sum, c.ins[i], 0, e))
				}
			}
		}
		require.NoError(t, c.checkArea(area), dt.String())
		k := slices.IndexFunc(c.calls, func(cl fuseCall) bool { return cl.count > 0 })
		require.GreaterOrEqual(t, k, 0)
		bad := bytes.Clone(area)
		bad[c.calls[k].roff+dt.Size()-1] ^= 0x40
		assert.Error(t, c.checkArea(bad), "%s: a wrong element", dt)
		bad = bytes.Clone(area)
		bad[len(bad)-1] = 0
		assert.ErrorContains(t, c.checkArea(bad), "outside", "%s: a byte past the last output", dt)
	}
}
