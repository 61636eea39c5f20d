package launcher

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/recorder"
)

func TestRecorderDir(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	c := Config{Env: []string{"A=1"}, Logger: slog.New(slog.DiscardHandler)}
	dir, cleanup := recorderDir(&c, "tok")
	assert.Equal(t, filepath.Join(os.TempDir(), "goccl-run-tok"), dir)
	assert.Equal(t, []string{"A=1", EnvRecorderDir + "=" + dir}, c.Env)
	require.NoError(t, os.MkdirAll(dir, 0o755)) // as a rank would
	cleanup()
	assert.NoDirExists(t, dir, "the launcher's own directory goes with the job")

	mine := t.TempDir()
	c = Config{Env: []string{EnvRecorderDir + "=" + mine}}
	dir, cleanup = recorderDir(&c, "tok")
	assert.Equal(t, mine, dir)
	assert.Len(t, c.Env, 1)
	cleanup()
	assert.DirExists(t, mine, "the caller's directory stays")
}

func TestCatches(t *testing.T) {
	// Go programs catch every signal; sleep(1) catches none.
	assert.True(t, Catches(os.Getpid(), syscall.SIGUSR1))
	cmd := exec.Command("sleep", "5")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	time.Sleep(100 * time.Millisecond) // exec has replaced the forked Go image
	assert.False(t, Catches(cmd.Process.Pid, syscall.SIGUSR1))
	assert.False(t, Catches(1<<30, syscall.SIGUSR1), "no such process")
}

func TestSummarize(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	old := &recorder.Record{Version: 1, Meta: recorder.Meta{Comm: "old", Rank: 0, Size: 1}, Written: start.Add(-time.Hour).UnixNano()}
	_, err := recorder.WriteFile(dir, old)
	require.NoError(t, err)
	assert.Empty(t, summarize(nil, dir, start, 1, nil), "an earlier job's records are not this job's")
	for r := 0; r < 2; r++ {
		rec := &recorder.Record{Version: 1, Meta: recorder.Meta{Comm: "c", Rank: r, Size: 2}, Written: start.Add(2 * time.Second).UnixNano()}
		rec.Calls = []recorder.Call{{Seq: 1, Call: "AllReduce", Type: "int32", Count: 4, Peer: -1, State: "finished"}}
		if r == 0 {
			rec.Calls = append(rec.Calls, recorder.Call{Seq: 2, Call: "AllReduce", Type: "int32", Count: 4, Peer: -1, State: "started", Start: start.UnixNano()})
		}
		_, err := recorder.WriteFile(dir, rec)
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"rank 1 has not entered AllReduce #2 (int32, 16 B); rank 0 waits in it since 2.0 s; rank 1's last call: AllReduce #1, finished"}, summarize(nil, dir, start, 2, nil))
	assert.Nil(t, summarize(nil, "", start, 2, nil))
}

// TestFates: what the summary says of a rank without a record is what
// the launcher saw, not its own teardown of the job.
func TestFates(t *testing.T) {
	cases := []struct {
		name   string
		st     RankStatus
		killed bool // the launcher's SIGKILL went out
		want   string
	}{
		{"stopped, then killed after the grace", RankStatus{Exited: true, Frozen: true, Stopped: true, Signal: syscall.SIGKILL, ExitCode: -1}, true, "stopped by a signal, not running"},
		{"stopped, still there", RankStatus{Frozen: true}, false, "stopped by a signal, not running"},
		{"killed by another", RankStatus{Exited: true, Signal: syscall.SIGKILL, ExitCode: -1}, false, "killed by signal 9 (killed)"},
		{"segfault", RankStatus{Exited: true, Signal: syscall.SIGSEGV, ExitCode: -1}, false, "killed by signal 11 (segmentation fault)"},
		{"exited on its own", RankStatus{Exited: true, ExitCode: 3}, false, "exited with status 3"},
		{"the launcher's SIGTERM", RankStatus{Exited: true, Stopped: true, Signal: syscall.SIGTERM, ExitCode: -1}, false, ""},
		{"the launcher's SIGKILL", RankStatus{Exited: true, Stopped: true, Signal: syscall.SIGKILL, ExitCode: -1}, true, ""},
		{"exited after the launcher's SIGTERM", RankStatus{Exited: true, Stopped: true, ExitCode: 1}, false, ""},
		{"running", RankStatus{}, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st
			st.Rank = 2
			j := jobRun{res: &Result{Ranks: []RankStatus{{Rank: 0}, {Rank: 1}, st}}, killed: tc.killed}
			got, ok := j.fates()[2]
			assert.Equal(t, tc.want != "", ok)
			assert.Equal(t, tc.want, got)
			assert.NotContains(t, j.fates(), 0, "a running rank has no fate")
		})
	}
}
