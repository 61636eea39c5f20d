package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/recorder"
)

// recordedJob runs calls AllReduces on a 2-rank host job whose recorder
// directory is dir.
func recordedJob(t *testing.T, dir string, calls int) []*comm.Comm {
	t.Helper()
	comms, err := comm.InitAll(context.Background(), []int{0, 1}, comm.Options{Backend: comm.BackendHost,
		Env: map[string]string{"GOCCL_RECORDER_DIR": dir}})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]float32, 256)
			p := uintptr(unsafe.Pointer(&buf[0]))
			for i := 0; i < calls; i++ {
				assert.NoError(t, c.AllReduce(context.Background(), p, p, len(buf), comm.Float32, comm.Sum, 0))
			}
			runtime.KeepAlive(buf)
		}()
	}
	wg.Wait()
	return comms
}

func TestTraceCommand(t *testing.T) {
	dir := t.TempDir()
	comms := recordedJob(t, dir, 6)
	var files []string
	for _, c := range comms {
		rec := c.Record()
		path, err := recorder.WriteFile(dir, &rec)
		require.NoError(t, err)
		files = append(files, path)
	}
	out, png := filepath.Join(dir, "trace.json"), filepath.Join(dir, "timeline.png")
	var stderr bytes.Buffer
	// Flags after the files, as in goccl trace rank*.json -o trace.json.
	require.Equal(t, 0, traceCmd(append(files, "-o", out, "-png", png), &bytes.Buffer{}, &stderr), stderr.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var tr recorder.Trace
	require.NoError(t, json.Unmarshal(b, &tr))
	perRank := map[int]int{}
	for _, ev := range tr.TraceEvents {
		if ev.Ph == "X" {
			perRank[ev.PID]++
		}
	}
	assert.Equal(t, map[int]int{0: 6, 1: 6}, perRank)
	fi, err := os.Stat(png)
	require.NoError(t, err)
	assert.Positive(t, fi.Size())

	stderr.Reset()
	assert.Equal(t, 2, traceCmd(nil, &bytes.Buffer{}, &stderr), "no files")
	assert.Equal(t, 1, traceCmd([]string{filepath.Join(dir, "nope.json")}, &bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), "nope.json")
}

// TestDumpCommand: goccl dump signals a live process (this one) and prints
// the records its communicators wrote, which go on working.
func TestDumpCommand(t *testing.T) {
	dir := t.TempDir()
	recordedJob(t, dir, 3)
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, dumpCmd([]string{"-dir", dir, strconv.Itoa(os.Getpid())}, &stdout, &stderr), stderr.String())
	dumped := bytes.Clone(stdout.Bytes())
	// One JSON document per communicator of the process that has dumped
	// by then; at least one, each with the three calls.
	dec := json.NewDecoder(&stdout)
	n := 0
	for dec.More() {
		var rec recorder.Record
		require.NoError(t, dec.Decode(&rec))
		assert.Equal(t, "dump", rec.Reason)
		assert.Equal(t, os.Getpid(), rec.PID)
		assert.Len(t, rec.Calls, 3)
		n++
	}
	assert.Positive(t, n)

	// What dump printed (one record per communicator, one after the
	// other) is what goccl trace reads.
	path := filepath.Join(t.TempDir(), "dump.json")
	require.NoError(t, os.WriteFile(path, dumped, 0o600))
	var trace bytes.Buffer
	require.Equal(t, 0, traceCmd([]string{path}, &trace, &stderr), stderr.String())
	var tr recorder.Trace
	require.NoError(t, json.Unmarshal(trace.Bytes(), &tr))
	slices := 0
	for _, ev := range tr.TraceEvents {
		if ev.Ph == "X" {
			slices++
		}
	}
	assert.Equal(t, 3*n, slices, "three calls of each record dumped")
}

// TestDumpSparesOtherProcesses: goccl dump does not signal a process that
// does not catch SIGUSR1 (the signal would kill it), nor a missing one.
func TestDumpSparesOtherProcesses(t *testing.T) {
	sleeper := exec.Command("sleep", "60")
	require.NoError(t, sleeper.Start())
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	for _, tc := range []struct {
		name string
		pid  int
		want string
	}{
		{"not catching SIGUSR1", sleeper.Process.Pid, "does not catch SIGUSR1"},
		{"no such process", 1 << 30, "no process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			assert.Equal(t, 1, dumpCmd([]string{"-timeout", "100ms", strconv.Itoa(tc.pid)}, &stdout, &stderr))
			assert.Contains(t, stderr.String(), tc.want)
			assert.Empty(t, stdout.String())
		})
	}
	// Still running: signal 0 reaches it.
	assert.NoError(t, sleeper.Process.Signal(syscall.Signal(0)))
}
