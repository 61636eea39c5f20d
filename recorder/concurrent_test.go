package recorder

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// TestRingReadersWhileRecording: readers (Snapshot, SnapshotLast, Stats)
// running alongside the writer always see consecutive calls, each with
// the outcome it was given (every call but the last one seen is over,
// the last started or over), and the statistics count every finished
// call once. Run with -race: End publishes without the ring's lock.
func TestRingReadersWhileRecording(t *testing.T) {
	const size, calls = 8, 20000
	r := testRing(size, false)
	fails := func(id uint64) bool { return id%7 == 0 }
	paths := []collectives.Path{{Algo: collectives.OneShot, Transport: "shm"}, {Algo: collectives.TwoShot, Transport: "shm"}}
	var done atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Value
	check := func(rec Record) {
		for i, c := range rec.Calls {
			if i > 0 && c.ID != rec.Calls[i-1].ID+1 {
				bad.Store("ids not consecutive")
			}
			if c.Seq != c.ID {
				bad.Store("seq is not the call's")
			}
			last := i == len(rec.Calls)-1
			want := "finished"
			if fails(c.ID) {
				want = "failed"
			}
			if c.State != want && (!last || c.State != "started") {
				bad.Store("call in state " + c.State + ", want " + want)
			}
			if c.State != "started" && c.Algo != string(paths[(c.ID/100)%2].Algo) {
				bad.Store("call with algo " + c.Algo)
			}
		}
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() {
				check(r.Snapshot())
				check(r.SnapshotLast(3))
				_ = r.Stats()
			}
		}()
	}
	for id := uint64(1); id <= calls; id++ {
		a := collectives.Args{Coll: collectives.AllReduce, Count: 2, Type: collectives.Float32, Seq: id}
		got := r.Begin(&a)
		require.Equal(t, id, got)
		var err error
		if fails(id) {
			err = errors.New("boom")
		}
		r.EndPath(got, err, paths[(id/100)%2])
	}
	done.Store(true)
	wg.Wait()
	if msg := bad.Load(); msg != nil {
		t.Fatal(msg)
	}
	rec := r.Snapshot()
	require.Len(t, rec.Calls, size)
	check(rec)
	assert.Equal(t, uint64(calls), rec.Calls[size-1].ID)
	var n uint64
	for _, st := range r.Stats() {
		n += st.Count
	}
	assert.Equal(t, uint64(calls-calls/7), n, "finished calls counted")
}
