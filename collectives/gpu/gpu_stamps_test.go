package gpu

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/recorder"
)

// The GPU timestamps on a GPU: ranks share GPU 0 (one process, one
// context, so their kernels run side by side rather than time-sliced).

const stampSlots = 64

func stampRig(t *testing.T, n, stamps int, capBytes uint64) *rig {
	return newRigWith(t, n, capBytes, func(int) Config { return Config{Device: 0, Transport: "uva", Stamps: stamps} })
}

// stampTol is how far the kernels' timestamps may sit from CUDA events
// recorded around the same calls: the launch between an event and the
// kernel it precedes, and the events' own resolution (0.5 us).
const stampTol = 5 * time.Microsecond

func (r *rig) allReduce(t *testing.T, rank int, count int, seq uint64) {
	t.Helper()
	a := collectives.Args{Coll: collectives.AllReduce, Send: uintptr(r.send[rank]), Recv: uintptr(r.recv[rank]), Count: count,
		Type: collectives.Float32, Op: collectives.Sum, Stream: uintptr(r.streams[rank]), Seq: seq}
	require.NoError(t, r.bes[rank].Run(context.Background(), &a))
}

func (r *rig) event(t *testing.T, rank int) cuda.Event {
	t.Helper()
	ctx := r.bes[rank].ctx
	e, err := r.drv.EventCreate(ctx, true)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.drv.EventDestroy(ctx, e) })
	require.NoError(t, r.drv.EventRecord(ctx, e, r.streams[rank]))
	return e
}

func elapsed(t *testing.T, drv cuda.Driver, a, b cuda.Event) time.Duration {
	t.Helper()
	ms, err := drv.EventElapsed(a, b)
	require.NoError(t, err)
	return time.Duration(float64(ms) * 1e6)
}

// TestGPUStampsMatchEvents: every call's timestamps are there, start
// before end, each call after the one before it on the stream, near the
// wall clock, and inside the CUDA events recorded around it. Events and
// the kernels' clock share no origin, so the check is that one shift of
// the stamps onto the events' time line puts every call's [start, end]
// between its two events, within stampTol (the clocks' granularity);
// events also time the launch around a kernel, so a duration by the
// events may be longer than by the stamps, never shorter.
func TestGPUStampsMatchEvents(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			const calls, count = 24, 1 << 20 // 4 MiB: microseconds, above the clock's step
			r := stampRig(t, n, stampSlots, 4*count)
			before := make([][]cuda.Event, n)
			after := make([][]cuda.Event, n)
			for i := range calls {
				for rank := range n {
					before[rank] = append(before[rank], r.event(t, rank))
					r.allReduce(t, rank, count, uint64(i+1))
					after[rank] = append(after[rank], r.event(t, rank))
				}
			}
			r.sync(t)
			for rank, be := range r.bes {
				var prevEnd int64
				s0, _, ok := be.CallTimes(1)
				require.True(t, ok, "rank %d: call 1 timed", rank)
				assert.Less(t, math.Abs(float64(time.Now().UnixNano()-s0)), float64(10*time.Second),
					"rank %d: the GPU's clock follows the wall clock", rank)
				// shift is when call 1 started on the events' line (from
				// before[0]); every call bounds it from both sides.
				lo, hi := time.Duration(math.MinInt64), time.Duration(math.MaxInt64)
				for i := range calls {
					s, f, ok := be.CallTimes(uint64(i + 1))
					require.True(t, ok, "rank %d: call %d timed", rank, i+1)
					require.Less(t, s, f, "rank %d call %d: start before end", rank, i+1)
					require.GreaterOrEqual(t, s, prevEnd, "rank %d call %d: after call %d", rank, i+1, i)
					prevEnd = f
					evStart := elapsed(t, r.drv, before[rank][0], before[rank][i])
					evEnd := elapsed(t, r.drv, before[rank][0], after[rank][i])
					lo = max(lo, evStart-time.Duration(s-s0))
					hi = min(hi, evEnd-time.Duration(f-s0))
					assert.LessOrEqual(t, time.Duration(f-s), evEnd-evStart+stampTol,
						"rank %d call %d: longer by the stamps than between its events", rank, i+1)
				}
				assert.LessOrEqual(t, lo, hi+stampTol,
					"rank %d: no shift puts every call between its events (it would need to be at least %v and at most %v)", rank, lo, hi)
				t.Logf("rank %d of %d: call 1 started %v to %v after its first event", rank, n, lo, hi)
			}
		})
	}
}

// TestGPUStampsGraphReplays: a captured AllReduce keeps its Stamp; each
// replay rewrites it with later times, and a ring resolving after each
// replay counts every one and shows the last.
func TestGPUStampsGraphReplays(t *testing.T) {
	const n, count, seq, replays = 2, 1 << 16, 7, 5
	r := stampRig(t, n, stampSlots, 4*count)
	execs := make([]cuda.GraphExec, n)
	rings := make([]*recorder.Ring, n)
	for rank, be := range r.bes {
		require.NoError(t, r.drv.StreamBeginCapture(be.ctx, r.streams[rank], cuda.CaptureThreadLocal))
		rings[rank] = recorder.New(recorder.Config{Size: stampSlots, Async: true, Meta: recorder.Meta{Rank: rank, Size: n}})
		a := collectives.Args{Coll: collectives.AllReduce, Send: uintptr(r.send[rank]), Recv: uintptr(r.recv[rank]), Count: count,
			Type: collectives.Float32, Op: collectives.Sum, Stream: uintptr(r.streams[rank]), Seq: seq}
		rings[rank].End(rings[rank].Begin(&a), nil)
		require.NoError(t, be.Run(context.Background(), &a))
		execs[rank] = r.endCapture(t, rank)
		_, _, ok := be.CallTimes(seq)
		require.False(t, ok, "rank %d: capture runs nothing", rank)
	}
	prev := make([]int64, n)
	for k := 1; k <= replays; k++ {
		r.launchGraphs(t, execs)
		r.sync(t)
		for rank, be := range r.bes {
			s, f, ok := be.CallTimes(seq)
			require.True(t, ok, "rank %d replay %d", rank, k)
			require.Less(t, s, f, "rank %d replay %d", rank, k)
			require.Greater(t, s, prev[rank], "rank %d replay %d: later than replay %d", rank, k, k-1)
			prev[rank] = f
			rings[rank].Resolve(be)
			c := rings[rank].Snapshot().Calls[0]
			assert.Equal(t, k, c.Runs, "rank %d replay %d", rank, k)
			assert.InDelta(t, s, c.Start, 1000, "rank %d replay %d: the record shows the last replay", rank, k)
			assert.InDelta(t, f, c.Finish, 1000, "rank %d replay %d", rank, k)
		}
	}
}

// TestGPUStampCost (-gpu.perf): the time per 8-byte AllReduce, back to
// back on a stream, with the timestamps on and off, interleaved in one
// run; the median of many rounds.
func TestGPUStampCost(t *testing.T) {
	if !*gpuPerf {
		t.Skip("timing run: -gpu.perf")
	}
	const rounds, per = 41, 500
	for _, n := range []int{1, 2} {
		rigs := [2]*rig{stampRig(t, n, 0, 4096), stampRig(t, n, recorder.DefaultSize, 4096)}
		var seq [2]uint64
		var times [2][]time.Duration
		for i := range rounds {
			for j := range 2 {
				k := (i + j) % 2 // alternate which goes first
				rg := rigs[k]
				t0 := rg.event(t, 0)
				for range per {
					seq[k]++
					for rank := range n {
						rg.allReduce(t, rank, 2, seq[k])
					}
				}
				t1 := rg.event(t, 0)
				rg.sync(t)
				if i > 0 { // the first round warms up
					times[k] = append(times[k], elapsed(t, rg.drv, t0, t1)/per)
				}
			}
		}
		med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
		off, on := med(times[0]), med(times[1])
		_, f, ok := rigs[1].bes[0].CallTimes(seq[1])
		require.True(t, ok, "the last call with timestamps on was timed")
		s, _, _ := rigs[1].bes[0].CallTimes(seq[1])
		fmt.Printf("stampcost ranks=%d calls=%dx%d off_us=%.3f on_us=%.3f added_us=%.3f last_kernel_us=%.3f\n", n, rounds-1, per,
			float64(off)/1e3, float64(on)/1e3, float64(on-off)/1e3, float64(f-s)/1e3)
	}
}
