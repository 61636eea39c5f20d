package gpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// ceReduceModel turns one recorded launch of goccl_cereduce_i32_sum into
// the steps the kernel takes (kernels/cereduce.cu), for the simulator: per
// chunk of its piece, wait for the landed flag, reduce the chunk in rank
// order, then (staging mode) publish reduced here and free in every
// source's flags. It reads the launch's real parameter block, so the model
// sees what the GPU would. Blocks are one here; the emulator (kernels/emu)
// covers the kernel's own arrival counting.
func ceReduceModel(o fakeOp) ([]fakeOp, error) {
	if o.name != "goccl_cereduce_i32_sum" {
		return nil, fmt.Errorf("the model runs goccl_cereduce_i32_sum only, not %s", o.name)
	}
	p := o.data
	if len(p) != paramSize {
		return nil, fmt.Errorf("%s: %d parameter bytes, want %d", o.name, len(p), paramSize)
	}
	u64 := func(off int) uint64 { return binary.LittleEndian.Uint64(p[off:]) }
	u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(p[off:]) }
	send, recv, count := uintptr(u64(offSend)), uintptr(u64(offRecv)), u64(offCount)
	signals := uintptr(u64(offSignals))
	me, nr := int(u32(offRank)), int(u32(offNRanks))
	chunks, chunk, seq, depth := u32(offCEChunks), u64(offCEChunk), u32(offCESeq), u32(offCEDepth)
	direct := u32(offFlags)&flagCEDirect != 0
	if chunk == 0 || (!direct && (depth < 2 || depth > ceSlots)) || (direct && nr != 2) {
		return nil, fmt.Errorf("%s: depth %d chunk %d direct %v at %d ranks", o.name, depth, chunk, direct, nr)
	}
	// The chunks as the kernel cuts them (direct mode: one chunk, the
	// whole piece, per launch).
	if direct && chunks != 1 {
		return nil, fmt.Errorf("%s: direct launch of %d chunks, want 1", o.name, chunks)
	}
	span := func(base uint64) uint64 { return min(chunk, count-base) }
	var steps []fakeOp
	base := uint64(0)
	for i := uint32(0); i < chunks && base < count; i++ {
		v, lo, n := seq+i, base, span(base)
		base += n
		steps = append(steps, fakeOp{kind: "wait", stream: o.stream, dst: signals + ceFlagOff + ceLandedOff, val: v, geq: true})
		steps = append(steps, fakeOp{kind: "run", stream: o.stream, name: o.name, run: func(m *simMem) error {
			slot := uintptr(u64(offPeerStaging+8*me)) + uintptr(uint64(i%depth)*uint64(nr)*chunk*4)
			ins := make([][]byte, nr)
			for r := range nr {
				ins[r] = make([]byte, 4*n)
				src := slot + uintptr(uint64(r)*chunk*4)
				switch {
				case r == me:
					src = send + uintptr(lo*4)
				case direct:
					src = recv + uintptr(lo*4)
				}
				m.read(src, ins[r])
			}
			m.write(recv+uintptr(lo*4), sumInt32(ins))
			if direct {
				return nil // the host orders what follows by events
			}
			word := binary.LittleEndian.AppendUint32(nil, v)
			m.write(signals+ceFlagOff+ceReducedOff+4*uintptr(i%ceSlots), word)
			for r := range nr {
				if r != me {
					peer := uintptr(u64(offPeerSignals + 8*r))
					m.write(peer+ceFlagOff+ceFreeOff+4*uintptr(me*ceSlots+int(i%ceSlots)), word)
				}
			}
			return nil
		}})
	}
	return steps, nil
}

// sumInt32 is the wrapping elementwise sum of little-endian int32 vectors,
// in the order given.
func sumInt32(ins [][]byte) []byte {
	out := make([]byte, len(ins[0]))
	for i := 0; i+4 <= len(out); i += 4 {
		var s uint32
		for _, in := range ins {
			s += binary.LittleEndian.Uint32(in[i:])
		}
		binary.LittleEndian.PutUint32(out[i:], s)
	}
	return out
}

// ceReduceTune makes the copy-engine reductions' staging tiny (slot=16:
// 4 KiB per source) and chunks of 1 KiB, so that a few thousand elements
// already reuse every staging slot (depth 4 at 2 ranks) and the larger
// calls cycle through the flag slots.
func ceReduceTune(t *testing.T) {
	t.Setenv(EnvTune, "slot=16,cechunk=1K,ce.all_reduce=0,ce.reduce_scatter=0,ce.broadcast=0,ce.all_gather=0")
}

func ceReduceCalls(n int) []simCall {
	var calls []simCall
	for i, count := range []int{1, 7, 1023, 4096, 3, 40001} {
		calls = append(calls,
			simCall{coll: collectives.AllReduce, count: count, inPlace: i%2 == 0},
			simCall{coll: collectives.ReduceScatter, count: count, inPlace: i%2 == 1},
			simCall{coll: collectives.AllGather, count: count},
			simCall{coll: collectives.AllReduce, count: count + 5, inPlace: i%2 == 1},
			simCall{coll: collectives.Broadcast, count: count, root: i % n},
			simCall{coll: collectives.ReduceScatter, count: count + 2, inPlace: i%2 == 0},
		)
	}
	return calls
}

func TestCEReduceSimulated(t *testing.T) {
	ceReduceTune(t)
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, n, Config{})
			recv, _ := allocAll(t, bes, uint64(n*(40001+5)*4+simGuard))
			seeds := uint64(6)
			if testing.Short() {
				seeds = 2
			}
			for seed := range seeds {
				bad := runSim(t, bes, drvs, recv, ceReduceCalls(n), seed, nil)
				require.Empty(t, bad, "seed %d", seed)
			}
		})
	}
}

// rank0AllReduce is rank 0's int32 sum AllReduce of count elements from
// its send area into recv, on the user's stream.
func rank0AllReduce(recv uintptr, count int) collectives.Args {
	return collectives.Args{Coll: collectives.AllReduce, Send: rankAddr(sendBase, 0), Recv: recv, Count: count,
		Type: collectives.Int32, Op: collectives.Sum, Stream: uintptr(userStream)}
}

// Every call above takes the copy engines, with chunks and staging reuse
// as planned (else the test above would prove less than it says).
func TestCEReducePlanUnderTheTestTuning(t *testing.T) {
	ceReduceTune(t)
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	recv, _ := allocAll(t, bes, 1<<20)
	a := rank0AllReduce(recv[0], 40001)
	pl, ok := bes[0].planCEReduce(&a, false)
	require.True(t, ok)
	assert.Equal(t, cePlan{es: 4, piece: 20004, chunk: 256, chunks: 79, depth: 4}, pl)
	for _, c := range ceReduceCalls(2) {
		assert.Equal(t, "ce", path(t, bes, drvs, func(r int) collectives.Args {
			x := collectives.Args{Coll: c.coll, Send: rankAddr(sendBase, r), Recv: recv[r], Count: c.count,
				Type: collectives.Int32, Op: collectives.Sum, Root: c.root, Stream: uintptr(userStream)}
			return x
		}), "%+v", c)
	}
}

// ceWaitsWithin picks the stream waits on this rank's copy-engine flags
// in [lo, hi) of the flag area, for the tests that drop them.
func ceWaitsWithin(lo, hi uintptr) func(fakeOp) bool {
	return func(o fakeOp) bool {
		off := (o.dst - wsBase) & 0xffffffff
		return o.kind == "wait" && off >= ceFlagOff+lo && off < ceFlagOff+hi
	}
}

// The model must be able to fail without each ordering the reductions
// add: the staging-reuse waits (a push overwrites a chunk the owner has not
// reduced yet) and, for AllReduce, the done waits (a rank reads its output
// before the peers' reduced pieces land).
func TestCEReduceSimulationCatchesMissingOrdering(t *testing.T) {
	ceReduceTune(t)
	cases := []struct {
		name string
		drop func(fakeOp) bool
	}{
		{"staging-reuse waits", ceWaitsWithin(ceFreeOff, ceFlagBytes)},
		{"done waits", ceWaitsWithin(ceDoneOff, ceDataOff)},
		{"landing waits", ceWaitsWithin(ceDataOff, ceLandedOff)},
		{"reduced waits", ceWaitsWithin(ceReducedOff, ceFreeOff)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, 2, Config{})
			recv, _ := allocAll(t, bes, uint64(2*(40001+5)*4+simGuard))
			mustExpose(t, tc.name, 6, func(seed uint64) []string {
				return runSim(t, bes, drvs, recv, ceReduceCalls(2), seed, tc.drop)
			})
		})
	}
}

// A peer that never runs the call leaves this rank's side streams and
// kernel waiting; Abort's rescue releases the streams (the kernel leaves
// through the abort flag, which the model does not poll).
func TestCEReduceAbortReleasesStreamWaits(t *testing.T) {
	ceReduceTune(t)
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	recv, _ := allocAll(t, bes, 1<<20)
	a := rank0AllReduce(recv[0], 4096)
	require.NoError(t, bes[0].Run(context.Background(), &a))
	var kept []fakeOp
	for _, o := range drvs[0].ops {
		if o.kind != "launch" {
			kept = append(kept, o)
		}
	}
	drvs[0].ops = kept
	recorded := drvs[0].opsOf()
	err := simulate(newSimMem(), drvs, rand.New(rand.NewPCG(1, 2)))
	require.ErrorContains(t, err, "deadlock", "rank 1 never ran the call")

	drvs[0].ops = recorded
	bes[0].Abort(fmt.Errorf("rank 1 is gone"))
	require.NoError(t, simulate(newSimMem(), drvs, rand.New(rand.NewPCG(1, 2))), "the rescue write releases every wait")
}

// ceDirectTune gives the direct mode floors of 1 KiB (AllReduce) and 256
// bytes (ReduceScatter), so that a few thousand elements already take
// several halving chunks, and leaves the staging mode as ceReduceTune
// sets it for the in-place calls, which direct mode cannot take.
func ceDirectTune(t *testing.T) {
	t.Setenv(EnvTune, "slot=16,cechunk=1K,cefloor.all_reduce=1K,cefloor.reduce_scatter=256,"+
		"ce.all_reduce=0,ce.reduce_scatter=0,ce.broadcast=0,ce.all_gather=0")
}

// newDirectBackends is 2 ranks with registered inputs and outputs.
func newDirectBackends(t *testing.T) (bes []*Backend, drvs []*fakeDriver, recv, send []uintptr) {
	t.Helper()
	bes, drvs, _ = newFakeBackends(t, 2, Config{})
	size := uint64(2*(40001+5)*4 + simGuard)
	recv, _ = allocAll(t, bes, size)
	send, _ = allocAll(t, bes, size)
	return bes, drvs, recv, send
}

// The direct mode's halving chunks, as the kernel cuts them.
func TestCEDirectPlan(t *testing.T) {
	ceDirectTune(t)
	bes, _, recv, send := newDirectBackends(t)
	a := collectives.Args{Coll: collectives.AllReduce, Send: send[0], Recv: recv[0], Count: 40001,
		Type: collectives.Int32, Op: collectives.Sum, Stream: uintptr(userStream)}
	pl, ok := bes[0].planCEReduce(&a, true)
	require.True(t, ok)
	cuts := pl.cuts
	pl.cuts = nil
	assert.Equal(t, cePlan{es: 4, piece: 20004, chunk: 256, chunks: 8, depth: 1, direct: true}, pl)
	pl.cuts = cuts
	var spans [2][][2]uint64
	for r := range 2 {
		for i := range pl.chunks {
			lo, n := pl.span(&a, r, i)
			spans[r] = append(spans[r], [2]uint64{lo, n})
		}
	}
	assert.Equal(t, [][2]uint64{{0, 10000}, {10000, 5000}, {15000, 2500}, {17500, 1252}, {18752, 624},
		{19376, 312}, {19688, 256}, {19944, 60}}, spans[0])
	// Rank 1's piece is 19997 elements: its own halving.
	assert.Equal(t, [][2]uint64{{0, 9996}, {9996, 5000}, {14996, 2500}, {17496, 1248}, {18744, 624},
		{19368, 312}, {19680, 256}, {19936, 61}}, spans[1])

	// A full piece of 16 floors halves into 5 chunks, the piece 3
	// elements shorter into 6: the call takes 6 (the plan found on the GPU
	// missing the last one).
	a.Count = 2*4096 - 3
	pl, ok = bes[0].planCEReduce(&a, true)
	require.True(t, ok)
	assert.Equal(t, uint32(6), pl.chunks)
	lo, n := pl.span(&a, 1, 5)
	assert.Equal(t, [2]uint64{4092, 1}, [2]uint64{lo, n})

	// A floor above half the piece is cut to half of it (in vectors), so
	// that the call still takes two chunks rather than one.
	a.Count = 2 * 301 // pieces of 304 and 298 elements; the floor, 256, is more than half
	pl, ok = bes[0].planCEReduce(&a, true)
	require.True(t, ok)
	assert.Equal(t, uint64(152), pl.chunk)
	assert.Equal(t, uint32(2), pl.chunks)
	for r, want := range [][2][2]uint64{{{0, 152}, {152, 152}}, {{0, 152}, {152, 146}}} {
		for i := range pl.chunks {
			lo, n := pl.span(&a, r, i)
			assert.Equal(t, want[i], [2]uint64{lo, n}, "rank %d chunk %d", r, i)
		}
	}
}

// directFlag is whether the reduction kernel rank r launched last runs
// in direct mode.
func directFlag(t *testing.T, d *fakeDriver) bool {
	t.Helper()
	var flags uint32
	found := false
	for _, o := range d.ops {
		if o.kind == "launch" && o.name == "goccl_cereduce_i32_sum" {
			flags, found = binary.LittleEndian.Uint32(o.data[offFlags:]), true
		}
	}
	require.True(t, found, "no copy-engine reduction launched")
	return flags&flagCEDirect != 0
}

// Direct mode runs out of place with both buffers registered at 2 ranks,
// and nowhere else (the staging mode or the kernels take those calls).
func TestCEDirectChoice(t *testing.T) {
	ceDirectTune(t)
	bes, drvs, recv, send := newDirectBackends(t)
	for _, tc := range []struct {
		name    string
		coll    collectives.Collective
		inPlace bool
		regSend bool
		direct  bool
	}{
		{"all_reduce out of place", collectives.AllReduce, false, true, true},
		{"reduce_scatter out of place", collectives.ReduceScatter, false, true, true},
		{"all_reduce in place", collectives.AllReduce, true, true, false},
		{"reduce_scatter in place", collectives.ReduceScatter, true, true, false},
		{"all_reduce, input not registered", collectives.AllReduce, false, false, false},
		{"reduce_scatter, input not registered", collectives.ReduceScatter, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := path(t, bes, drvs, func(r int) collectives.Args {
				a := collectives.Args{Coll: tc.coll, Send: rankAddr(sendBase, r), Recv: recv[r], Count: 4096,
					Type: collectives.Int32, Op: collectives.Sum, Stream: uintptr(userStream)}
				switch {
				case tc.inPlace && tc.coll == collectives.ReduceScatter:
					a.Send = recv[r] - uintptr(r*4096*4)
				case tc.inPlace:
					a.Send = recv[r]
				case tc.regSend:
					a.Send = send[r]
				}
				return a
			})
			require.Equal(t, "ce", p)
			for r := range 2 {
				assert.Equal(t, tc.direct, directFlag(t, drvs[r]), "rank %d", r)
			}
		})
	}
}

// ceDirectCalls mixes direct calls (out of place) with staged ones (in
// place) and the other copy-engine collectives.
func ceDirectCalls() []simCall {
	var calls []simCall
	for i, count := range []int{1, 7, 1023, 4096, 3, 8189, 40001} {
		calls = append(calls,
			simCall{coll: collectives.AllReduce, count: count},
			simCall{coll: collectives.ReduceScatter, count: count},
			simCall{coll: collectives.AllReduce, count: count + 5, inPlace: i%3 == 0},
			simCall{coll: collectives.AllGather, count: count},
			simCall{coll: collectives.ReduceScatter, count: count + 2, inPlace: i%3 == 1},
			simCall{coll: collectives.AllReduce, count: count + 1},
		)
	}
	return calls
}

// In direct mode the copies run on one stream with events only between
// them (first the wait for the peer's ready): the push stream, or at
// AllReduce the user's own (ceInline), so that one copy follows the last
// with no stream memory operation in between; every chunk's data flag
// goes out on the signal stream, and the land stream writes landed once
// per call.
func TestCEDirectStreamsHoldOnlyCopies(t *testing.T) {
	ceDirectTune(t)
	bes, drvs, recv, send := newDirectBackends(t)
	for _, coll := range []collectives.Collective{collectives.AllReduce, collectives.ReduceScatter} {
		t.Run(coll.String(), func(t *testing.T) {
			drvs[0].ops = nil
			count := 40001
			if coll == collectives.ReduceScatter {
				count /= 2
			}
			a := collectives.Args{Coll: coll, Send: send[0], Recv: recv[0], Count: count, Type: collectives.Int32,
				Op: collectives.Sum, Stream: uintptr(userStream)}
			require.NoError(t, bes[0].Run(context.Background(), &a))
			be := bes[0]
			pl, ok := be.planCEReduce(&a, true)
			require.True(t, ok)
			require.Greater(t, pl.chunks, uint32(3))
			kinds := map[cuda.Stream]map[string]int{}
			for _, o := range drvs[0].ops {
				if kinds[o.stream] == nil {
					kinds[o.stream] = map[string]int{}
				}
				kinds[o.stream][o.kind]++
			}
			chunks := int(pl.chunks)
			if coll == collectives.AllReduce {
				// Pushed on the user's stream (ceInline): from the ready
				// wait on, copies and their records only.
				assert.Empty(t, kinds[be.ce.red[redPush]], "push stream")
				var run []string
				for _, o := range drvs[0].ops {
					if o.stream == userStream && (len(run) > 0 || o.kind == "wait") {
						run = append(run, o.kind)
					}
				}
				want := []string{"wait"}
				for range chunks {
					want = append(want, "copy", "record")
				}
				require.GreaterOrEqual(t, len(run), len(want))
				assert.Equal(t, want, run[:len(want)], "user stream")
			} else {
				assert.Equal(t, map[string]int{"waitEvent": 1, "wait": 1, "copy": chunks, "record": chunks + 1}, kinds[be.ce.red[redPush]], "push")
			}
			assert.Equal(t, map[string]int{"waitEvent": 1 + chunks, "write": chunks, "record": 1}, kinds[be.ce.red[redSignal]], "signal")
			land := kinds[be.ce.red[redLand]]
			assert.Equal(t, 1, land["write"], "land: landed written once")
			assert.Equal(t, chunks, land["launch"], "land: a kernel per chunk")
			if coll == collectives.AllReduce {
				// Behind the fork, one event wait and one copy per chunk;
				// then the done flag and the join.
				assert.Equal(t, map[string]int{"waitEvent": 1 + chunks, "copy": chunks, "write": 1, "record": 1}, kinds[be.ce.red[redSpread]], "spread")
			} else {
				assert.Empty(t, kinds[be.ce.red[redSpread]], "spread")
			}
		})
	}
}

// Direct calls give the reference results under every interleaving the
// simulator tries, with the pushes on the user's stream or forked (the
// defaults, then each collective the other way).
func TestCEDirectSimulated(t *testing.T) {
	seeds := uint64(8)
	if testing.Short() {
		seeds = 3
	}
	for _, inline := range []string{"", ",ceinline.all_reduce=0,ceinline.reduce_scatter=1"} {
		t.Run("defaults"+inline, func(t *testing.T) {
			ceDirectTune(t)
			t.Setenv(EnvTune, os.Getenv(EnvTune)+inline)
			bes, drvs, recv, send := newDirectBackends(t)
			for seed := range seeds {
				require.Empty(t, runSimSend(t, bes, drvs, recv, send, ceDirectCalls(), seed, nil), "seed %d", seed)
			}
		})
	}
}

// Each ordering direct mode relies on must be able to fail the model:
// ready (a peer lands its chunk in our output before our stream reached
// the call, over our read-back of the last one), the landing waits,
// AllReduce's done, and the two events between a rank's own streams: a
// data flag behind its copy, a spread behind its chunk's kernel. The calls
// are direct only, so that no staged call's waits stand in for them.
func TestCEDirectSimulationCatchesMissingOrdering(t *testing.T) {
	ceDirectTune(t)
	var directOnly []simCall
	for _, c := range ceDirectCalls() {
		if !c.inPlace && c.coll != collectives.AllGather {
			directOnly = append(directOnly, c)
		}
	}
	for _, tc := range []struct {
		name string
		drop func(be *Backend) func(fakeOp) bool
	}{
		{"ready waits", func(*Backend) func(fakeOp) bool { return ceWaitsWithin(ceReadyOff, ceDoneOff) }},
		{"done waits", func(*Backend) func(fakeOp) bool { return ceWaitsWithin(ceDoneOff, ceDataOff) }},
		{"landing waits", func(*Backend) func(fakeOp) bool { return ceWaitsWithin(ceDataOff, ceLandedOff) }},
		{"data flag after its copy", func(be *Backend) func(fakeOp) bool { return eventWaits(be.ce.pushed) }},
		{"spread after its kernel", func(be *Backend) func(fakeOp) bool { return eventWaits(be.ce.reduced) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bes, drvs, recv, send := newDirectBackends(t)
			// Both ranks created their events in the same order: one
			// handle names the same event on each.
			require.Equal(t, bes[0].ce.pushed, bes[1].ce.pushed)
			require.Equal(t, bes[0].ce.reduced, bes[1].ce.reduced)
			drop := tc.drop(bes[0])
			mustExpose(t, tc.name, 8, func(seed uint64) []string {
				return runSimSend(t, bes, drvs, recv, send, directOnly, seed, drop)
			})
		})
	}
}

// eventWaits picks the stream waits on event e.
func eventWaits(e cuda.Event) func(fakeOp) bool {
	return func(o fakeOp) bool { return o.kind == "waitEvent" && o.event == e }
}

// Config.MaxBlocks caps the copy-engine reductions' kernels too, in both
// modes.
func TestCEReduceGridCappedByMaxBlocks(t *testing.T) {
	ceDirectTune(t)
	bes, drvs, _ := newFakeBackends(t, 2, Config{MaxBlocks: 8})
	size := uint64(2*(40001+5)*4 + simGuard)
	recv, _ := allocAll(t, bes, size)
	send, _ := allocAll(t, bes, size)
	for _, inPlace := range []bool{false, true} {
		require.Equal(t, "ce", path(t, bes, drvs, func(r int) collectives.Args {
			a := collectives.Args{Coll: collectives.AllReduce, Send: send[r], Recv: recv[r], Count: 40001,
				Type: collectives.Int32, Op: collectives.Sum, Stream: uintptr(userStream)}
			if inPlace {
				a.Send = a.Recv
			}
			return a
		}))
		for r := range 2 {
			assert.Equal(t, !inPlace, directFlag(t, drvs[r]), "rank %d in place %v", r, inPlace)
			for _, l := range drvs[r].launches {
				assert.Equal(t, uint32(8), l.cfg.Grid.X, "rank %d in place %v", r, inPlace)
			}
		}
	}
}

// A staging call that finds the counter 2^30 or more past the last
// refresh lowers every reduced and free flag of its rank to seq-1 on the
// user's stream before the fork, so that no flag left behind by the calls
// in between can pass a wait early; the calls after it do not repeat it.
func TestCEStagingRefreshesItsFlags(t *testing.T) {
	ceReduceTune(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, n, Config{Algo: "ce"})
			be, drv := bes[0], drvs[0]
			// The flags refreshed, as ceRefresh names them.
			want := map[uintptr]bool{}
			for k := range ceSlots {
				want[be.ce.local+ceReducedOff+4*uintptr(k)] = true
				for r := 1; r < n; r++ {
					want[be.ce.local+ceFreeOff+4*uintptr(r*ceSlots+k)] = true
				}
			}
			// A ReduceScatter of unregistered buffers: the staging mode.
			call := func() (seq uint32, refreshed int) {
				seq = be.ce.seq + 1
				drv.ops = nil
				a := collectives.Args{Coll: collectives.ReduceScatter, Send: rankAddr(sendBase, 0), Recv: rankAddr(recvBase, 0),
					Count: 4096, Type: collectives.Int32, Op: collectives.Sum, Stream: uintptr(userStream)}
				require.NoError(t, be.Run(context.Background(), &a))
				forked := false
				for _, o := range drv.ops {
					if o.kind == "record" && o.event == be.ce.fork {
						forked = true
					}
					if o.kind == "write" && want[o.dst] {
						assert.False(t, forked, "refresh after the fork")
						assert.Equal(t, userStream, o.stream)
						assert.Equal(t, seq-1, o.val)
						refreshed++
					}
				}
				return seq, refreshed
			}
			for _, tc := range []struct {
				name      string
				refreshed uint32 // set before the call
				seq       uint32 // the call's first flag value
				writes    int
			}{
				{"fresh", 0, 1, 0},
				{"just short", 5, 5 + ceRefreshEvery - 1, 0},
				{"due", 5, 5 + ceRefreshEvery, len(want)},
				{"due across the wrap", 1 << 31, 1<<31 + ceRefreshEvery + 7, len(want)},
			} {
				be.ce.refreshed, be.ce.seq = tc.refreshed, tc.seq-1
				seq, got := call()
				require.Equal(t, tc.seq, seq, tc.name)
				assert.Equal(t, tc.writes, got, tc.name)
				if tc.writes > 0 {
					assert.Equal(t, seq, be.ce.refreshed, tc.name)
					_, again := call()
					assert.Zero(t, again, "%s: the next call", tc.name)
				}
			}
		})
	}
}
