package faults

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/launcher"
)

// tagged collects a launcher's tagged output ("[rank] line") by rank.
type tagged struct {
	mu    sync.Mutex
	lines map[int][]string
	all   bytes.Buffer
	moved chan struct{} // signalled on every line
}

func newTagged() *tagged { return &tagged{lines: map[int][]string{}, moved: make(chan struct{}, 1)} }

// feed reads r until it ends.
func (tg *tagged) feed(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l := sc.Text()
		tg.mu.Lock()
		tg.all.WriteString(l + "\n")
		if strings.HasPrefix(l, "[") {
			if end := strings.Index(l, "] "); end > 0 {
				if r, err := strconv.Atoi(l[1:end]); err == nil {
					tg.lines[r] = append(tg.lines[r], l[end+2:])
				}
			}
		}
		tg.mu.Unlock()
		select {
		case tg.moved <- struct{}{}:
		default:
		}
	}
}

// expect waits for rank's first line starting with prefix.
func (tg *tagged) expect(t *testing.T, rank int, prefix string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		tg.mu.Lock()
		for _, l := range tg.lines[rank] {
			if strings.HasPrefix(l, prefix) {
				tg.mu.Unlock()
				return l
			}
		}
		out := tg.all.String()
		tg.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("rank %d printed no %q within %v; output:\n%s", rank, prefix, d, out)
		}
		select {
		case <-tg.moved:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func rankEnv(extra ...string) []string {
	return append(append(os.Environ(), childVar+"=rank"), extra...)
}

// Scenario 1 under the launcher package: the killed rank ends the job;
// Run reports it (RankError, SIGKILL, exit code 137) and the survivors,
// which keep running through SIGTERM here, report it too.
func TestKillUnderLauncher(t *testing.T) {
	const np, victim = 3, 1
	j := launch(launcher.Config{
		NP:    np,
		Env:   rankEnv("FAULTS_COLL=allreduce", "FAULTS_COUNT=65536", "FAULTS_HB=1s", "FAULTS_TERM=catch"),
		Grace: 10 * time.Second, Timeout: 60 * time.Second,
	})
	pid := j.tg.runningPid(t, np, victim)
	t0 := time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	fs := j.tg.survivors(t, np, victim, t0, 10*time.Second)
	for _, f := range fs {
		assert.LessOrEqual(t, f.latency, 10*time.Second)
	}
	res, re := j.failedRank(t, 20*time.Second, "the launcher did not finish within 20 s of the kill")
	assert.Equal(t, victim, re.Status.Rank)
	assert.Equal(t, syscall.SIGKILL, re.Status.Signal)
	assert.Equal(t, 128+9, res.res.ExitCode)
	assert.Equal(t, victim, res.res.FirstFailed)
	assert.Contains(t, res.err.Error(), fmt.Sprintf("rank %d was killed by signal 9", victim))
	t.Logf("survivors' worst time to error %v; launcher done after %v", worst(fs), time.Since(t0))
}

// gocclDir holds the goccl binary built for this test binary run; TestMain
// removes it.
var gocclDir string

// goccl builds cmd/goccl once per test binary run.
var goccl = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	dir, err := os.MkdirTemp("", "goccl-faults-bin-")
	if err != nil {
		return "", err
	}
	gocclDir = dir
	bin := filepath.Join(dir, "goccl")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/goccl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/goccl: %w\n%s", err, out)
	}
	return bin, nil
})

// Scenario 1 through `goccl run`: the launcher exits non-zero (137, the
// killed rank's status) and names the rank on stderr.
func TestKillUnderGocclRun(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool to build cmd/goccl")
	}
	bin, err := goccl()
	require.NoError(t, err)
	const victim = 2
	cmd := exec.Command(bin, "run", "-np", "3", "--tag-output", "--grace", "5s", "--timeout", "60s", os.Args[0], "-test.run=^$")
	cmd.Env = rankEnv("FAULTS_COLL=reducescatter", "FAULTS_COUNT=4096", "FAULTS_HB=1s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	tg := newTagged()
	fed := make(chan struct{})
	go func() { tg.feed(out); close(fed) }()
	pid := tg.runningPid(t, 3, victim)
	t0 := time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	waited := make(chan error, 1)
	go func() { <-fed; waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-time.After(20 * time.Second):
		t.Fatal("goccl run did not exit within 20 s of the kill")
	}
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "goccl run must exit non-zero, got %v", err)
	assert.Equal(t, 137, ee.ExitCode())
	assert.Contains(t, stderr.String(), fmt.Sprintf("rank %d was killed by signal 9", victim))
	t.Logf("goccl run exited %d after %v; stderr: %s", ee.ExitCode(), time.Since(t0), strings.TrimSpace(stderr.String()))
}

// Scenario 2 under the launcher: SIGSTOP one rank. The survivors fail
// naming it; the launcher finds it stopped when the first survivor exits,
// kills it after the grace (SIGTERM cannot act on a stopped process) and
// reports it, not the survivor reaped first, as the rank that failed.
func TestStopUnderLauncher(t *testing.T) {
	const np, victim = 3, 1
	j := launch(launcher.Config{
		NP:    np,
		Env:   rankEnv("FAULTS_COLL=allreduce", "FAULTS_COUNT=4096", "FAULTS_HB=500ms", "GOCCL_TIMEOUT=60s"),
		Grace: 2 * time.Second, Timeout: 60 * time.Second,
	})
	pid := j.tg.runningPid(t, np, victim)
	t0 := time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	fs := j.tg.survivors(t, np, victim, t0, 10*time.Second)
	res, re := j.failedRank(t, 20*time.Second, "the launcher did not finish within 20 s of the stop")
	assert.Equal(t, victim, re.Status.Rank, "the stopped rank, not a survivor, failed first")
	assert.True(t, re.Status.Frozen, "reported as stopped")
	assert.Equal(t, syscall.SIGKILL, re.Status.Signal, "killed after the grace")
	assert.Equal(t, victim, res.res.FirstFailed)
	assert.Equal(t, 128+9, res.res.ExitCode)
	assert.Contains(t, res.err.Error(), fmt.Sprintf("rank %d was stopped (not running) when the job failed", victim))
	t.Logf("survivors' worst time to error %v; launcher done after %v: %v", worst(fs), time.Since(t0), res.err)
}
