package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goccl/goccl/recorder"
)

// The ranks' flight recorders. The ranks send their records to the
// launcher over a socket (recsock.go). The launcher also gives every rank
// a recorder directory (GOCCL_RECORDER_DIR; one of the job's in the
// temporary directory, made by the first rank that writes there, unless
// the caller set it), where a rank writes its record when its
// communicator aborts or closes, and on SIGUSR1: the ranks' own fallback
// where the bootstrap is gone, and the launcher's where a rank could not
// reach its socket. When the launcher stops a job it first asks the ranks
// for their records (over the socket; with SIGUSR1 those not connected
// that catch it), then names from them, the socket's first and the
// files' second, the rank the job waited for (Result.Summary); a rank
// that sent none is told by what the launcher saw become of it.

// EnvRecorderDir is where ranks write their flight records.
const EnvRecorderDir = "GOCCL_RECORDER_DIR"

// dumpWait bounds how long the launcher waits for the ranks' records
// before it stops them.
const dumpWait = time.Second

// recorderDir returns the job's recorder directory, adding it to env
// when the caller did not set it, and a cleanup that removes a directory
// of the launcher's choosing.
func recorderDir(c *Config, token string) (string, func()) {
	for _, kv := range c.Env {
		if v, ok := strings.CutPrefix(kv, EnvRecorderDir+"="); ok {
			return v, func() {}
		}
	}
	dir := filepath.Join(os.TempDir(), "goccl-run-"+token)
	c.Env = append(append([]string(nil), c.Env...), EnvRecorderDir+"="+dir)
	return dir, func() { _ = os.RemoveAll(dir) }
}

// Catches reports whether process pid catches signal sig (its SigCgt
// mask in /proc): a rank that does not would die of SIGUSR1. Go programs
// all do, and ignore it unless they asked for it (goccl's ranks with a
// recorder directory do).
func Catches(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// askDumps asks every live rank for its record and waits (at most
// dumpWait) for them: over the socket those connected to it, with SIGUSR1
// those that are not and catch it. A job none of whose ranks asked so
// answers within a quarter of it is taken for one without files.
func (j *jobRun) askDumps() {
	t0 := time.Now()
	var viaSock []int      // ranks
	want := map[int]bool{} // pids asked for files
	for _, p := range j.procs {
		pid := p.cmd.Process.Pid
		switch {
		case j.res.Ranks[p.rank].Exited:
		case j.sink != nil && j.sink.connected(p.rank):
			viaSock = append(viaSock, p.rank)
		case j.recDir != "" && Catches(pid, syscall.SIGUSR1) && syscall.Kill(pid, syscall.SIGUSR1) == nil:
			want[pid] = true
		}
	}
	if len(viaSock) > 0 {
		j.sink.ask(viaSock, dumpWait)
	}
	asked := len(want)
	deadline := t0.Add(dumpWait)
	for len(want) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		paths, _ := filepath.Glob(filepath.Join(j.recDir, "rank*.json"))
		for _, path := range paths {
			if rec, err := recorder.ReadFile(path); err == nil && rec.Written >= t0.UnixNano() {
				delete(want, rec.PID)
			}
		}
		if len(want) == asked && time.Since(t0) > dumpWait/4 {
			return
		}
	}
}

// summarize names, from the records sent (sent, by communicator) and
// those in dir, what the ranks of a stopped job were doing, one line per
// communicator that some rank is in a call of or gave no record of (every
// communicator where there is none such). gone says what became of ranks
// of the job (np of them) that may have sent nothing.
func summarize(sent map[string][]*recorder.Record, dir string, since time.Time, np int, gone map[int]string) []string {
	all := map[string][]*recorder.Record{}
	for id, rs := range sent {
		all[id] = append([]*recorder.Record(nil), rs...)
	}
	if dir != "" {
		files, _ := recorder.ReadDir(dir)
		for id, rs := range files {
			have := all[id]
			if have == nil || len(have) != len(rs) {
				if have != nil {
					continue // the socket's say what size the communicator is
				}
				have = make([]*recorder.Record, len(rs))
				all[id] = have
			}
			for r, rec := range rs {
				if have[r] == nil && rec != nil && rec.Written >= since.UnixNano() {
					have[r] = rec
				}
			}
		}
	}
	// A communicator every rank of which told it is in no call is not
	// what the job waits for: told only when no other is, and not at all
	// when none made a call.
	var ids, healthy []string
	for id, rs := range all {
		n, idle, made := 0, 0, 0
		for _, rec := range rs {
			if rec != nil {
				n++
				made += len(rec.Calls)
				if !inCall(rec) {
					idle++
				}
			}
		}
		switch {
		case n == 0:
		case idle == len(rs) && made == 0:
			// Every rank told it made no call: nothing to say (a job that
			// failed before its first call has its error).
		case idle == len(rs):
			healthy = append(healthy, id)
		default:
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		ids = healthy
	}
	sort.Strings(ids)
	var out []string
	for _, id := range ids {
		rs := all[id]
		when := recorder.LastWritten(rs, time.Now())
		var g map[int]string
		if len(rs) == np {
			// The job's ranks are this communicator's (its world).
			g = gone
		}
		line := recorder.ExplainGone(len(rs), rs, when, "stopped, hung or dead", g)
		if len(ids) > 1 {
			line = "communicator " + id + ": " + line
		}
		out = append(out, line)
	}
	return out
}

// inCall reports whether rec's rank was in a call when it wrote rec.
func inCall(rec *recorder.Record) bool {
	for i := range rec.Calls {
		if rec.Calls[i].StateOf().InProgress() {
			return true
		}
	}
	return false
}

// fates says what the launcher saw become of the ranks that may have
// sent no record: stopped by a signal (not running), killed by one it did
// not send, or exited before it stopped the job.
func (j *jobRun) fates() map[int]string {
	out := map[int]string{}
	for _, st := range j.res.Ranks {
		ours := st.Stopped && (st.Signal == syscall.SIGTERM || (st.Signal == syscall.SIGKILL && j.killed))
		switch {
		case st.Frozen:
			out[st.Rank] = "stopped by a signal, not running"
		case st.Exited && st.Signal != 0 && !ours:
			out[st.Rank] = fmt.Sprintf("killed by signal %d (%v)", int(st.Signal), st.Signal)
		case st.Exited && st.Signal == 0 && !st.Stopped:
			out[st.Rank] = fmt.Sprintf("exited with status %d", st.ExitCode)
		}
	}
	return out
}
