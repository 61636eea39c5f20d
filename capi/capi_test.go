//go:build cgo

package main

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/launcher"
)

// built is the library and the C test program, built once per run: the
// library as `make libnccl` builds it, the program with gcc against
// include/nccl.h.
var built struct {
	once          sync.Once
	dir, lib, bin string
	err           error
}

func build(t testing.TB) (lib, bin string) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: the C API tests compile a C program against include/nccl.h")
	}
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "goccl-capi-")
		if built.err != nil {
			return
		}
		built.lib = filepath.Join(built.dir, "libnccl.so.2")
		built.bin = filepath.Join(built.dir, "ncclcheck")
		exports, _ := filepath.Abs("exports.map")
		gob := exec.Command(goTool(), "build", "-buildmode=c-shared",
			"-ldflags", "-extldflags '-Wl,-soname,libnccl.so.2 -Wl,--version-script="+exports+"'",
			"-o", built.lib, ".")
		if out, err := gob.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build -buildmode=c-shared: %w\n%s", err, out)
			return
		}
		cc := exec.Command(gcc, "-O1", "-Wall", "-Werror", "-I../include", "-o", built.bin, "testdata/ncclcheck.c", "testdata/ncclcheck_premul.c",
			"-L"+built.dir, "-l:libnccl.so.2", "-Wl,-rpath,"+built.dir, "-lm", "-lpthread")
		if out, err := cc.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("gcc: %w\n%s", err, out)
		}
	})
	require.NoError(t, built.err)
	return built.lib, built.bin
}

// goTool is the go command: the one on PATH, else GOROOT's.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// runJob runs ncclcheck mode as np ranks through goccl's launcher over the
// host backend and returns each rank's lines.
func runJob(t *testing.T, np int, mode string, env ...string) (map[int][]string, launcher.Result, error) {
	t.Helper()
	_, bin := build(t)
	var out, errs bytes.Buffer
	e := append(os.Environ(), "GOCCL_BACKEND=host", "NCCLCHECK_DIR="+t.TempDir(), "GOCCL_TIMEOUT=60s")
	e = append(e, env...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := launcher.Run(ctx, launcher.Config{NP: np, Program: bin, Args: []string{mode}, Env: e,
		TagOutput: true, Stdout: &out, Stderr: &errs, Timeout: 3 * time.Minute})
	lines := map[int][]string{}
	tag := regexp.MustCompile(`^\[(\d+)\] (.*)$`)
	for _, l := range strings.Split(out.String(), "\n") {
		if m := tag.FindStringSubmatch(l); m != nil {
			var r int
			fmt.Sscan(m[1], &r)
			lines[r] = append(lines[r], m[2])
		}
	}
	if t.Failed() || err != nil {
		t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errs.String())
	}
	return lines, res, err
}

// checkLines fails on every FAIL line and requires each of want as an
// "ok" line on every rank; skips are logged.
func checkLines(t *testing.T, np int, lines map[int][]string, want ...string) {
	t.Helper()
	for r := 0; r < np; r++ {
		ok := map[string]bool{}
		for _, l := range lines[r] {
			switch {
			case strings.HasPrefix(l, "FAIL"):
				t.Errorf("rank %d: %s", r, l)
			case strings.HasPrefix(l, "skip"):
				if r == 0 {
					t.Log(l)
				}
			case strings.HasPrefix(l, "ok "):
				ok[strings.TrimPrefix(l, "ok ")] = true
			}
		}
		for _, w := range want {
			require.True(t, ok[w], "rank %d did not report ok %s; its lines: %q", r, w, lines[r])
		}
	}
}

func TestCAPI(t *testing.T) {
	cases := []struct {
		name, mode string
		np         int
		want       []string
	}{
		{"basic-4-ranks", "basic", 4, []string{"layout", "config-initializer", "version", "query", "allreduce/float/avg", "allreduce/int8/prod",
			"allreduce-inplace/double/min", "reduce/uint64/max", "reducescatter/int32/sum", "broadcast/uint8",
			"bcast/double", "allgather/int64", "group/two-allreduces-nested", "group/end-without-start",
			"group/bad-call-fails-group", "group/simulate", "errors/null-comm", "errors/bad-datatype", "errors/bad-op",
			"errors/bad-root", "errors/null-buffer", "errors/bad-peer", "errors/garbage-comm", "errors/bad-unique-id",
			"errors/bad-rank", "errors/bad-config-magic", "errors/bad-config-blocking", "errors/revoke-unimplemented",
			"errors/premulsum-bad-type", "errors/premulsum-bad-residence", "errors/premulsum-handle", "errors/premulsum-wrong-type",
			"errors/premulsum-destroyed", "errors/premulsum-destroy-twice", "premulsum/allreduce/int8/immediate", "premulsum/allreduce/uint64/device",
			"premulsum/allreduce/double/device", "premulsum/reducescatter-inplace/float/immediate", "premulsum/reducescatter-inplace/int32/device",
			"fp8/allreduce/f8e4m3/sum", "fp8/allreduce/f8e5m2/sum", "fp8/reduce/f8e4m3/premulsum", "fp8/reduce/f8e5m2/premulsum", "errors/device-api", "errors/error-strings", "errors/comm-sound-after",
			"mem/alloc-aligned", "mem/register", "mem/collective-on-registered", "mem/deregister-twice", "destroy-twice"}},
		{"basic-3-ranks", "basic", 3, []string{"allreduce/float/avg", "allreduce/int32/avg", "reducescatter/uint32/prod",
			"premulsum/allreduce/float/device", "fp8/reduce/f8e5m2/premulsum"}},
		{"nonblocking", "nonblocking", 3, []string{"nonblocking/init-returns", "nonblocking/ready", "nonblocking/allreduce", "config/old-version"}},
		{"initall", "initall", 1, []string{"initall/group-allreduce", "initall/ranks", "group-init/allreduce", "group-init/bad-rank-fails-group"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lines, _, err := runJob(t, tc.np, tc.mode)
			checkLines(t, tc.np, lines, tc.want...)
			require.NoError(t, err)
		})
	}
}

// A rank's abort reaches the others as ncclRemoteError naming it; an abort
// from another thread ends a call waiting on a peer that never comes.
func TestCAPIAbort(t *testing.T) {
	t.Run("peer-aborts", func(t *testing.T) {
		lines, _, err := runJob(t, 3, "abort")
		require.NoError(t, err)
		checkLines(t, 1, lines, "abort/peer-sees-remote-error", "abort/async-error")
		require.Contains(t, lines[1], "ok abort/aborted")
		require.Contains(t, lines[2], "ok abort/peer-sees-remote-error")
	})
	t.Run("other-thread", func(t *testing.T) {
		lines, _, err := runJob(t, 2, "abortthread")
		require.NoError(t, err)
		checkLines(t, 1, lines, "abortthread/blocked-call-ends")
		require.Contains(t, lines[1], "ok abortthread/peer-done")
	})
}

// Communicators made and destroyed many times leave no descriptors behind.
func TestCAPICycles(t *testing.T) {
	_, bin := build(t)
	cmd := exec.Command(bin, "cycles", "1000")
	cmd.Env = append(os.Environ(), "GOCCL_BACKEND=host", "RANK=0", "WORLD_SIZE=1", "NCCLCHECK_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "ok cycles/fds")
	require.Contains(t, string(out), "ok cycles/memory")
}

// GOCCL_DEBUG=INFO names the library and its version.
func TestCAPIInfoLog(t *testing.T) {
	_, bin := build(t)
	cmd := exec.Command(bin, "bench", "10")
	cmd.Env = append(os.Environ(), "GOCCL_BACKEND=host", "GOCCL_DEBUG=INFO", "NCCLCHECK_DIR="+t.TempDir(), "RANK=0", "WORLD_SIZE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "library=libnccl.so.2")
	require.Contains(t, string(out), "version="+libVersion())
	require.Contains(t, string(out), `api="NCCL 2.28 API"`)
}

func libVersion() string { return strings.Fields(libName)[1] }

// apiFunctions is every function of NCCL 2.28's public headers (nccl.h
// and the host side of nccl_device.h).
var apiFunctions = []string{
	"ncclMemAlloc", "ncclMemFree", "ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRankConfig",
	"ncclCommInitRank", "ncclCommInitAll", "ncclCommFinalize", "ncclCommDestroy", "ncclCommAbort",
	"ncclCommRevoke", "ncclCommSplit", "ncclCommShrink", "ncclCommInitRankScalable", "ncclGetErrorString",
	"ncclGetLastError", "ncclResetDebugInit", "ncclCommGetAsyncError", "ncclCommCount", "ncclCommCuDevice",
	"ncclCommUserRank", "ncclCommRegister", "ncclCommDeregister", "ncclCommWindowRegister",
	"ncclCommWindowDeregister", "ncclRedOpCreatePreMulSum", "ncclRedOpDestroy", "ncclReduce", "ncclBcast",
	"ncclBroadcast", "ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclAlltoAll", "ncclGather",
	"ncclScatter", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd", "ncclGroupSimulateEnd",
}

var deviceAPIFunctions = []string{
	"ncclDevCommCreate", "ncclDevCommDestroy", "ncclLsaBarrierCreateRequirement",
	"ncclGinBarrierCreateRequirement", "ncclLLA2ACreateRequirement", "ncclLLA2ACalcSlots",
	"ncclTeamWorld", "ncclTeamLsa", "ncclTeamRail", "ncclTeamRankToWorld", "ncclTeamRankToLsa",
}

// The library exports every API function (and its pncclX twin) and
// nothing else, and carries NCCL's soname.
func TestCAPIExports(t *testing.T) {
	lib, _ := build(t)
	f, err := elf.Open(lib)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	have := map[string]bool{}
	var extra []string
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || elf.ST_BIND(s.Info) != elf.STB_GLOBAL {
			continue
		}
		have[s.Name] = true
		if !strings.HasPrefix(s.Name, "nccl") && !strings.HasPrefix(s.Name, "pnccl") {
			extra = append(extra, s.Name)
		}
	}
	sort.Strings(extra)
	require.Empty(t, extra, "symbols other than nccl*/pnccl* are exported")
	for _, fn := range apiFunctions {
		require.True(t, have[fn], "%s is not exported", fn)
		require.True(t, have["p"+fn], "p%s is not exported", fn)
	}
	for _, fn := range deviceAPIFunctions {
		require.True(t, have[fn], "%s is not exported", fn)
	}
	sonames, err := f.DynString(elf.DT_SONAME)
	require.NoError(t, err)
	require.Equal(t, []string{"libnccl.so.2"}, sonames)
}
