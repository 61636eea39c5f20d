package recorder

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/syncbuf"

	"github.com/goccl/goccl/launcher"
)

func TestMain(m *testing.M) {
	if os.Getenv(childVar) != "" {
		os.Exit(rankMain())
	}
	os.Exit(m.Run())
}

// runJob runs 4 ranks of this binary through goccl run's code and returns
// each rank's FAILED line, the launcher's stderr and its exit code.
func runJob(t *testing.T, jobTimeout string, env ...string) (failed map[int]string, stderr string, code int) {
	t.Helper()
	failed, _, stderr, code = runJobOut(t, jobTimeout, env...)
	return failed, stderr, code
}

// runJobOut is runJob that also returns each rank's output lines.
func runJobOut(t *testing.T, jobTimeout string, env ...string) (failed map[int]string, lines map[int][]string, stderr string, code int) {
	t.Helper()
	// The job's recorder directory goes under this test's own temporary
	// directory, out of the way of tests that watch the shared one.
	t.Setenv("TMPDIR", t.TempDir())
	if _, ok := os.LookupEnv("GOCCL_RECORDER_DIR"); ok {
		t.Setenv("GOCCL_RECORDER_DIR", "")
		os.Unsetenv("GOCCL_RECORDER_DIR")
	}
	for _, kv := range append([]string{childVar + "=rank", "GOCCL_TIMEOUT=3s"}, env...) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	var out, errb syncbuf.Buffer
	t0 := time.Now()
	code = launcher.Main([]string{"-np", "4", "--tag-output", "--timeout", jobTimeout, "--grace", "3s",
		os.Args[0], "-test.run=^$"}, &out, &errb)
	t.Logf("job ended in %v with code %d", time.Since(t0), code)
	failed, lines = map[int]string{}, map[int][]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		tag, rest, ok := strings.Cut(l, "] ")
		if !ok || !strings.HasPrefix(tag, "[") {
			continue
		}
		r, err := strconv.Atoi(tag[1:])
		if err != nil {
			continue
		}
		lines[r] = append(lines[r], rest)
		if strings.HasPrefix(rest, "FAILED") {
			failed[r] = rest
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	return failed, lines, errb.String(), code
}

// stragglerCase is one fault of TestStragglerNamed.
type stragglerCase struct {
	name      string
	fault     string
	env       []string // added to the job's
	survivors []int
	want      []string // in every survivor's error (explained by its flight recorder) and in goccl run's summary
	wantRank  []string // in every survivor's error only
	wantRun   []string // in goccl run's summary only
}

// The victim (rank 3) misbehaves at call 5 of 10. Every survivor's error
// and goccl run's summary name it and the call. goccl run gets the
// ranks' records over its socket, and from the recorder directory it
// gives them: each fault runs twice, with that directory and with one no
// file can be written to (where goccl run has the socket's alone).
func TestStragglerNamed(t *testing.T) {
	cases := []stragglerCase{
		{"skip", "skip", nil, []int{0, 1, 2}, []string{
			"rank 3 has not entered AllReduce #5 (int32, 4 KiB); ranks 0-2 wait in it since",
			"rank 3's last call: AllReduce #4, finished",
		}, nil, nil},
		{"other", "other", nil, []int{0, 1, 2, 3}, []string{
			"ranks are in different calls #5: rank 3 in AllGather #5 (int32, 4 KiB), while ranks 0-2 are in AllReduce #5 (int32, 4 KiB)",
		}, nil, nil},
		// A stopped or killed rank sends nothing; goccl run names it from
		// the others' records and what it saw become of the rank.
		{"stop", "stop", nil, []int{0, 1, 2}, nil, []string{
			"ranks 0-2 wait in AllReduce #5 (int32, 4 KiB) since",
			"rank 3 gave no record (",
		}, []string{
			"rank 3 never reached AllReduce #5 (int32, 4 KiB); ranks 0-2 wait in it since",
			"rank 3 gave no record (stopped by a signal, not running)",
		}},
		// A survivor may learn of the death before its record says it
		// entered call 5 (its error then names the dead rank alone), and
		// be named among those not in it too.
		{"kill", "kill", nil, []int{0, 1, 2}, nil, []string{"rank 3"}, []string{
			"rank 3 never reached AllReduce #5 (int32, 4 KiB); ",
			" in it", // "ranks 0-2 wait in it", or fewer, as in the comment above
			"rank 3 gave no record (killed by signal 9 (killed))",
		}},
		// A rank that closed its communicator and exited left its record.
		// (A survivor that learns of the close before it enters call 5
		// fails at its entry, and is named among those not in it too.)
		{"close", "close", nil, []int{0, 1, 2}, []string{
			"not entered AllReduce #5 (int32, 4 KiB)",
			"rank 3's last call: AllReduce #4, finished, then it closed its communicator",
		}, nil, nil},
	}
	for _, files := range []bool{true, false} {
		for _, tc := range cases {
			if !files {
				tc.name += " without files"
				tc.env = append(append([]string(nil), tc.env...), "GOCCL_RECORDER_DIR=/dev/null/none")
			}
			t.Run(tc.name, func(t *testing.T) { tc.run(t) })
		}
	}
}

func (tc *stragglerCase) run(t *testing.T) {
	const victim, at = 3, 5
	env := append([]string{"REC_FAULT=" + tc.fault, fmt.Sprintf("REC_VICTIM=%d", victim), fmt.Sprintf("REC_AT=%d", at)}, tc.env...)
	failed, stderr, code := runJob(t, "60s", env...)
	assert.NotZero(t, code)
	for _, r := range tc.survivors {
		l, ok := failed[r]
		require.True(t, ok, "rank %d printed no FAILED line", r)
		if len(tc.want) > 0 {
			assert.Contains(t, l, "flight recorder: ", "rank %d", r)
		}
		for _, w := range append(append([]string(nil), tc.want...), tc.wantRank...) {
			assert.Contains(t, l, w, "rank %d", r)
		}
	}
	summary := summaryOf(t, stderr)
	for _, w := range append(append([]string(nil), tc.want...), tc.wantRun...) {
		assert.Contains(t, summary, w)
	}
}

func summaryOf(t *testing.T, stderr string) string {
	t.Helper()
	var summary string
	for _, l := range strings.Split(stderr, "\n") {
		if s, ok := strings.CutPrefix(l, "goccl run: flight recorder: "); ok {
			require.Empty(t, summary, "one communicator, one line")
			summary = s
		}
	}
	require.NotEmpty(t, summary, "goccl run printed no summary:\n%s", stderr)
	return summary
}

// TestStragglerNamedOnJobTimeout: no rank fails (their own timeout is far
// off) but the job's time runs out; goccl run asks the ranks for their
// records before it stops them (over its socket; without files, from it
// alone) and names the straggler from them.
func TestStragglerNamedOnJobTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"files", nil},
		{"without files", []string{"GOCCL_RECORDER_DIR=/dev/null/none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Long enough for the ranks to start and reach call 5 on a
			// loaded machine.
			failed, stderr, code := runJob(t, "8s", append([]string{"GOCCL_TIMEOUT=60s", "REC_FAULT=skip", "REC_VICTIM=3", "REC_AT=5"}, tc.env...)...)
			assert.Equal(t, launcher.ExitTimeout, code)
			// No rank's own wait ended. One that outlives its rank 0 for a
			// moment as goccl run stops the ranks sees that connection
			// close, and may say so before its own signal ends it.
			for r, l := range failed {
				assert.Contains(t, l, "rank 0 failed: communicator aborted: connection closed (process exited or aborted)", "rank %d failed other than by goccl run's stop", r)
			}
			summary := summaryOf(t, stderr)
			assert.Contains(t, summary, "rank 3 has not entered AllReduce #5 (int32, 4 KiB); ranks 0-2 wait in it since")
			assert.Contains(t, summary, "rank 3's last call: AllReduce #4, finished")
		})
	}
}

// TestPathsAndMetrics: a healthy job's ranks report, from their records,
// the algorithm and transport of every call, from their statistics the
// bus bandwidth (no link ceiling on the host backend), and their metrics
// endpoints serve the same.
func TestPathsAndMetrics(t *testing.T) {
	const iters = 10
	failed, lines, _, code := runJobOut(t, "60s", "REC_FAULT=report", "GOCCL_METRICS_ADDR=127.0.0.1:0", fmt.Sprintf("REC_ITERS=%d", iters))
	require.Zero(t, code)
	assert.Empty(t, failed)
	for r := 0; r < 4; r++ {
		var calls, stats, busbw, ceiling int
		for _, l := range lines[r] {
			switch {
			case strings.HasPrefix(l, "CALL "):
				calls++
				assert.Regexp(t, `^CALL seq=\d+ call=AllReduce algo=oneshot transport=shm state=finished$`, l, "rank %d", r)
			case strings.HasPrefix(l, "STAT "):
				stats++
				assert.Regexp(t, fmt.Sprintf(`^STAT call=AllReduce size=4096 count=%d busbw=\d+\.\d+ link=0 fraction=0$`, iters), l, "rank %d", r)
			case strings.HasPrefix(l, "METRIC goccl_busbw_gbps{"):
				busbw++
				assert.Contains(t, l, fmt.Sprintf(`rank="%d"`, r))
				assert.Contains(t, l, `call="AllReduce"`)
			case strings.HasPrefix(l, "METRIC goccl_link_ceiling_gbps"), strings.HasPrefix(l, "METRIC goccl_busbw_link_fraction"):
				ceiling++
			}
		}
		assert.Equal(t, iters, calls, "rank %d: a CALL line per call", r)
		assert.Equal(t, 1, stats, "rank %d: one size class", r)
		assert.Equal(t, 1, busbw, "rank %d: the endpoint's busbw", r)
		assert.Zero(t, ceiling, "rank %d: no link ceiling on the host backend", r)
		assert.Contains(t, lines[r], "OK", "rank %d", r)
	}
}
