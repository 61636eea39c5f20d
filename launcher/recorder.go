package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/goccl/goccl/recorder"
)

// The ranks' flight recorders. The launcher gives every rank a recorder
// directory (GOCCL_RECORDER_DIR, a fresh temporary one unless the caller
// set it): a rank writes its record there when its communicator aborts,
// and on SIGUSR1. When the launcher stops a job it first asks the ranks
// that announced themselves there (see comm) for their records, then
// names from them the rank the job waited for (Result.Summary).

// EnvRecorderDir is where ranks write their flight records.
const EnvRecorderDir = "GOCCL_RECORDER_DIR"

// dumpWait bounds how long the launcher waits for the ranks' records
// before it stops them.
const dumpWait = time.Second

// recorderDir returns the job's recorder directory, adding it to env
// when the caller did not set it, and a cleanup that removes a directory
// the launcher made.
func recorderDir(c *Config) (string, func()) {
	for _, kv := range c.Env {
		if v, ok := strings.CutPrefix(kv, EnvRecorderDir+"="); ok {
			return v, func() {}
		}
	}
	dir, err := os.MkdirTemp("", "goccl-run-")
	if err != nil {
		c.Logger.Warn("goccl run: no flight recorder directory", "err", err)
		return "", func() {}
	}
	c.Env = append(append([]string(nil), c.Env...), EnvRecorderDir+"="+dir)
	return dir, func() { _ = os.RemoveAll(dir) }
}

// askDumps sends SIGUSR1 to every live rank whose process announced in
// dir that it answers it, and waits (at most dumpWait) for their records.
func (j *jobRun) askDumps() {
	if j.recDir == "" {
		return
	}
	paths, _ := filepath.Glob(filepath.Join(j.recDir, "rank*.json"))
	type asked struct {
		path string
		mod  time.Time
	}
	var wait []asked
	for _, p := range paths {
		rec, err := recorder.ReadFile(p)
		if err != nil || rec.Rank < 0 || rec.Rank >= len(j.procs) || rec.PID <= 0 {
			continue
		}
		if j.res.Ranks[rec.Rank].Exited || rec.Reason == "abort" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if syscall.Kill(rec.PID, syscall.SIGUSR1) == nil {
			wait = append(wait, asked{p, fi.ModTime()})
		}
	}
	deadline := time.Now().Add(dumpWait)
	for len(wait) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		left := wait[:0]
		for _, a := range wait {
			if fi, err := os.Stat(a.path); err != nil || !fi.ModTime().After(a.mod) {
				left = append(left, a)
			}
		}
		wait = left
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
