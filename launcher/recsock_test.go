package launcher

import (
	"encoding/binary"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/recorder"
)

// fakeRank speaks a rank's side of the records socket.
type fakeRank struct {
	t    *testing.T
	conn net.Conn
	lax  bool // write errors are expected (the launcher drops it)
}

func dialRecords(t *testing.T, s *recordSink, token string, pid, rank int) *fakeRank {
	t.Helper()
	conn, err := net.Dial("unix", s.addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	f := &fakeRank{t: t, conn: conn}
	f.frame([]byte("goccl-rec1 " + token + " " + strconv.Itoa(pid) + " " + strconv.Itoa(rank)))
	return f
}

func (f *fakeRank) frame(b []byte) {
	f.t.Helper()
	_, err := f.conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	if !f.lax {
		require.NoError(f.t, err)
	}
}

func (f *fakeRank) send(rank, size int, reason string, written int64, calls ...recorder.Call) {
	f.t.Helper()
	b, err := json.Marshal(recorder.Record{Version: 1, Meta: recorder.Meta{Comm: "c", Rank: rank, Size: size},
		Reason: reason, Written: written, Calls: calls})
	require.NoError(f.t, err)
	f.frame(b)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "waiting for %s", what)
	}
}

func TestRecordSink(t *testing.T) {
	tok, err := NewToken()
	require.NoError(t, err)
	s := listenRecords(tok)
	require.NotNil(t, s, "an abstract Unix socket")
	defer s.finish(0)

	ar := func(seq uint64, st string) recorder.Call {
		return recorder.Call{Seq: seq, Call: "AllReduce", Type: "int32", Count: 4, Peer: -1, State: st}
	}
	// A process without the job's token is not heard.
	bad := dialRecords(t, s, "0123456789abcdef0123456789abcdef", 99, 1)
	bad.lax = true
	bad.send(1, 2, "abort", 5, ar(1, "started"))

	r0 := dialRecords(t, s, tok, 100, 0)
	r0.send(0, 2, "abort", 10, ar(1, "failed"))
	r0.send(0, 2, "dump", 5, ar(1, "finished")) // older: kept out
	waitFor(t, "rank 0's record", func() bool { return s.records()["c"] != nil && s.records()["c"][0] != nil })
	got := s.records()["c"]
	require.Len(t, got, 2)
	assert.Equal(t, "abort", got[0].Reason)
	assert.Equal(t, "failed", got[0].Calls[0].State)
	assert.Nil(t, got[1], "the stranger's record")
	assert.False(t, s.connected(1), "the stranger is not rank 1")

	// Asked, a rank answers with its records and an empty frame (here
	// from a child process of the rank's: another pid); one that does not
	// answer is reported; a rank not connected is not waited for.
	r1 := dialRecords(t, s, tok, 101, 1)
	waitFor(t, "rank 1's hello", func() bool { return s.connected(1) })
	go func() {
		var b [1]byte
		if _, err := r1.conn.Read(b[:]); err != nil || b[0] != 'D' {
			return
		}
		r1.send(1, 2, "dump", 20, ar(1, "finished"))
		r1.frame(nil)
	}()
	silent := s.ask([]int{0, 1, 2}, 500*time.Millisecond)
	assert.Equal(t, map[int]bool{100: true}, silent, "rank 0 never answers; rank 2 never connected")
	got = s.records()["c"]
	require.NotNil(t, got[1])
	assert.Equal(t, "dump", got[1].Reason)
}

// TestSummarizeSources: the socket's records come first, the files fill
// in the ranks it lacks, and what the launcher saw become of a rank
// applies to the communicator of the job's size only.
func TestSummarizeSources(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	at := start.Add(2 * time.Second).UnixNano()
	mk := func(comm string, r, size int, calls ...recorder.Call) *recorder.Record {
		return &recorder.Record{Version: 1, Meta: recorder.Meta{Comm: comm, Rank: r, Size: size}, Written: at, Calls: calls}
	}
	ar := func(seq uint64, st string) recorder.Call {
		return recorder.Call{Seq: seq, Call: "AllReduce", Type: "int32", Count: 4, Peer: -1, State: st, Start: start.UnixNano()}
	}
	// Rank 1's file says it is in call 2; its record over the socket (newer
	// knowledge) says it has not entered it.
	for _, rec := range []*recorder.Record{mk("w", 1, 3, ar(1, "finished"), ar(2, "started")), mk("w", 2, 3, ar(1, "finished"), ar(2, "started"))} {
		_, err := recorder.WriteFile(dir, rec)
		require.NoError(t, err)
	}
	sent := map[string][]*recorder.Record{
		"w": {mk("w", 0, 3, ar(1, "finished"), ar(2, "started")), mk("w", 1, 3, ar(1, "finished")), nil},
		// In no call on every rank: not the trouble, no line.
		"done": {{Version: 1, Meta: recorder.Meta{Comm: "done", Rank: 0, Size: 1}, Reason: "close", Written: at, Calls: []recorder.Call{ar(1, "finished")}}},
	}
	idle := map[string][]*recorder.Record{"done": sent["done"],
		"idle": {mk("idle", 0, 2, ar(1, "finished")), mk("idle", 1, 2, ar(1, "finished"))}}
	cases := []struct {
		name string
		sent map[string][]*recorder.Record
		dir  string
		np   int
		gone map[int]string
		want []string
	}{
		{"socket then files", sent, dir, 3, nil, []string{
			"rank 1 has not entered AllReduce #2 (int32, 16 B); ranks 0 and 2 wait in it since 2.0 s; rank 1's last call: AllReduce #1, finished"}},
		{"socket alone", sent, "", 3, map[int]string{2: "killed by signal 9 (killed)"}, []string{
			"rank 2 never reached AllReduce #2 (int32, 16 B); rank 1 has not entered it; rank 0 waits in it since 2.0 s; rank 2 gave no record (killed by signal 9 (killed)); rank 1's last call: AllReduce #1, finished"}},
		{"fates of another size", sent, "", 4, map[int]string{2: "killed by signal 9 (killed)"}, []string{
			"rank 1 has not entered AllReduce #2 (int32, 16 B); rank 0 waits in it since 2.0 s; rank 2 gave no record (stopped, hung or dead); rank 1's last call: AllReduce #1, finished"}},
		{"files alone", nil, dir, 3, nil, []string{
			"ranks 1 and 2 wait in AllReduce #2 (int32, 16 B) since 2.0 s; rank 0 gave no record (stopped, hung or dead)"}},
		{"nothing", nil, "", 3, nil, nil},
		{"no call made anywhere: no line", map[string][]*recorder.Record{"fresh": {mk("fresh", 0, 2), mk("fresh", 1, 2)}}, "", 2, nil, nil},
		{"no call made, a rank gave nothing: told", map[string][]*recorder.Record{"fresh": {mk("fresh", 0, 2), nil}}, "", 2, nil, []string{
			"no rank is in a call; rank 0 made no call yet; rank 1 gave no record"}},
		{"every communicator idle: all told", idle, "", 2, nil, []string{
			"communicator done: no rank is in a call; rank 0: last call AllReduce #1, finished",
			"communicator idle: no rank is in a call; ranks 0 and 1: last call AllReduce #1, finished"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, summarize(tc.sent, tc.dir, start, tc.np, tc.gone))
		})
	}
}

// The socket's name, which every local user can list, does not give away
// the job's token.
func TestRecordSinkNameIsNotTheToken(t *testing.T) {
	tok, err := NewToken()
	require.NoError(t, err)
	s := listenRecords(tok)
	require.NotNil(t, s)
	defer s.finish(0)
	assert.True(t, strings.HasPrefix(s.addr(), "@goccl-run-"), s.addr())
	assert.NotContains(t, s.addr(), tok)
}
