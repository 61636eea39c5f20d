package launcher

import (
	"bufio"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccl/goccl/recorder"
)

// The ranks' flight records over a socket. The launcher listens on an
// abstract Unix socket of a random name (no file to clean up, no path
// length to mind; not the job's token, as every local user can list the
// names) and gives the name to every rank (GOCCL_RECORDER_SOCK): a goccl
// rank connects when its first communicator forms, proves it belongs to
// the job with the job's token, says which rank it is (its RANK), and
// sends its compact record when a communicator aborts, fails a call for
// ranks in other calls, or closes, and whenever the launcher asks. The
// launcher keeps each rank's newest record per communicator.

// EnvRecorderSock names the launcher's socket for the ranks' records.
const EnvRecorderSock = "GOCCL_RECORDER_SOCK"

// maxRecordFrame bounds one frame from a rank (its last calls are a few
// kilobytes).
const maxRecordFrame = 1 << 20

// helloWait bounds how long a connection may take to say who it is.
const helloWait = 5 * time.Second

// recordSink receives the ranks' records.
type recordSink struct {
	ln    net.Listener
	token string
	wg    sync.WaitGroup

	mu      sync.Mutex
	recs    map[string][]*recorder.Record // by communicator, by rank
	conns   map[int]helloed               // by pid, once it said hello
	all     []net.Conn                    // every accepted connection
	replied chan int                      // the pid of each process that answered an ask
}

// helloed is a connection that said which process of which of the job's
// ranks it is (a rank's program may run goccl in a child, as go run does).
type helloed struct {
	conn net.Conn
	rank int // the RANK it was given, -1 unknown
}

// listenRecords opens the job's socket; nil (and no socket given to the
// ranks) where it cannot, when the summary comes from files alone.
func listenRecords(token string) *recordSink {
	name, err := NewToken()
	if err != nil {
		return nil
	}
	ln, err := net.Listen("unix", "@goccl-run-"+name)
	if err != nil {
		return nil
	}
	s := &recordSink{ln: ln, token: token, recs: map[string][]*recorder.Record{}, conns: map[int]helloed{}, replied: make(chan int, MaxRanks)}
	s.wg.Add(1)
	go s.accept()
	return s
}

// addr is the socket's name as the ranks dial it.
func (s *recordSink) addr() string { return s.ln.Addr().String() }

func (s *recordSink) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.all = append(s.all, conn)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serve(conn)
		}()
	}
}

func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxRecordFrame {
		return nil, io.ErrUnexpectedEOF
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// serve reads one rank's frames until it goes; a connection that does
// not prove it is the job's is dropped.
func (s *recordSink) serve(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(helloWait))
	hello, err := readFrame(r)
	if err != nil {
		return
	}
	f := strings.Fields(string(hello))
	if len(f) != 4 || f[0] != "goccl-rec1" || subtle.ConstantTimeCompare([]byte(f[1]), []byte(s.token)) != 1 {
		return
	}
	pid, err := strconv.Atoi(f[2])
	if err != nil {
		return
	}
	rank, err := strconv.Atoi(f[3])
	if err != nil {
		rank = -1
	}
	_ = conn.SetReadDeadline(time.Time{})
	s.mu.Lock()
	s.conns[pid] = helloed{conn: conn, rank: rank}
	s.mu.Unlock()
	for {
		b, err := readFrame(r)
		if err != nil {
			return
		}
		if len(b) == 0 {
			select {
			case s.replied <- pid:
			default:
			}
			continue
		}
		var rec recorder.Record
		if json.Unmarshal(b, &rec) != nil || rec.Size <= 0 || rec.Rank < 0 || rec.Rank >= rec.Size || rec.Size > MaxRanks {
			continue
		}
		s.keep(&rec)
	}
}

// keep stores rec unless an newer record of its rank is there.
func (s *recordSink) keep(rec *recorder.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.recs[rec.Comm]
	if rs == nil || len(rs) != rec.Size {
		rs = make([]*recorder.Record, rec.Size)
		s.recs[rec.Comm] = rs
	}
	if old := rs[rec.Rank]; old == nil || old.Written <= rec.Written {
		rs[rec.Rank] = rec
	}
}

// ask asks the processes of ranks for their records and returns the
// pids of those that did not answer within wait.
func (s *recordSink) ask(ranks []int, wait time.Duration) map[int]bool {
	want := map[int]bool{}
	s.mu.Lock()
	for pid, h := range s.conns {
		if !slices.Contains(ranks, h.rank) {
			continue
		}
		_ = h.conn.SetWriteDeadline(time.Now().Add(wait))
		if _, err := h.conn.Write([]byte{'D'}); err == nil {
			want[pid] = true
		}
	}
	s.mu.Unlock()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for len(want) > 0 {
		select {
		case pid := <-s.replied:
			delete(want, pid)
		case <-deadline.C:
			return want
		}
	}
	return want
}

// connected reports whether a process of rank has connected.
func (s *recordSink) connected(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.conns {
		if h.rank == rank {
			return true
		}
	}
	return false
}

// finish stops accepting and waits (at most d) for the ranks' last
// frames; every rank has exited, so their connections end.
func (s *recordSink) finish(d time.Duration) {
	_ = s.ln.Close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		s.mu.Lock()
		for _, c := range s.all {
			_ = c.Close()
		}
		s.mu.Unlock()
		<-done
	}
}

// records returns what the ranks sent, by communicator, by rank.
func (s *recordSink) records() map[string][]*recorder.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]*recorder.Record, len(s.recs))
	for id, rs := range s.recs {
		out[id] = append([]*recorder.Record(nil), rs...)
	}
	return out
}
