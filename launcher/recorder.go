package launcher

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goccl/goccl/recorder"
)

// The ranks' flight recorders. The launcher gives every rank a recorder
// directory (GOCCL_RECORDER_DIR; one of the job's in the temporary
// directory, made by the first rank that writes there, unless the caller
// set it): a rank writes its record there when its communicator aborts,
// and on SIGUSR1. When the launcher stops a job it first asks the ranks
// that catch SIGUSR1 (goccl's do, with a recorder directory) for their
// records, then names from them the rank the job waited for
// (Result.Summary).

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

// catches reports whether process pid catches signal sig (its SigCgt
// mask in /proc): a rank that does not would die of SIGUSR1. Go programs
// all do, and ignore it unless they asked for it (goccl's ranks with a
// recorder directory do).
func catches(pid int, sig syscall.Signal) bool {
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

// askDumps sends SIGUSR1 to every live rank that catches it and waits (at
// most dumpWait) for their records; a job none of whose ranks answers
// within a quarter of it is taken for one without records.
func (j *jobRun) askDumps() {
	if j.recDir == "" {
		return
	}
	t0 := time.Now()
	want := map[int]bool{} // pids asked
	for _, p := range j.procs {
		pid := p.cmd.Process.Pid
		if !j.res.Ranks[p.rank].Exited && catches(pid, syscall.SIGUSR1) && syscall.Kill(pid, syscall.SIGUSR1) == nil {
			want[pid] = true
		}
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

// summarize names, from the records in dir, what the ranks of a stopped
// job were doing.
func summarize(dir string, since time.Time) []string {
	if dir == "" {
		return nil
	}
	lines, err := recorder.Summaries(dir, since, time.Now())
	if err != nil {
		return nil
	}
	return lines
}
