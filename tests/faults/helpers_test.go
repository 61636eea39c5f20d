package faults

import (
	"bytes"
	"context"
	"io"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/launcher"
)

// launched is a job that launcher.Run runs in the background on this test
// binary in child mode, its tagged output collected by rank.
type launched struct {
	tg     *tagged
	stderr bytes.Buffer // the launcher's; read only once it has finished
	done   chan launchResult
}

// launchResult is what launcher.Run returned.
type launchResult struct {
	res launcher.Result
	err error
}

// launch runs cfg (NP, Env, Grace and Timeout the caller's) with tagged
// output; the program, its arguments and the output streams are set here.
func launch(cfg launcher.Config) *launched {
	pr, pw := io.Pipe()
	j := &launched{tg: newTagged(), done: make(chan launchResult, 1)}
	go j.tg.feed(pr)
	cfg.Program, cfg.Args, cfg.TagOutput = os.Args[0], []string{"-test.run=^$"}, true
	cfg.Stdout, cfg.Stderr = pw, &j.stderr
	go func() {
		res, err := launcher.Run(context.Background(), cfg)
		_ = pw.Close()
		j.done <- launchResult{res, err}
	}()
	return j
}

// failedRank waits at most d for the launcher to finish (failing the test
// with stuck if it does not) and requires that it reports a failed rank.
func (j *launched) failedRank(t *testing.T, d time.Duration, stuck string) (launchResult, *launcher.RankError) {
	t.Helper()
	var res launchResult
	select {
	case res = <-j.done:
	case <-time.After(d):
		t.Fatal(stuck)
	}
	var re *launcher.RankError
	require.ErrorAs(t, res.err, &re, "stderr:\n%s", j.stderr.String())
	return res, re
}

// runningPid waits for every one of np ranks to finish its first
// iteration and returns victim's process id.
func (tg *tagged) runningPid(t *testing.T, np, victim int) int {
	t.Helper()
	for r := 0; r < np; r++ {
		tg.expect(t, r, "ITER0", 20*time.Second)
	}
	pid, err := strconv.Atoi(field(tg.expect(t, victim, "READY", time.Second), "pid"))
	require.NoError(t, err)
	return pid
}

// survivors waits at most d for every one of np ranks but victim to print
// FAILED naming victim, and returns their reports, latencies counted from
// the fault at t0.
func (tg *tagged) survivors(t *testing.T, np, victim int, t0 time.Time, d time.Duration) []failure {
	t.Helper()
	var out []failure
	for r := 0; r < np; r++ {
		if r == victim {
			continue
		}
		l := tg.expect(t, r, "FAILED", d)
		assert.Equal(t, strconv.Itoa(victim), field(l, "peer"), "rank %d: %s", r, l)
		out = append(out, failure{rank: r, line: l, latency: stamp(t, l).Sub(t0)})
	}
	return out
}

// rankLines returns a copy of what rank has printed so far.
func (tg *tagged) rankLines(rank int) []string {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]string(nil), tg.lines[rank]...)
}

// killInLoop waits until every rank of j is in its loop (ITER0, within
// ready), SIGKILLs victim and returns the survivors' FAILED lines with
// their times from the kill.
func (j *job) killInLoop(t *testing.T, victim int, ready time.Duration) []failure {
	t.Helper()
	for _, p := range j.ranks {
		p.expect(t, "ITER0", ready)
	}
	time.Sleep(50 * time.Millisecond) // well inside the loop
	t0 := time.Now()
	require.NoError(t, j.ranks[victim].cmd.Process.Signal(syscall.SIGKILL))
	return j.survivors(t, victim, "FAILED", t0, 10*time.Second)
}
