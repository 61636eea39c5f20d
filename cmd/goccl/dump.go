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

	"github.com/goccl/goccl/recorder"
)

// dumpMain is `goccl dump PID`: it sends SIGUSR1 to a rank, which writes
// its flight record without stopping, and prints the record.
func dumpMain(args []string) int { return dumpCmd(args, os.Stdout, os.Stderr) }

func dumpCmd(args []string, stdout, stderr io.Writer) int {
	fs := subcommandFlags("dump", "usage: goccl dump [-dir D] [-timeout 5s] PID", stderr)
	dir := fs.String("dir", "", "the rank's GOCCL_RECORDER_DIR (default: read from its environment)")
	wait := fs.Duration("timeout", 5*time.Second, "how long to wait for the record")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	pid, err := strconv.Atoi(fs.Arg(0))
	if err != nil || pid <= 0 {
		fmt.Fprintf(stderr, "goccl dump: PID %q is not a process id\n", fs.Arg(0))
		return 2
	}
	if *dir == "" {
		*dir = envOf(pid, "GOCCL_RECORDER_DIR")
	}
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		fmt.Fprintf(stderr, "goccl dump: signalling %d: %v\n", pid, err)
		return 1
	}
	if *dir == "" {
		fmt.Fprintf(stderr, "goccl dump: %d has no GOCCL_RECORDER_DIR: its record went to its standard error\n", pid)
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
			fmt.Fprintf(stderr, "goccl dump: no record from %d in %s within %v (is it a goccl rank?)\n", pid, *dir, *wait)
			return 1
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
