package tests

import (
	"context"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// binNoCgo builds the main package pkg with CGO_ENABLED=0 into dir and
// checks that the result is what such a build promises: a binary whose
// build settings say CGO_ENABLED=0 and that needs no dynamic linker.
func binNoCgo(t *testing.T, dir, pkg string) string {
	t.Helper()
	root, err := moduleRoot()
	require.NoError(t, err)
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command(goTool(), "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "CGO_ENABLED=0 go build %s:\n%s", pkg, b)

	info, err := buildinfo.ReadFile(out)
	require.NoError(t, err)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	require.Equal(t, "0", settings["CGO_ENABLED"], "%s's build settings", pkg)
	f, err := elf.Open(out)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s asks for a dynamic linker: not a static binary", pkg)
	}
	return out
}

var nocgoLine = regexp.MustCompile(`(?m)^\[(\d+)\] nocgo: rank (\d+)(?: of (\d+): backend (\w+))?: ([^:]+): (PASS|FAIL)(.*)$`)

// TestBuiltWithoutCgo builds goccl and tests/nocgo with CGO_ENABLED=0
// (static binaries) and runs 2 ranks of the program under that launcher:
// with the backend left to auto, the ranks must get the host backend and
// every AllReduce must match the sums each rank computes itself; asked for
// the GPU backend, init must fail on every rank with the build's reason,
// and at least one rank (the first to fail) with an error wrapping
// comm.ErrNoDriver.
func TestBuiltWithoutCgo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries without cgo; skipped with -short")
	}
	dir := t.TempDir()
	goccl := binNoCgo(t, dir, "./cmd/goccl")
	prog := binNoCgo(t, dir, "./tests/nocgo")
	const np = 2
	run := func(t *testing.T, env []string, args ...string) (jobResult, [][]string) {
		t.Helper()
		argv := append([]string{"run", "-np", fmt.Sprint(np), "--timeout", "2m", "--grace", "5s", "--tag-output", prog}, args...)
		// The launcher's --timeout stops a hung job; the context is a
		// backstop should the launcher itself hang.
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, goccl, argv...)
		cmd.Env = env
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.WaitDelay = 5 * time.Second
		start := time.Now()
		err := cmd.Run()
		res := jobResult{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			res.code = ee.ExitCode()
		} else {
			require.NoError(t, err, "starting goccl run")
		}
		require.NoError(t, ctx.Err(), "goccl run itself hung: %s", res)
		return res, nocgoLine.FindAllStringSubmatch(res.stdout, -1)
	}

	tests := []struct {
		name  string
		env   []string
		args  []string
		cases int // lines each rank prints
		check func(t *testing.T, m [][]string)
	}{
		{"auto picks host, allreduce checked", append(os.Environ(), "GOCCL_BACKEND=auto"), []string{"-mode", "allreduce", "-seed", "7"}, 8,
			func(t *testing.T, m [][]string) {
				for _, l := range m {
					assert.Equal(t, fmt.Sprint(np), l[3], "%s", l[0])
					assert.Equal(t, "host", l[4], "%s", l[0])
				}
			}},
		{"gpu backend refused", append(os.Environ(), "GOCCL_BACKEND=gpu"), []string{"-mode", "gpu"}, 1,
			func(t *testing.T, m [][]string) {
				own := 0
				for _, l := range m {
					assert.Contains(t, l[7], "built with CGO_ENABLED=0: the GPU backend needs cgo", "%s", l[0])
					if strings.HasPrefix(l[7], " (own error, wraps comm.ErrNoDriver)") {
						own++
					}
				}
				assert.GreaterOrEqual(t, own, 1, "no rank reported its own init error")
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, m := run(t, tc.env, tc.args...)
			require.Equal(t, 0, res.code, "%s", res)
			per := map[string]int{}
			for _, l := range m {
				assert.Equal(t, l[1], l[2], "tag and rank disagree: %s", l[0])
				assert.Equal(t, "PASS", l[6], "%s", l[0])
				per[l[2]]++
			}
			for r := 0; r < np; r++ {
				assert.Equal(t, tc.cases, per[fmt.Sprint(r)], "lines of rank %d in:\n%s", r, res.stdout)
			}
			tc.check(t, m)
		})
	}
}
