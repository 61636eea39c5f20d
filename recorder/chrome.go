package recorder

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
)

// Chrome's trace event format (the JSON object form), which Perfetto and
// chrome://tracing open: a process per rank, a thread per stream, a
// complete event ("X") per call that started, an instant event ("i") per
// call only enqueued. Times are microseconds from the earliest call of
// all the records, so that skew between ranks shows at a glance.

// TraceEvent is one event of the format.
type TraceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	S    string         `json:"s,omitempty"` // an instant event's scope
	Args map[string]any `json:"args,omitempty"`
}

// Trace is the file's top-level object.
type Trace struct {
	TraceEvents     []TraceEvent `json:"traceEvents"`
	DisplayTimeUnit string       `json:"displayTimeUnit"`
}

// Track is one rank's stream in a timeline.
type Track struct {
	PID, TID int
	Process  string // "rank 3", or "comm <id> rank 3" for several communicators
	Stream   string // the stream's handle, hex
}

// Name labels the track.
func (t Track) Name() string { return t.Process + " stream " + t.Stream }

// Slice is one call on a track, in nanoseconds since the trace's origin.
type Slice struct {
	Track      int // index into the tracks
	Start, End int64
	Kind       Kind
	Name       string
	Call       *Call
}

// Timeline lays records out as tracks and slices. Calls that never
// started get Start == End (their enqueue time); calls still in progress
// end where their record was written.
func Timeline(recs []*Record) (tracks []Track, slices []Slice, origin int64) {
	recs = append([]*Record(nil), recs...)
	sort.SliceStable(recs, func(i, j int) bool {
		if recs[i].Comm != recs[j].Comm {
			return recs[i].Comm < recs[j].Comm
		}
		return recs[i].Rank < recs[j].Rank
	})
	comms := map[string]int{}
	for _, r := range recs {
		if _, ok := comms[r.Comm]; !ok {
			comms[r.Comm] = len(comms)
		}
		for _, c := range r.Calls {
			for _, t := range []int64{c.Enq, c.Start} {
				if t != 0 && (origin == 0 || t < origin) {
					origin = t
				}
			}
		}
	}
	type key struct {
		pid    int
		stream string
	}
	index := map[key]int{}
	for _, r := range recs {
		pid := r.Rank
		if len(comms) > 1 {
			pid = comms[r.Comm]*1000 + r.Rank
		}
		for i := range r.Calls {
			c := &r.Calls[i]
			k := key{pid, c.Stream}
			ti, ok := index[k]
			if !ok {
				ti = len(tracks)
				index[k] = ti
				proc := fmt.Sprintf("rank %d", r.Rank)
				if len(comms) > 1 {
					proc = fmt.Sprintf("comm %s rank %d", r.Comm, r.Rank)
				}
				tracks = append(tracks, Track{PID: pid, TID: tracksOf(tracks, pid), Process: proc, Stream: c.Stream})
			}
			s := Slice{Track: ti, Kind: c.Kind(), Name: c.Describe(), Call: c}
			switch {
			case c.Start != 0:
				s.Start, s.End = c.Start, c.Finish
				if s.End == 0 {
					s.End = max(r.Written, c.Start)
				}
			case c.Enq != 0:
				s.Start, s.End = c.Enq, c.Enq
			default:
				continue
			}
			s.Start -= origin
			s.End -= origin
			slices = append(slices, s)
		}
	}
	return tracks, slices, origin
}

// tracksOf counts pid's tracks.
func tracksOf(tracks []Track, pid int) int {
	n := 0
	for _, t := range tracks {
		if t.PID == pid {
			n++
		}
	}
	return n
}

// ChromeTrace converts records into a trace.
func ChromeTrace(recs []*Record) Trace {
	tracks, slices, _ := Timeline(recs)
	tr := Trace{DisplayTimeUnit: "ns", TraceEvents: []TraceEvent{}}
	named := map[int]bool{}
	for _, t := range tracks {
		if !named[t.PID] {
			named[t.PID] = true
			tr.TraceEvents = append(tr.TraceEvents, TraceEvent{Name: "process_name", Ph: "M", PID: t.PID, Args: map[string]any{"name": t.Process}},
				TraceEvent{Name: "process_sort_index", Ph: "M", PID: t.PID, Args: map[string]any{"sort_index": t.PID}})
		}
		tr.TraceEvents = append(tr.TraceEvents, TraceEvent{Name: "thread_name", Ph: "M", PID: t.PID, TID: t.TID,
			Args: map[string]any{"name": "stream " + t.Stream}})
	}
	for _, s := range slices {
		t := tracks[s.Track]
		c := s.Call
		args := map[string]any{"seq": c.Seq, "state": c.State, "count": c.Count, "bytes": c.Bytes}
		if c.Type != "" {
			args["dtype"] = c.Type
		}
		if c.Peer >= 0 {
			args["peer"] = c.Peer
		}
		ev := TraceEvent{Name: s.Name, Cat: s.Kind.String(), Ph: "X", TS: float64(s.Start) / 1e3, Dur: float64(s.End-s.Start) / 1e3,
			PID: t.PID, TID: t.TID, Args: args}
		if c.Start == 0 {
			ev.Ph, ev.Dur, ev.S = "i", 0, "t"
		}
		tr.TraceEvents = append(tr.TraceEvents, ev)
	}
	return tr
}

// WriteChromeTrace writes records as a trace to w.
func WriteChromeTrace(w io.Writer, recs []*Record) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(ChromeTrace(recs)); err != nil {
		return fmt.Errorf("recorder: trace: %w", err)
	}
	return nil
}
