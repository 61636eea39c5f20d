package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// binDir holds the binaries built for this run; see bin.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "goccl-tests-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// build is one binary built on first use.
type build struct {
	once sync.Once
	path string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
)

// moduleRoot is the directory holding go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the goccl module")
	}
	return filepath.Dir(mod), nil
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}

// bin builds the main package at pkg (a module-relative path such as
// "./cmd/goccl") once per test run and returns the binary. A package that
// does not build fails the test with the compiler's output: the binaries
// these tests need are part of the project, not optional.
func bin(t *testing.T, pkg string) string {
	t.Helper()
	buildsMu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &build{}
		builds[pkg] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(binDir, strings.ReplaceAll(strings.Trim(pkg, "./"), "/", "_"))
		cmd := exec.Command(goTool(), "build", "-o", b.path, pkg)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatalf("cannot build %s, which this test runs:\n%v", pkg, b.err)
	}
	return b.path
}

// jobResult is how a `goccl run` job ended.
type jobResult struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

func (r jobResult) String() string {
	return fmt.Sprintf("exit %d after %v\n--- stdout (tail)\n%s\n--- stderr (tail)\n%s",
		r.code, r.took.Round(time.Millisecond), tail(r.stdout, 4000), tail(r.stderr, 4000))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// hostEnv is the environment of every job here: the host backend, so the
// tests mean the same thing on machines with and without GPUs.
func hostEnv(extra ...string) []string {
	return append(append(os.Environ(), "GOCCL_BACKEND=host"), extra...)
}

// runJob runs `goccl run -np np --timeout limit prog args...` and waits.
// The launcher's own timeout stops a hung job and says so; the context is
// a backstop should the launcher itself hang.
func runJob(t *testing.T, env []string, np int, limit time.Duration, runFlags []string, prog string, args ...string) jobResult {
	t.Helper()
	return runJobIn(t, "", env, np, limit, runFlags, prog, args...)
}

// runJobIn is runJob with the job's working directory.
func runJobIn(t *testing.T, dir string, env []string, np int, limit time.Duration, runFlags []string, prog string, args ...string) jobResult {
	t.Helper()
	goccl := bin(t, "./cmd/goccl")
	argv := append([]string{"run", "-np", fmt.Sprint(np), "--timeout", limit.String(), "--grace", "5s"}, runFlags...)
	argv = append(append(argv, prog), args...)
	ctx, cancel := context.WithTimeout(context.Background(), limit+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, goccl, argv...)
	cmd.Env = env
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second // a stray grandchild must not hold the pipes forever
	start := time.Now()
	err := cmd.Run()
	res := jobResult{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		require.NoError(t, err, "starting goccl run")
	}
	require.NoError(t, ctx.Err(), "goccl run itself hung: %s", res)
	return res
}
