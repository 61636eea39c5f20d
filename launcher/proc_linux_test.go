package launcher

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// processStopped follows SIGSTOP and SIGCONT of a real process.
func TestProcessStopped(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1) to run")
	}
	cmd := exec.Command(sleep, "30")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	within := func(want bool) bool {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if processStopped(pid) == want {
				return true
			}
		}
		return false
	}
	assert.True(t, within(false), "running")
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	assert.True(t, within(true), "stopped")
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	assert.True(t, within(false), "continued")
	assert.False(t, processStopped(os.Getpid()), "this process runs")
	assert.False(t, processStopped(1<<30), "no such process")
}

func TestFrozenStatusDescribe(t *testing.T) {
	st := RankStatus{Rank: 1, Exited: true, ExitCode: -1, Signal: syscall.SIGKILL, Frozen: true}
	assert.Equal(t, "rank 1 was stopped (not running) when the job failed: its peers gave up on it; killed by signal 9 (killed) after the grace",
		(&RankError{Status: st}).Error())
	assert.Equal(t, 137, st.Code())
}
