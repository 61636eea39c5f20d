package recorder

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// rec builds a rank's record from calls "kind seq state".
func rec(rank int, calls ...Call) *Record {
	r := &Record{Version: recordVersion, Meta: Meta{Comm: "c", Rank: rank, Size: 4}}
	for i := range calls {
		calls[i].ID = uint64(i + 1)
	}
	r.Calls = calls
	return r
}

var t0 = time.Unix(1000, 0)

func call(kind string, seq uint64, state string) Call {
	return Call{Seq: seq, Call: kind, Type: "float32", Count: 1 << 20, Peer: -1, State: state,
		Enq: t0.UnixNano(), Start: t0.UnixNano(), Finish: t0.UnixNano()}
}

func TestExplain(t *testing.T) {
	now := t0.Add(30200 * time.Millisecond)
	bc := func(seq uint64, st string) Call { c := call("Broadcast", seq, st); c.Peer = 0; return c }
	cases := []struct {
		name string
		recs []*Record
		want string
	}{
		{"not-entered", []*Record{
			rec(0, bc(1041, "finished"), call("AllReduce", 1042, "started")),
			rec(1, bc(1041, "finished"), call("AllReduce", 1042, "failed")),
			rec(2, bc(1041, "finished"), call("AllReduce", 1042, "started")),
			rec(3, bc(1041, "finished")),
		}, "rank 3 has not entered AllReduce #1042 (float32, 4 MiB); ranks 0-2 wait in it since 30.2 s; rank 3's last call: Broadcast #1041, finished"},
		{"mismatch", []*Record{
			rec(0, call("AllGather", 7, "failed")),
			rec(1, call("AllGather", 7, "failed")),
			rec(2, call("AllReduce", 7, "failed")),
			rec(3, call("AllGather", 7, "failed")),
		}, "ranks are in different calls #7: rank 2 in AllReduce #7 (float32, 4 MiB), while ranks 0, 1 and 3 are in AllGather #7 (float32, 4 MiB) since 30.2 s"},
		{"no-record", []*Record{
			rec(0, call("AllReduce", 5, "started")),
			nil,
			rec(2, call("AllReduce", 5, "started")),
			rec(3, call("AllReduce", 5, "started")),
		}, "ranks 0, 2 and 3 wait in AllReduce #5 (float32, 4 MiB) since 30.2 s; rank 1 gave no record (stopped, hung or dead)"},
		{"two-behind", []*Record{
			rec(0, call("AllReduce", 9, "finished"), call("AllReduce", 10, "started")),
			rec(1, call("AllReduce", 8, "finished")),
			rec(2, call("AllReduce", 9, "finished"), call("AllReduce", 10, "started")),
			rec(3, call("AllReduce", 9, "started")),
		}, "ranks 1 and 3 have not entered AllReduce #10 (float32, 4 MiB); ranks 0 and 2 wait in it since 30.2 s; rank 1's last call: AllReduce #8, finished; rank 3's last call: AllReduce #9, started"},
		{"all-in", []*Record{
			rec(0, call("AllReduce", 2, "started")), rec(1, call("AllReduce", 2, "started")),
			rec(2, call("AllReduce", 2, "started")), rec(3, call("AllReduce", 2, "started")),
		}, "every rank is in AllReduce #2 (float32, 4 MiB) since 30.2 s"},
		{"idle", []*Record{
			rec(0, call("AllReduce", 2, "finished")), rec(1, call("AllReduce", 2, "finished")),
			rec(2, call("AllReduce", 1, "finished")), nil,
		}, "no rank is in a call; ranks 0 and 1: last call AllReduce #2, finished; rank 2: last call AllReduce #1, finished; rank 3 gave no record"},
		{"idle before any call", []*Record{
			rec(0), rec(1), rec(2, call("AllReduce", 1, "finished")), nil,
		}, "no rank is in a call; ranks 0 and 1 made no call yet; rank 2: last call AllReduce #1, finished; rank 3 gave no record"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Explain(4, tc.recs, now))
		})
	}
}

func TestRanks(t *testing.T) {
	assert.Equal(t, "rank 3", ranks([]int{3}))
	assert.Equal(t, "ranks 0-2 and 4-7", ranks([]int{7, 0, 1, 2, 4, 5, 6}))
	assert.Equal(t, "ranks 0, 2 and 5", ranks([]int{0, 2, 5}))
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 8: "8 B", 4096: "4 KiB", 1536: "1.5 KiB", 4 << 20: "4 MiB"} {
		assert.Equal(t, want, FormatBytes(n))
	}
}

// A group of collectives #5-#7 holds call #6.
func TestExplainGroupRange(t *testing.T) {
	g := Call{Seq: 5, SeqLast: 7, Call: "Group", Ops: 3, Peer: -1, State: "started", Start: t0.UnixNano()}
	recs := []*Record{rec(0, g), rec(1, g), rec(2, call("AllReduce", 4, "finished")), rec(3, g)}
	assert.Equal(t, "rank 2 has not entered Group #5-7 (3 ops); ranks 0, 1 and 3 wait in it since 2.0 s; rank 2's last call: AllReduce #4, finished",
		Explain(4, recs, t0.Add(2*time.Second)))
}

// Ranks waiting in Sends and Recvs, which take no call number, are named
// with what they wait in, and their peers with their last calls.
func TestExplainPointToPoint(t *testing.T) {
	now := t0.Add(3 * time.Second)
	p2p := func(kind string, peer int, state string) Call {
		c := call(kind, 0, state)
		c.Type, c.Peer = "int32", peer
		return c
	}
	grp := Call{Call: "Group", Ops: 3, Type: "int32", Count: 256, Peer: -1, Sends: 2, Recvs: 1,
		SendPeers: []int{1, 2}, RecvPeers: []int{1}, State: "failed", Start: t0.UnixNano()}
	closed := rec(1, call("AllReduce", 4, "finished"))
	closed.Reason = "close"
	cases := []struct {
		name   string
		nranks int
		recs   []*Record
		want   string
	}{
		{"recv", 2, []*Record{
			rec(0, call("AllReduce", 4, "finished"), p2p("Recv", 1, "failed")),
			rec(1, call("AllReduce", 4, "finished")),
		}, "rank 0 waits in a Recv from rank 1 (int32, 4 MiB) since 3.0 s; rank 1's last call: AllReduce #4, finished"},
		{"send-peer-closed", 2, []*Record{
			rec(0, p2p("Send", 1, "started")), closed,
		}, "rank 0 waits in a Send to rank 1 (int32, 4 MiB) since 3.0 s; rank 1's last call: AllReduce #4, finished, then it closed its communicator"},
		{"peer-no-record", 3, []*Record{
			rec(0, p2p("Recv", 2, "failed")), rec(1, call("AllReduce", 1, "finished")), nil,
		}, "rank 0 waits in a Recv from rank 2 (int32, 4 MiB) since 3.0 s; rank 2 gave no record (stopped, hung or dead)"},
		{"peer-last-p2p", 2, []*Record{
			rec(0, p2p("Recv", 1, "failed")), rec(1, p2p("Send", 0, "finished")),
		}, "rank 0 waits in a Recv from rank 1 (int32, 4 MiB) since 3.0 s; rank 1's last call: Send to rank 0 (int32, 4 MiB), finished"},
		{"group", 3, []*Record{
			rec(0, grp), rec(1, p2p("Recv", 0, "started")), rec(2),
		}, "rank 0 waits in a Group (3 ops: 2 Sends to ranks 1 and 2, 1 Recv from rank 1; int32) since 3.0 s; " +
			"rank 1 waits in a Recv from rank 0 (int32, 4 MiB) since 3.0 s; rank 2 made no call yet"},
		{"behind-numbered", 2, []*Record{
			rec(0, call("AllReduce", 5, "started")),
			rec(1, call("AllReduce", 4, "finished"), p2p("Recv", 0, "started")),
		}, "rank 1 has not entered AllReduce #5 (float32, 4 MiB); rank 0 waits in it since 3.0 s; rank 1 waits in a Recv from rank 0 (int32, 4 MiB) since 3.0 s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Explain(tc.nranks, tc.recs, now))
		})
	}
}
