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

// The victim (rank 3) misbehaves at call 5 of 10. Every survivor's error
// and goccl run's summary name it and the call.
func TestStragglerNamed(t *testing.T) {
	const victim, at = 3, 5
	cases := []struct {
		fault     string
		env       []string
		survivors []int
		want      []string // in every survivor's error and in goccl run's summary
		noSummary bool     // goccl run reads the files, which the job could not write
	}{
		{"skip", nil, []int{0, 1, 2}, []string{
			"rank 3 has not entered AllReduce #5 (int32, 4 KiB); ranks 0-2 wait in it since",
			"rank 3's last call: AllReduce #4, finished",
		}, false},
		{"other", nil, []int{0, 1, 2, 3}, []string{
			"ranks are in different calls #5: rank 3 in AllGather #5 (int32, 4 KiB), while ranks 0-2 are in AllReduce #5 (int32, 4 KiB)",
		}, false},
		{"stop", nil, []int{0, 1, 2}, []string{
			"ranks 0-2 wait in AllReduce #5 (int32, 4 KiB) since",
			"rank 3 gave no record (stopped, hung or dead)",
		}, false},
		// The records meet over the bootstrap where no file can be written.
		{"skip", []string{"GOCCL_RECORDER_DIR=/dev/null/none"}, []int{0, 1, 2}, []string{
			"rank 3 has not entered AllReduce #5 (int32, 4 KiB); ranks 0-2 wait in it since",
			"rank 3's last call: AllReduce #4, finished",
		}, true},
		// A rank that closed its communicator and exited left its record.
		// (A survivor that learns of the close before it enters call 5
		// fails at its entry, and is named among those not in it too.)
		{"close", nil, []int{0, 1, 2}, []string{
			"not entered AllReduce #5 (int32, 4 KiB)",
			"rank 3's last call: AllReduce #4, finished, then it closed its communicator",
		}, false},
		{"close", []string{"GOCCL_RECORDER_DIR=/dev/null/none"}, []int{0, 1, 2}, []string{
			"not entered AllReduce #5 (int32, 4 KiB)",
			"rank 3's last call: AllReduce #4, finished, then it closed its communicator",
		}, true},
	}
	for _, tc := range cases {
		name := tc.fault
		if tc.noSummary {
			name += " without files"
		}
		t.Run(name, func(t *testing.T) {
			env := append([]string{"REC_FAULT=" + tc.fault, fmt.Sprintf("REC_VICTIM=%d", victim), fmt.Sprintf("REC_AT=%d", at)}, tc.env...)
			failed, stderr, code := runJob(t, "60s", env...)
			assert.NotZero(t, code)
			for _, r := range tc.survivors {
				l, ok := failed[r]
				require.True(t, ok, "rank %d printed no FAILED line", r)
				for _, w := range tc.want {
					assert.Contains(t, l, "flight recorder: ", "rank %d", r)
					assert.Contains(t, l, w, "rank %d", r)
				}
			}
			if tc.noSummary {
				return
			}
			summary := summaryOf(t, stderr)
			for _, w := range tc.want {
				assert.Contains(t, summary, w)
			}
		})
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
// records before it stops them and names the straggler from them.
func TestStragglerNamedOnJobTimeout(t *testing.T) {
	failed, stderr, code := runJob(t, "4s", "GOCCL_TIMEOUT=60s", "REC_FAULT=skip", "REC_VICTIM=3", "REC_AT=5")
	assert.Equal(t, launcher.ExitTimeout, code)
	assert.Empty(t, failed, "no rank's call failed")
	summary := summaryOf(t, stderr)
	assert.Contains(t, summary, "rank 3 has not entered AllReduce #5 (int32, 4 KiB); ranks 0-2 wait in it since")
	assert.Contains(t, summary, "rank 3's last call: AllReduce #4, finished")
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
