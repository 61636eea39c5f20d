package recorder

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

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
	// A group's Sends and Recvs and their peers (ranks below 64; Far...
	// says some peer is beyond).
	Sends     int    `json:"sends,omitempty"`
	Recvs     int    `json:"recvs,omitempty"`
	SendPeers []int  `json:"send_peers,omitempty"`
	RecvPeers []int  `json:"recv_peers,omitempty"`
	FarSends  bool   `json:"far_send_peers,omitempty"`
	FarRecvs  bool   `json:"far_recv_peers,omitempty"`
	Stream    string `json:"stream"` // the stream's handle, hex
	// Algo and Transport are how the backend carried the call ("" where
	// it did not say): oneshot, twoshot, ll, ce, nvls; uva, ipc, vmm, nvls, shm.
	Algo      string `json:"algo,omitempty"`
	Transport string `json:"transport,omitempty"`
	State     string `json:"state"`       // enqueued, started, finished, failed
	Slot      int    `json:"device_slot"` // where a device writes the call's timestamps; -1 none
	// Runs counts the device runs of the call the record saw (more than 1:
	// a captured graph's replays, each rewriting the times, which are
	// the last replay's).
	Runs   int   `json:"device_runs,omitempty"`
	Enq    int64 `json:"enqueue_ns"` // handed to the backend
	Start  int64 `json:"start_ns"`   // started (on the device, for GPUs)
	Finish int64 `json:"finish_ns"`  // finished
}

func (e *entry) export(w wallConv, slot int) Call {
	c := Call{ID: e.id, Seq: e.seq, SeqLast: e.last, Call: e.kind.String(), Count: e.count, Bytes: e.bytes, Peer: int(e.peer),
		Ops: int(e.ops), Stream: "0x" + strconv.FormatUint(uint64(e.stream), 16), State: e.state.String(), Slot: slot,
		Enq: w.at(e.enq), Start: w.at(e.beg), Finish: w.at(e.fin), Runs: int(e.runs)}
	if e.runs > 0 {
		c.Start, c.Finish = e.beg, e.fin // the device's own wall-clock times
	}
	if e.kind != Group || e.sends+e.recvs > 0 {
		c.Type = typeName(collectives.DataType(e.dtype))
	}
	if e.kind == Group {
		c.Sends, c.Recvs, c.FarSends, c.FarRecvs = int(e.sends), int(e.recvs), e.far&1 != 0, e.far&2 != 0
		c.SendPeers, c.RecvPeers = maskRanks(e.sendTo), maskRanks(e.recvFrom)
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
	case Send:
		return fmt.Sprintf("%s to rank %d (%s, %s)", s, c.Peer, c.Type, FormatBytes(c.Count*int64(typeSize(c.Type))))
	case Recv:
		return fmt.Sprintf("%s from rank %d (%s, %s)", s, c.Peer, c.Type, FormatBytes(c.Count*int64(typeSize(c.Type))))
	case Group:
		d = fmt.Sprintf("%d ops", c.Ops)
		var pp []string
		if c.Sends > 0 {
			pp = append(pp, fmt.Sprintf("%d %s to %s", c.Sends, plural(c.Sends, "Send", "Sends"), peerSet(c.SendPeers, c.FarSends)))
		}
		if c.Recvs > 0 {
			pp = append(pp, fmt.Sprintf("%d %s from %s", c.Recvs, plural(c.Recvs, "Recv", "Recvs"), peerSet(c.RecvPeers, c.FarRecvs)))
		}
		if len(pp) > 0 {
			d += ": " + strings.Join(pp, ", ") + "; " + c.Type
		}
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

// Peers are the ranks the call waits for: its peer, or a group's Sends'
// and Recvs' (below rank 64).
func (c *Call) Peers() []int {
	switch c.Kind() {
	case Send, Recv:
		return []int{c.Peer}
	case Group:
		return maskRanks(maskOf(c.SendPeers) | maskOf(c.RecvPeers))
	}
	return nil
}

func peerSet(rs []int, far bool) string {
	switch {
	case len(rs) == 0:
		return "ranks beyond 63"
	case far:
		return ranks(rs) + " and ranks beyond 63"
	}
	return ranks(rs)
}

func maskRanks(m uint64) []int {
	var rs []int
	for r := 0; m != 0; r, m = r+1, m>>1 {
		if m&1 != 0 {
			rs = append(rs, r)
		}
	}
	return rs
}

func maskOf(rs []int) uint64 {
	var m uint64
	for _, r := range rs {
		if r >= 0 && r < 64 {
			m |= 1 << uint(r)
		}
	}
	return m
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
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

// P2PWait returns the unnumbered point-to-point call (a Send, Recv or
// an application's group of them) the rank is in, if its last call is one.
func (r *Record) P2PWait() (Call, bool) {
	if n := len(r.Calls); n > 0 {
		if c := r.Calls[n-1]; c.Seq == 0 && c.StateOf().InProgress() {
			return c, true
		}
	}
	return Call{}, false
}

// LastAny returns the last call, numbered or not, and whether there is one.
func (r *Record) LastAny() (Call, bool) {
	if n := len(r.Calls); n > 0 {
		return r.Calls[n-1], true
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
