package recorder

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/goccl/goccl/collectives"
)

const recordVersion = 1

// Record is a copy of one rank's ring: what it says about its
// communicator, and its calls, oldest first. It is what the JSON files
// hold.
type Record struct {
	Version int `json:"version"`
	Meta
	// Reason says why it was written: "dump" (on demand), "abort" (the
	// communicator aborted), "error" (a call failed for ranks in
	// different calls; the communicator lives on).
	Reason  string `json:"reason,omitempty"`
	Error   string `json:"error,omitempty"` // the abort's cause
	Written int64  `json:"written_ns,omitempty"`
	Dropped uint64 `json:"dropped"` // calls older than the ring holds
	Calls   []Call `json:"calls"`
}

// Call is one recorded call. Times are wall-clock nanoseconds since the
// Unix epoch, 0 when unknown.
type Call struct {
	ID  uint64 `json:"id"`  // the ring's serial number of the call
	Seq uint64 `json:"seq"` // the communicator's call number; 0 for unnumbered point-to-point
	// SeqLast is a group's last collective's number when it holds several
	// (the group is calls Seq..SeqLast).
	SeqLast uint64 `json:"seq_last,omitempty"`
	Call    string `json:"call"`
	Type    string `json:"dtype,omitempty"`
	Op      string `json:"op,omitempty"`
	Count   int64  `json:"count"`
	Bytes   int64  `json:"bytes"`         // nccl-tests' size of the call
	Peer    int    `json:"peer"`          // peer or root; -1 none
	Ops     int    `json:"ops,omitempty"` // a group's operations
	Stream  string `json:"stream"`        // the stream's handle, hex
	State   string `json:"state"`         // enqueued, started, finished, failed
	Slot    int    `json:"device_slot"`   // where a device writes the call's timestamps
	Enq     int64  `json:"enqueue_ns"`    // handed to the backend
	Start   int64  `json:"start_ns"`      // started (on the device, for GPUs)
	Finish  int64  `json:"finish_ns"`     // finished
}

func (e *entry) export(w wallConv, slot int) Call {
	c := Call{ID: e.id, Seq: e.seq, SeqLast: e.last, Call: e.kind.String(), Count: e.count, Bytes: e.bytes, Peer: int(e.peer),
		Ops: int(e.ops), Stream: "0x" + strconv.FormatUint(uint64(e.stream), 16), State: e.state.String(), Slot: slot,
		Enq: w.at(e.enq), Start: w.at(e.beg), Finish: w.at(e.fin)}
	if e.kind != Group {
		c.Type = typeName(collectives.DataType(e.dtype))
	}
	if e.kind == AllReduce || e.kind == Reduce || e.kind == ReduceScatter {
		c.Op = collectives.Op(e.op).String()
	}
	return c
}

// Kind is the call's kind (Group for a name it does not know).
func (c *Call) Kind() Kind {
	k, ok := ParseKind(c.Call)
	if !ok {
		return Group
	}
	return k
}

// StateOf is the call's state.
func (c *Call) StateOf() State { return parseState(c.State) }

// Describe names the call for people: "AllReduce #1042 (float32, 4 MiB)".
func (c *Call) Describe() string {
	s := c.Call
	if c.Seq > 0 {
		s += " #" + strconv.FormatUint(c.Seq, 10)
	}
	if c.SeqLast > c.Seq {
		s += "-" + strconv.FormatUint(c.SeqLast, 10)
	}
	k := c.Kind()
	var d string
	switch k {
	case Group:
		d = fmt.Sprintf("%d ops", c.Ops)
	default:
		d = c.Type + ", " + FormatBytes(c.Count*int64(typeSize(c.Type)))
	}
	switch k {
	case Broadcast, Reduce, Gather, Scatter:
		d += fmt.Sprintf(", root %d", c.Peer)
	case Send:
		d += fmt.Sprintf(", to rank %d", c.Peer)
	case Recv:
		d += fmt.Sprintf(", from rank %d", c.Peer)
	}
	return s + " (" + d + ")"
}

func typeSize(name string) int {
	for i, n := range typeNames {
		if n == name {
			return collectives.DataType(i).Size()
		}
	}
	return 0
}

// FormatBytes writes n as people read sizes: "8 B", "4 KiB", "1.5 MiB".
func FormatBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	f, u := float64(n), -1
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %ciB", int64(f), units[u])
	}
	return fmt.Sprintf("%.1f %ciB", f, units[u])
}

// JSON is the record as the files hold it, indented for people.
func (r Record) JSON() ([]byte, error) {
	type plain Record
	return json.MarshalIndent(plain(r), "", " ")
}

// Last returns the last numbered call (Seq > 0) and whether there is one.
func (r *Record) Last() (Call, bool) {
	for i := len(r.Calls) - 1; i >= 0; i-- {
		if r.Calls[i].Seq > 0 {
			return r.Calls[i], true
		}
	}
	return Call{}, false
}

// Find returns the numbered call seq (or the group holding it) and
// whether the record holds it.
func (r *Record) Find(seq uint64) (Call, bool) {
	for i := len(r.Calls) - 1; i >= 0; i-- {
		if c := &r.Calls[i]; c.Seq == seq || (c.Seq < seq && seq <= c.SeqLast) {
			return r.Calls[i], true
		}
	}
	return Call{}, false
}
