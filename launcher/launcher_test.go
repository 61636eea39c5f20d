package launcher

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/syncbuf"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// job is a Config running this test binary as the ranks' program.
func job(t *testing.T, np int, args ...string) (Config, *syncbuf.Buffer, *syncbuf.Buffer, string) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	out, errb := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	return Config{
		NP:      np,
		Program: self,
		Args:    args,
		Env:     append(os.Environ(), childEnv+"=1", childDir+"="+dir),
		Stdout:  out,
		Stderr:  errb,
		Grace:   2 * time.Second,
		Logger:  slog.New(slog.DiscardHandler),
	}, out, errb, dir
}

// waitFiles waits until every named file exists in dir and returns the
// pids they hold.
func waitFiles(t *testing.T, dir string, names ...string) []int {
	t.Helper()
	pids := make([]int, len(names))
	deadline := time.Now().Add(20 * time.Second)
	for i, n := range names {
		for {
			b, err := os.ReadFile(filepath.Join(dir, n))
			if err == nil {
				pids[i], err = strconv.Atoi(string(b))
				require.NoError(t, err)
				break
			}
			require.True(t, time.Now().Before(deadline), "timed out waiting for %s", n)
			time.Sleep(10 * time.Millisecond)
		}
	}
	return pids
}

func readyNames(np int) []string {
	n := make([]string, np)
	for i := range n {
		n[i] = "ready." + strconv.Itoa(i)
	}
	return n
}

// processGone reports whether pid no longer runs (absent, or a zombie
// waiting for a reaper that is not us).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// Field 3, after the parenthesised command name, is the state.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

func waitGone(t *testing.T, within time.Duration, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, pid := range pids {
		for !processGone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still alive %v later", pid, within)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    Config
		wantErr error
		errText string
	}{
		{name: "np", args: []string{"-np", "4", "prog", "a", "b"},
			want: Config{NP: 4, Program: "prog", Args: []string{"a", "b"}}},
		{name: "double dash np with =", args: []string{"--np=2", "prog"},
			want: Config{NP: 2, Program: "prog", Args: []string{}}},
		{name: "n", args: []string{"-n", "3", "prog"},
			want: Config{NP: 3, Program: "prog", Args: []string{}}},
		{name: "all flags", args: []string{"-np", "2", "--tag-output", "--timeout", "5s", "--grace", "250ms", "prog"},
			want: Config{NP: 2, Program: "prog", Args: []string{}, TagOutput: true, Timeout: 5 * time.Second, Grace: 250 * time.Millisecond}},
		{name: "bare seconds", args: []string{"-np", "1", "--timeout", "90", "prog"},
			want: Config{NP: 1, Program: "prog", Args: []string{}, Timeout: 90 * time.Second}},
		{name: "program flags stay the program's", args: []string{"-np", "2", "goccl", "bench", "-np", "7", "--timeout", "x"},
			want: Config{NP: 2, Program: "goccl", Args: []string{"bench", "-np", "7", "--timeout", "x"}}},
		{name: "separator", args: []string{"-np", "2", "--", "-weird", "x"},
			want: Config{NP: 2, Program: "-weird", Args: []string{"x"}}},
		{name: "missing np", args: []string{"prog"}, wantErr: ErrConfig, errText: "-np N is required"},
		{name: "missing program", args: []string{"-np", "2"}, wantErr: ErrConfig, errText: "no program"},
		{name: "bad np", args: []string{"-np", "four", "prog"}, errText: "invalid value \"four\""},
		{name: "bad duration", args: []string{"-np", "2", "--timeout", "soon", "prog"}, errText: "not a duration"},
		{name: "unknown flag", args: []string{"-np", "2", "--tagoutput", "prog"}, errText: "flag provided but not defined"},
		{name: "help", args: []string{"-h"}, wantErr: flag.ErrHelp},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var usage bytes.Buffer
			got, err := ParseArgs(tc.args, &usage)
			if tc.wantErr == nil && tc.errText == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
			}
			assert.Contains(t, err.Error(), tc.errText)
		})
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	base, _, _, _ := job(t, 2, "sleep")
	tests := []struct {
		name   string
		mutate func(*Config)
		text   string
	}{
		{"zero ranks", func(c *Config) { c.NP = 0 }, "number of ranks 0"},
		{"too many ranks", func(c *Config) { c.NP = MaxRanks + 1 }, "number of ranks 1025"},
		{"no program", func(c *Config) { c.Program = "" }, "no program"},
		// The program is named once, with what is wrong with it.
		{"missing program", func(c *Config) { c.Program = "/nonexistent/goccl-prog" }, `program "/nonexistent/goccl-prog": no such file or directory`},
		{"program not on PATH", func(c *Config) { c.Program = "goccl-no-such-prog" }, `program "goccl-no-such-prog": executable file not found in $PATH`},
		{"directory as program", func(c *Config) { c.Program = "/" }, `program "/": is a directory`},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, "timeout -1s is negative"},
		{"negative grace", func(c *Config) { c.Grace = -time.Second }, "grace period -1s is negative"},
		{"bad port", func(c *Config) { c.Port = 70000 }, "port 70000"},
		{"bad dir", func(c *Config) { c.Dir = "/nonexistent/dir" }, `working directory "/nonexistent/dir"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(&cfg)
			res, err := Run(context.Background(), cfg)
			require.ErrorIs(t, err, ErrConfig)
			assert.Contains(t, err.Error(), tc.text)
			assert.NotContains(t, err.Error(), "exec:", "the program named twice")
			assert.Equal(t, ExitConfig, res.ExitCode)
			assert.Empty(t, res.Ranks, "nothing may be started")
		})
	}
}

func TestRankEnvReplacesIdentities(t *testing.T) {
	base := []string{"PATH=/bin", "RANK=9", "OMPI_COMM_WORLD_RANK=3", "SLURM_PROCID=5",
		"PMI_RANK=1", "GOCCL_COMM_ID=10.0.0.1:1", "KEEP_ME=yes", "MASTER_PORTAL=kept"}
	env := RankEnv(base, "127.0.0.1", 29500, 2, 4, "ab")
	seen := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		require.True(t, ok, kv)
		_, dup := seen[k]
		require.False(t, dup, "variable %s appears twice", k)
		seen[k] = v
	}
	assert.Equal(t, map[string]string{
		"PATH": "/bin", "KEEP_ME": "yes", "MASTER_PORTAL": "kept",
		"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "2", "WORLD_SIZE": "4",
		"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4", "GOCCL_COMM_ID": "127.0.0.1:29500",
		"GOCCL_JOB_TOKEN": "ab",
	}, seen)
}

func TestEnvironmentContract(t *testing.T) {
	const np = 3
	cfg, out, errb, _ := job(t, np, "env")
	cfg.Env = append(cfg.Env, "KEEP_ME=kept", "OMPI_COMM_WORLD_RANK=5", "SLURM_PROCID=6", "RANK=42")
	cfg.TagOutput = true
	res, err := Run(context.Background(), cfg)
	require.NoError(t, err, "stderr: %s", errb.String())
	require.Equal(t, 0, res.ExitCode)
	require.Regexp(t, `^[0-9a-f]{32}$`, res.Token)
	require.Greater(t, res.Port, 0)

	got := map[int]map[string]string{}
	line := regexp.MustCompile(`^\[(\d+)\] ([A-Z_]+)=(.*)$`)
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		m := line.FindStringSubmatch(l)
		require.NotNil(t, m, "unexpected line %q", l)
		r, _ := strconv.Atoi(m[1])
		if got[r] == nil {
			got[r] = map[string]string{}
		}
		got[r][m[2]] = m[3]
	}
	port := strconv.Itoa(res.Port)
	for r := 0; r < np; r++ {
		assert.Equal(t, map[string]string{
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
			"RANK": strconv.Itoa(r), "WORLD_SIZE": "3",
			"LOCAL_RANK": strconv.Itoa(r), "LOCAL_WORLD_SIZE": "3",
			"GOCCL_COMM_ID": "127.0.0.1:" + port, "GOCCL_JOB_TOKEN": res.Token,
			"KEEP_ME": "kept",
		}, got[r], "rank %d", r)
	}
	// Two jobs never share a token.
	res2, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	assert.NotEqual(t, res.Token, res2.Token)
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name      string
		np        int
		args      []string
		wantCode  int
		wantRank  int // -1: success
		wantSig   syscall.Signal
		describes string
	}{
		{"all succeed", 4, []string{"exit", "-1", "0"}, 0, -1, 0, ""},
		{"one rank", 1, []string{"exit", "0", "0"}, 0, -1, 0, ""},
		{"rank 2 exits 3", 4, []string{"exit", "2", "3"}, 3, 2, 0, "rank 2 exited with status 3"},
		{"rank 0 exits 1", 2, []string{"exit", "0", "1"}, 1, 0, 0, "rank 0 exited with status 1"},
		{"exit 255", 3, []string{"exit", "1", "255"}, 255, 1, 0, "rank 1 exited with status 255"},
		{"SIGKILL", 3, []string{"selfkill", "1", "9"}, 137, 1, syscall.SIGKILL, "rank 1 was killed by signal 9 (killed)"},
		{"SIGTERM", 2, []string{"selfkill", "0", "15"}, 143, 0, syscall.SIGTERM, "rank 0 was killed by signal 15 (terminated)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, errb, _ := job(t, tc.np, tc.args...)
			res, err := Run(context.Background(), cfg)
			assert.Equal(t, tc.wantCode, res.ExitCode)
			assert.Equal(t, tc.wantRank, res.FirstFailed)
			require.Len(t, res.Ranks, tc.np)
			if tc.wantRank < 0 {
				require.NoError(t, err, "stderr: %s", errb.String())
				for _, st := range res.Ranks {
					assert.True(t, st.Exited)
					assert.Equal(t, 0, st.Code())
				}
				return
			}
			require.ErrorIs(t, err, ErrRankFailed)
			var re *RankError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, tc.wantRank, re.Status.Rank)
			assert.Equal(t, tc.wantSig, re.Status.Signal)
			assert.Equal(t, tc.describes, err.Error())
			assert.False(t, res.Ranks[tc.wantRank].Stopped, "the failing rank was not stopped by the launcher")
		})
	}
}

func TestKillOnFailure(t *testing.T) {
	tests := []struct {
		name     string
		mode     string
		grace    time.Duration
		wantSig  syscall.Signal
		minTime  time.Duration
		maxTime  time.Duration
		failRank int
	}{
		// Sleeping ranks die on the SIGTERM at once, long before the
		// grace would end (the bound leaves a loaded machine time to start
		// the ranks).
		{"SIGTERM stops sleepers", "sleep", 30 * time.Second, syscall.SIGTERM, 0, 15 * time.Second, 1},
		// Ranks ignoring SIGTERM get SIGKILL after the grace period.
		{"SIGKILL after grace", "ignoreterm", 400 * time.Millisecond, syscall.SIGKILL, 400 * time.Millisecond, 15 * time.Second, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const np = 4
			cfg, _, _, dir := job(t, np, "failsleep", strconv.Itoa(tc.failRank), "5")
			cfg.Grace = tc.grace
			if tc.mode == "ignoreterm" {
				// The failing rank uses failsleep; the others ignore SIGTERM.
				cfg.Program = "/bin/sh"
				self, _ := os.Executable()
				cfg.Args = []string{"-c", fmt.Sprintf(`if [ "$RANK" = %d ]; then exec %q failsleep %d 5; else exec %q ignoreterm; fi`,
					tc.failRank, self, tc.failRank, self)}
			}
			start := time.Now()
			res, err := Run(context.Background(), cfg)
			took := time.Since(start)
			require.ErrorIs(t, err, ErrRankFailed)
			assert.Equal(t, 5, res.ExitCode)
			assert.Equal(t, tc.failRank, res.FirstFailed)
			assert.Less(t, took, tc.maxTime)
			pids := waitFiles(t, dir, readyNames(np)...) // every rank had started
			for r, st := range res.Ranks {
				assert.True(t, processGone(pids[r]), "rank %d still running", r)
				if r == tc.failRank {
					continue
				}
				assert.True(t, st.Stopped, "rank %d", r)
				assert.Equal(t, tc.wantSig, st.Signal, "rank %d: %s", r, st.Describe())
				assert.GreaterOrEqual(t, st.Duration, tc.minTime, "rank %d", r)
			}
		})
	}
}

func TestTagOutput(t *testing.T) {
	const np, n = 3, 60
	for _, tag := range []bool{true, false} {
		t.Run(fmt.Sprintf("tag=%v", tag), func(t *testing.T) {
			cfg, out, errb, _ := job(t, np, "lines", strconv.Itoa(n))
			cfg.TagOutput = tag
			_, err := Run(context.Background(), cfg)
			require.NoError(t, err)

			outLine := regexp.MustCompile(`^(?:\[(\d+)\] )?out (\d+) (\d+) (x+)$`)
			longLine := regexp.MustCompile(`^(?:\[(\d+)\] )?long (\d+) (y+)$`)
			tailLine := regexp.MustCompile(`^(?:\[(\d+)\] )?tail (\d+)$`)
			next := make([]int, np)
			longs, tails := make([]int, np), make([]int, np)
			sc := bufio.NewScanner(strings.NewReader(out.String()))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				l := sc.Text()
				check := func(m []string) int {
					r, _ := strconv.Atoi(m[2])
					if tag {
						assert.Equal(t, m[1], m[2], "tag and content disagree in %q", l)
					} else {
						assert.Empty(t, m[1], "untagged output has a tag: %q", l)
					}
					return r
				}
				switch {
				case outLine.MatchString(l):
					m := outLine.FindStringSubmatch(l)
					r := check(m)
					i, _ := strconv.Atoi(m[3])
					assert.Equal(t, next[r], i, "rank %d lines out of order", r)
					assert.Len(t, m[4], 40+i, "line %q cut", l)
					next[r] = i + 1
				case longLine.MatchString(l):
					m := longLine.FindStringSubmatch(l)
					longs[check(m)]++
					assert.Len(t, m[3], 200<<10)
				case tailLine.MatchString(l):
					tails[check(tailLine.FindStringSubmatch(l))]++
				default:
					t.Fatalf("stdout line mixed or foreign: %.120q", l)
				}
			}
			require.NoError(t, sc.Err())
			for r := 0; r < np; r++ {
				assert.Equal(t, n, next[r], "rank %d stdout lines", r)
				assert.Equal(t, 1, longs[r], "rank %d long line", r)
				assert.Equal(t, 1, tails[r], "rank %d line without newline", r)
			}

			errLine := regexp.MustCompile(`^(?:\[(\d+)\] )?err (\d+) (\d+)$`)
			counts := make([]int, np)
			for _, l := range strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n") {
				m := errLine.FindStringSubmatch(l)
				require.NotNil(t, m, "stderr line mixed or foreign: %q", l)
				if tag {
					assert.Equal(t, m[1], m[2])
				}
				r, _ := strconv.Atoi(m[2])
				counts[r]++
			}
			assert.Equal(t, []int{n, n, n}, counts)
		})
	}
}

func TestSignalForwarding(t *testing.T) {
	const np = 3
	cfg, out, _, dir := job(t, np, "trap")
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	cfg.TagOutput = true
	type ret struct {
		res Result
		err error
	}
	done := make(chan ret, 1)
	go func() {
		res, err := Run(context.Background(), cfg)
		done <- ret{res, err}
	}()
	waitFiles(t, dir, readyNames(np)...)
	sigs <- syscall.SIGINT
	var r ret
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("job did not end after SIGINT")
	}
	require.ErrorIs(t, r.err, ErrRankFailed)
	assert.Equal(t, 7, r.res.ExitCode)
	for i := 0; i < np; i++ {
		assert.Contains(t, out.String(), fmt.Sprintf("[%d] rank %d got interrupt\n", i, i))
	}
}

// launcherProc starts this test binary as a `goccl run` process. Its
// output goes to files, not pipes, so that waiting for the launcher does
// not wait for whoever else holds its output (a rank it left behind).
func launcherProc(t *testing.T, dir string, args ...string) (cmd *exec.Cmd, stdout, stderr func() string) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd = exec.Command(self, append([]string{"launch"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1", childDir+"="+dir)
	files := make([]*os.File, 2)
	for i, name := range []string{"launcher.out", "launcher.err"} {
		files[i], err = os.Create(filepath.Join(t.TempDir(), name))
		require.NoError(t, err)
		t.Cleanup(func() { _ = files[i].Close() })
	}
	cmd.Stdout, cmd.Stderr = files[0], files[1]
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	read := func(f *os.File) func() string {
		return func() string {
			b, err := os.ReadFile(f.Name())
			require.NoError(t, err)
			return string(b)
		}
	}
	return cmd, read(files[0]), read(files[1])
}

func TestLauncherProcessForwardsSIGTERM(t *testing.T) {
	const np = 3
	dir := t.TempDir()
	self, _ := os.Executable()
	cmd, stdout, stderr := launcherProc(t, dir, "-np", strconv.Itoa(np), "--tag-output", self, "trap")
	waitFiles(t, dir, readyNames(np)...)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 7, ee.ExitCode())
	for i := 0; i < np; i++ {
		assert.Contains(t, stdout(), fmt.Sprintf("[%d] rank %d got terminated\n", i, i))
	}
	assert.Regexp(t, `goccl run: rank \d exited with status 7\n`, stderr())
}

func TestLauncherReportsFailingRank(t *testing.T) {
	self, _ := os.Executable()
	var out, errb syncbuf.Buffer
	t.Setenv(childEnv, "1")
	code := Main([]string{"-np", "4", "--grace", "1s", self, "exit", "2", "3"}, &out, &errb)
	assert.Equal(t, 3, code)
	assert.Contains(t, errb.String(), "goccl run: rank 2 exited with status 3\n")

	errb = syncbuf.Buffer{}
	code = Main([]string{"-np", "2", "--timeout", "300ms", "--grace", "1s", self, "sleep"}, &out, &errb)
	assert.Equal(t, ExitTimeout, code)
	assert.Contains(t, errb.String(), "goccl run: job timed out after 300ms; ranks still running: 0,1\n")
	assert.Contains(t, errb.String(), "goccl run: stopped 2 rank(s)\n")

	errb = syncbuf.Buffer{}
	code = Main([]string{"-np", "2"}, &out, &errb)
	assert.Equal(t, ExitConfig, code)
	assert.Contains(t, errb.String(), "no program to run")
	assert.Contains(t, errb.String(), "usage: goccl run")
}

func TestTimeout(t *testing.T) {
	tests := []struct {
		name string
		args []string
		hung string
	}{
		{"all ranks hang", []string{"sleep"}, "0,1,2"},
		{"rank 0 finished", []string{"failsleep", "0", "0"}, "1,2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const np = 3
			cfg, _, _, dir := job(t, np, tc.args...)
			// Long enough for every rank to start (and rank 0 to finish)
			// on a loaded machine, even under -race.
			cfg.Timeout = 5 * time.Second
			start := time.Now()
			res, err := Run(context.Background(), cfg)
			took := time.Since(start)
			require.ErrorIs(t, err, ErrTimeout)
			assert.Equal(t, "job timed out after 5s; ranks still running: "+tc.hung, err.Error())
			assert.True(t, res.TimedOut)
			assert.Equal(t, ExitTimeout, res.ExitCode)
			assert.Equal(t, -1, res.FirstFailed, "ranks stopped by the timeout are not failures")
			assert.GreaterOrEqual(t, took, 5*time.Second)
			assert.Less(t, took, 15*time.Second)
			pids := waitFiles(t, dir, readyNames(np)...)
			for r, st := range res.Ranks {
				assert.True(t, processGone(pids[r]))
				if strings.Contains(tc.hung, strconv.Itoa(r)) {
					assert.True(t, st.Stopped, "rank %d", r)
					assert.Equal(t, syscall.SIGTERM, st.Signal, "rank %d", r)
				} else {
					assert.False(t, st.Stopped, "rank %d", r)
					assert.Equal(t, 0, st.Code(), "rank %d", r)
				}
			}
		})
	}
}

func TestContextCancel(t *testing.T) {
	const np = 2
	cfg, _, _, dir := job(t, np, "sleep")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitFiles(t, dir, readyNames(np)...)
		cancel()
	}()
	res, err := Run(ctx, cfg)
	require.ErrorIs(t, err, ErrCanceled)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotEqual(t, 0, res.ExitCode)
	for _, st := range res.Ranks {
		assert.True(t, st.Exited && st.Stopped)
	}
}

func TestNoOrphansWhenLauncherKilled(t *testing.T) {
	const np = 3
	dir := t.TempDir()
	self, _ := os.Executable()
	cmd, _, stderr := launcherProc(t, dir, "-np", strconv.Itoa(np), self, "sleep")
	pids := waitFiles(t, dir, readyNames(np)...)
	t.Cleanup(func() { killStrays(self, pids) })
	for _, pid := range pids {
		require.False(t, processGone(pid), "rank %d not running", pid)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	waitGone(t, time.Second, pids...)
	t.Log(stderr())
}

func TestGrandchildrenStopped(t *testing.T) {
	cfg, _, errb, dir := job(t, 2, "spawn")
	res, err := Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrRankFailed, "stderr: %s", errb.String())
	assert.Equal(t, 1, res.FirstFailed)
	gc := waitFiles(t, dir, "grandchild")
	// The grandchild shares rank 0's process group, so the teardown
	// reached it although rank 0 never forwarded anything.
	waitGone(t, time.Second, gc...)
}

// A destination that fails must not wedge the ranks.
func TestBrokenOutput(t *testing.T) {
	cfg, _, _, _ := job(t, 2, "lines", "20")
	cfg.Stdout = failWriter{}
	cfg.TagOutput = true
	done := make(chan error, 1)
	go func() { _, err := Run(context.Background(), cfg); done <- err }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("job wedged on a failing writer")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// killStrays kills those of pids that still run this test binary (so a
// failed orphan test leaves nothing behind either).
func killStrays(self string, pids []int) {
	for _, pid := range pids {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && exe == self && !processGone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// A rank that cannot start ends the job at once: the ranks already started
// are killed and reaped, and the error names the rank.
func TestStartFailureKillsStartedRanks(t *testing.T) {
	cfg, _, _, dir := job(t, 4, "sleep")
	boom := errors.New("injected")
	startFault = func(r int) error {
		if r == 2 {
			waitFiles(t, dir, "ready.0", "ready.1") // the first two are up
			return boom
		}
		return nil
	}
	t.Cleanup(func() { startFault = nil })
	start := time.Now()
	res, err := Run(context.Background(), cfg)
	require.ErrorIs(t, err, ErrStart)
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "cannot start rank 2")
	assert.Equal(t, ExitInternal, res.ExitCode)
	assert.Less(t, time.Since(start), 10*time.Second)
	pids := waitFiles(t, dir, "ready.0", "ready.1")
	for r, pid := range pids {
		assert.True(t, res.Ranks[r].Exited, "rank %d reaped", r)
		assert.Equal(t, syscall.SIGKILL, res.Ranks[r].Signal)
		assert.True(t, processGone(pid))
	}
	assert.False(t, res.Ranks[2].Exited)
	assert.False(t, res.Ranks[3].Exited)
}

func TestCanceledBeforeStart(t *testing.T) {
	cfg, _, _, dir := job(t, 2, "sleep")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, cfg)
	require.ErrorIs(t, err, ErrCanceled)
	entries, _ := os.ReadDir(dir)
	assert.Empty(t, entries, "no rank may start")
}
