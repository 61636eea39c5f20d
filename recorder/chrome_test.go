package recorder

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// jobRecords records calls of two ranks, each on two streams, with the
// ranks skewed, plus a call still running on rank 1 and an only-enqueued
// one on an asynchronous rank 2.
func jobRecords(t *testing.T) []*Record {
	t.Helper()
	var recs []*Record
	for r := 0; r < 2; r++ {
		ring := New(Config{Size: 64, Meta: Meta{Comm: "c1", Rank: r, Size: 3}})
		for i := 0; i < 10; i++ {
			a := collectives.Args{Coll: collectives.AllReduce, Count: 1000 * (i + 1), Type: collectives.Float32, Stream: uintptr(i % 2), Seq: uint64(i + 1)}
			id := ring.Begin(&a)
			for k := 0; k < 1000*(r+1); k++ { // spend time so that slices have length
				_ = ring.Ticks()
			}
			ring.End(id, nil)
		}
		if r == 1 {
			ring.Begin(&collectives.Args{Coll: collectives.Broadcast, Count: 8, Type: collectives.Int8, Seq: 11})
		}
		rec := ring.Snapshot()
		rec.Written = rec.Calls[len(rec.Calls)-1].Start + 1000
		recs = append(recs, &rec)
	}
	async := New(Config{Size: 4, Async: true, Meta: Meta{Comm: "c1", Rank: 2, Size: 3}})
	async.End(async.Begin(&collectives.Args{Coll: collectives.AllReduce, Count: 1000, Type: collectives.Float32, Seq: 1}), nil)
	rec := async.Snapshot()
	// Written with rank 1's: left to WriteFile's clock, the wait told
	// as of the newest record would be as long as the machine took to
	// get from rank 1's Broadcast to the write (over 50 ms under load).
	rec.Written = recs[1].Written
	return append(recs, &rec)
}

// TestChromeTrace writes a trace, reads it back as plain JSON and checks
// it against the trace event format: every event's fields, metadata naming
// each process and thread, slices on a track in time order and not
// overlapping (calls on a stream nest in none), and times from 0.
func TestChromeTrace(t *testing.T) {
	recs := jobRecords(t)
	var buf bytes.Buffer
	require.NoError(t, WriteChromeTrace(&buf, recs))
	var raw struct {
		TraceEvents []map[string]any `json:"traceEvents"`
		Unit        string           `json:"displayTimeUnit"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &raw))
	assert.Equal(t, "ns", raw.Unit)
	type track struct{ pid, tid int }
	procNames, threadNames := map[int]string{}, map[track]string{}
	slices := map[track][][2]float64{}
	seqs := map[track][]float64{}
	instants := 0
	minTS := -1.0
	for _, ev := range raw.TraceEvents {
		for _, f := range []string{"name", "ph", "pid"} {
			require.Contains(t, ev, f, "event %v", ev)
		}
		pid := int(ev["pid"].(float64))
		tid := 0
		if v, ok := ev["tid"]; ok {
			tid = int(v.(float64))
		}
		switch ev["ph"] {
		case "M":
			args := ev["args"].(map[string]any)
			switch ev["name"] {
			case "process_name":
				procNames[pid] = args["name"].(string)
			case "thread_name":
				threadNames[track{pid, tid}] = args["name"].(string)
			}
		case "X":
			ts, dur := ev["ts"].(float64), 0.0
			if v, ok := ev["dur"]; ok {
				dur = v.(float64)
			}
			require.GreaterOrEqual(t, ts, 0.0)
			require.GreaterOrEqual(t, dur, 0.0)
			if minTS < 0 || ts < minTS {
				minTS = ts
			}
			k := track{pid, tid}
			slices[k] = append(slices[k], [2]float64{ts, ts + dur})
			seqs[k] = append(seqs[k], ev["args"].(map[string]any)["seq"].(float64))
			assert.Contains(t, ev["name"], "#")
			assert.NotEmpty(t, ev["cat"])
		case "i":
			instants++
			assert.Equal(t, "t", ev["s"])
		default:
			t.Fatalf("unexpected phase %v", ev["ph"])
		}
	}
	assert.Equal(t, map[int]string{0: "rank 0", 1: "rank 1", 2: "rank 2"}, procNames)
	assert.Equal(t, map[track]string{{0, 0}: "stream 0x0", {0, 1}: "stream 0x1", {1, 0}: "stream 0x0", {1, 1}: "stream 0x1", {2, 0}: "stream 0x0"}, threadNames)
	assert.Equal(t, 1, instants, "the enqueued call")
	assert.Zero(t, minTS, "times count from the earliest call")
	total := 0
	for k, ss := range slices {
		require.Contains(t, threadNames, k)
		assert.True(t, sort.SliceIsSorted(ss, func(i, j int) bool { return ss[i][0] < ss[j][0] }), "track %v in time order", k)
		assert.True(t, sort.Float64sAreSorted(seqs[k]), "track %v in call order", k)
		for i := 1; i < len(ss); i++ {
			assert.GreaterOrEqual(t, ss[i][0], ss[i-1][1], "track %v: slice %d starts inside %d", k, i, i-1)
		}
		total += len(ss)
	}
	assert.Equal(t, 21, total, "ten calls per rank and rank 1's running one")
}

func TestTimelinePNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "timeline.png")
	require.NoError(t, WriteTimeline(path, jobRecords(t)))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	b := img.Bounds()
	assert.Greater(t, b.Dx(), 500)
	colors := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colors[r>>8<<16|g>>8<<8|bl>>8] = true
		}
	}
	assert.Greater(t, len(colors), 3, "bars drawn in colour")
	require.Error(t, WriteTimeline(path, nil), "nothing to draw")
}

func TestFilesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	recs := jobRecords(t)
	for _, r := range recs {
		r.Reason = "abort"
		_, err := WriteFile(dir, r)
		require.NoError(t, err)
	}
	all, err := ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, all, 1)
	got := all["c1"]
	require.Len(t, got, 3)
	for r := range got {
		require.NotNil(t, got[r])
		assert.Equal(t, recs[r].Calls, got[r].Calls)
	}
	lines, err := Summaries(dir, time.Time{}, jobNow(recs))
	require.NoError(t, err)
	require.Len(t, lines, 1)
	assert.Equal(t, "ranks 0 and 2 have not entered Broadcast #11 (int8, 8 B, root 0); rank 1 waits in it; "+
		"rank 0's last call: AllReduce #10, finished; rank 2's last call: AllReduce #1, enqueued", lines[0])
	_, err = ReadFile(filepath.Join(dir, "missing.json"))
	require.Error(t, err)
}

// ReadRecords takes a rank's file and what goccl dump prints for a process
// of several communicators: records one after the other.
func TestReadRecords(t *testing.T) {
	dir := t.TempDir()
	a, b := rec(0, call("AllReduce", 1, "finished")), rec(1, call("AllReduce", 1, "finished"))
	ja, err := a.JSON()
	require.NoError(t, err)
	jb, err := b.JSON()
	require.NoError(t, err)
	for _, tc := range []struct {
		name, text string
		ranks      []int  // of the records read
		err        string // "" for none
	}{
		{"one", string(ja), []int{0}, ""},
		{"two after each other", string(ja) + string(jb), []int{0, 1}, ""},
		{"empty", "", nil, "no record"},
		{"not a record", "{}", nil, "record 1: version 0, want 1 (not a flight record?)"},
		{"truncated second", string(ja) + string(jb[:len(jb)/2]), nil, "record 2: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			require.NoError(t, os.WriteFile(path, []byte(tc.text), 0o600))
			recs, err := ReadRecords(path)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			var ranks []int
			for _, r := range recs {
				ranks = append(ranks, r.Rank)
				assert.Equal(t, a.Calls, r.Calls)
			}
			assert.Equal(t, tc.ranks, ranks)
		})
	}
	_, err = ReadRecords(filepath.Join(dir, "missing.json"))
	assert.Error(t, err)
}

// jobNow is when rank 1's last call started.
func jobNow(recs []*Record) time.Time { return time.Unix(0, recs[1].Calls[len(recs[1].Calls)-1].Start) }
