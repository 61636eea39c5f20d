package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/goccl/goccl/launcher"
	"github.com/goccl/goccl/recorder"
)

// dumpMain is `goccl dump PID`: it sends SIGUSR1 to a rank, which writes
// its flight record without stopping, and prints the record.
func dumpMain(args []string) int { return dumpCmd(args, os.Stdout, os.Stderr) }

func dumpCmd(args []string, stdout, stderr io.Writer) int {
	fs := newCommand("dump", "goccl dump [-dir D] [-timeout 5s] PID",
		`Sends SIGUSR1 to a running rank, which writes its flight record (one
per communicator) to its GOCCL_RECORDER_DIR without stopping, and prints
the records. Ranks take SIGUSR1 where GOCCL_RECORDER_DIR is set (goccl run
sets it) or GOCCL_RECORDER_SIGNAL=1; a process that does not catch SIGUSR1
is not signalled, since the signal would kill it.`, stdout, stderr)
	dir := fs.String("dir", "", "read the record from directory `D` (default: the rank's GOCCL_RECORDER_DIR)")
	wait := fs.Duration("timeout", 5*time.Second, "wait up to `D` for the record")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return fs.usageError("name one PID")
	}
	pid, err := strconv.Atoi(fs.Arg(0))
	if err != nil || pid <= 0 {
		return fs.usageError("PID %q is not a process id", fs.Arg(0))
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return fs.fail("no process %d", pid)
	}
	if !launcher.Catches(pid, syscall.SIGUSR1) {
		return fs.fail("process %d does not catch SIGUSR1, which would kill it: not a goccl rank; nothing sent", pid)
	}
	if *dir == "" {
		*dir = envOf(pid, "GOCCL_RECORDER_DIR")
	}
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return fs.fail("signalling %d: %v", pid, err)
	}
	if *dir == "" {
		fmt.Fprintf(stderr, "goccl dump: %d has no GOCCL_RECORDER_DIR: with GOCCL_RECORDER_SIGNAL=1 its record went to its standard error\n", pid)
		return 0
	}
	deadline := t0.Add(*wait)
	for {
		if found := dumpsSince(*dir, pid, t0); len(found) > 0 {
			for _, b := range found {
				_, _ = stdout.Write(b)
			}
			return 0
		}
		if time.Now().After(deadline) {
			return fs.fail("no record from %d in %s within %v (is it a goccl rank with a live communicator?)", pid, *dir, *wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dumpsSince returns the files in dir that pid dumped after t0, one per
// communicator.
func dumpsSince(dir string, pid int, t0 time.Time) [][]byte {
	paths, _ := filepath.Glob(filepath.Join(dir, "rank*.json"))
	var out [][]byte
	for _, p := range paths {
		rec, err := recorder.ReadFile(p)
		if err != nil || rec.PID != pid || rec.Reason != "dump" || rec.Written < t0.UnixNano() {
			continue
		}
		if b, err := os.ReadFile(p); err == nil {
			out = append(out, b)
		}
	}
	return out
}

// envOf reads one variable of a process's environment ("" when it cannot).
func envOf(pid int, key string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(key+"=")); ok {
			return string(v)
		}
	}
	return ""
}
