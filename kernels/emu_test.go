package kernels

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The CPU emulator (kernels/emu) compiles the real kernel sources with g++
// and runs each block as a process of std::threads over shared memory, so
// that kernel logic (indexing, barriers, LL flags, deadlocks, epochs
// carried across launches, in and out of place) is tested without a GPU;
// the copy-engine reductions run with a model of their copy streams
// (kernels/emu/emu_ce.cc, emu_ce_streams.cc). See kernels/emu/emu_main.cc for what the
// scenarios cover.

// emuSources are the translation units of the emulator: the kernel files
// (compiled as C++ with the emulated CUDA builtins) and the emulator's own.
var emuSources = []struct {
	path   string
	kernel bool
}{
	{"allreduce.cu", true},
	{"reduce.cu", true},
	{"bcast_gather.cu", true},
	{"cereduce.cu", true},
	{"emu/emu_main.cc", false},
	{"emu/emu_p2p.cc", false},   // (p2p.cu is compiled inside it)
	{"emu/emu_fused.cc", false}, // (fused.cu and alltoall.cu, and ll.cu inside them)
	{"emu/emu_alltoall.cc", false},
	{"emu/emu_ce.cc", false},
	{"emu/emu_ce_streams.cc", false},
	{"emu/emu_runtime.cc", false},
	{"emu/emu_check.cc", false},
	{"emu/emu_kernels.cc", false},
	{"emu/emu_selftest.cc", false}, // (stamp.cu is compiled inside it)
}

// emuScenarios must name every scenario the emulator lists (checked below),
// so that a new one is not silently left out. short: run under -short.
var emuScenarios = []struct {
	name  string
	short bool
}{
	{"matrix1", false},
	{"matrix2", true},
	{"matrix3", false},
	{"matrix4", false},
	{"mixed3", false},
	{"mixed4", true},
	{"mixed6", false},
	{"mixed8", true},
	{"skew4", true},
	{"wide3", false},
	{"pairs2", true},
	{"abort", true},
	{"p2p2", true},
	{"p2pring", true},
	{"p2pall", true},
	{"p2pabort", true},
	{"p2pmismatch", true},
	{"p2pzc", true},
	{"p2pzcmismatch", true},
	{"p2peager", true},
	{"p2ptimeout", true},
	{"callskip", true},
	{"fused2", true},
	{"fused3", false},
	{"fused4", true},
	{"fusedabort", true},
	{"a2a2", true},
	{"a2a3", false},
	{"a2a8", true},
	{"a2aabort", true},
	{"ce2", false},
	{"ce3", true},
	{"ce4", true},
	{"cedirect", true},
	{"cedirectskew", false},
	{"ceabort", true},
	{"selftest", true},
}

func TestKernelsOnCPU(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the kernel emulator needs Linux (fork, prctl, shared mappings) on x86-64 (atomic 16-byte LL lines)")
	}
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ is not installed; the CPU emulator of the kernels needs it")
	}
	bin := buildEmu(t, gxx)

	listed, err := runEmu(t, bin, time.Minute, "-list")
	require.NoError(t, err, "emu -list:\n%s", listed)
	var names []string
	for _, s := range emuScenarios {
		names = append(names, s.name)
	}
	require.ElementsMatch(t, names, strings.Fields(listed), "emuScenarios and the emulator's scenarios differ")

	for _, s := range emuScenarios {
		t.Run(s.name, func(t *testing.T) {
			if testing.Short() && !s.short {
				t.Skip("long scenario; skipped in -short mode")
			}
			out, err := runEmu(t, bin, 5*time.Minute, "-run", s.name)
			require.NoError(t, err, "emulator output:\n%s", out)
			assert.Contains(t, out, "PASS "+s.name)
			assert.NotContains(t, out, "FAIL")
			t.Log(lastLine(out))
		})
	}

	// The emulator must report what it exists to find: a wrong element and a
	// hang. Each case breaks one thing on purpose and expects a failure.
	negative := []struct {
		name string
		args []string
		want []string
	}{
		{
			name: "one-ulp error is reported",
			args: []string{"-run", "matrix2", "-limit", "2", "-inject", "corrupt"},
			want: []string{"FAIL matrix2 launch 0: allreduce_oneshot", "rank=1: result: first wrong index 0 (1 wrong)"},
		},
		{
			name: "a launch that stores no timestamps is reported",
			args: []string{"-run", "matrix2", "-limit", "3", "-inject", "nostamp"},
			want: []string{"FAIL matrix2 launch 1 (", "rank 1: timestamps: seq 1 (want 2)", "FAIL matrix2"},
		},
		{
			name: "hang is reported",
			args: []string{"-run", "matrix2", "-limit", "3", "-inject", "hang", "-timeout", "2"},
			want: []string{"EMU-TIMEOUT matrix2 launch 1 (allreduce_oneshot", "rank 1 block 0", "state of every rank", "FAIL matrix2"},
		},
		{
			name: "a wrong element of a fused group is reported",
			args: []string{"-run", "fused2", "-limit", "1", "-inject", "corrupt"},
			want: []string{"FAIL fused2 step 0 call 0:", "(fused): first wrong index 0 (1 wrong)", "FAIL fused2: 1 steps"},
		},
		{
			name: "a fused group that a rank never launches is reported",
			args: []string{"-run", "fused2", "-limit", "3", "-inject", "hang", "-timeout", "2"},
			want: []string{"EMU-TIMEOUT fused2 step 1", "FAIL fused2"},
		},
		{
			name: "a wrong byte of an AllToAll is reported",
			args: []string{"-run", "a2a2", "-limit", "2", "-inject", "corrupt"},
			want: []string{"FAIL a2a2 launch 0: alltoall", "first wrong byte 0 (1 wrong)", "FAIL a2a2: 2 launches"},
		},
		{
			// Rank 0's copy stream reuses rank 1's staging slots without
			// waiting for rank 1's kernel (a slow reader) to free them.
			name: "staging reused before it is freed is reported",
			args: []string{"-run", "ce2", "-limit", "1", "-inject", "nofreewait"},
			want: []string{"FAIL ce2 call 0: ce_allreduce f32 sum", "rank=1: result: first wrong index", "FAIL ce2: 1 calls"},
		},
		{
			// Rank 0's land stream says every chunk landed without waiting
			// for the peers' data flags, while rank 1 sends late: rank 0's
			// kernel reduces chunks that have not arrived.
			name: "chunks reduced before they land are reported",
			args: []string{"-run", "ce2", "-limit", "1", "-inject", "nolandwait"},
			want: []string{"FAIL ce2 call 0: ce_allreduce f32 sum", "rank=0: result: first wrong index", "FAIL ce2: 1 calls"},
		},
		{
			// The same in direct mode: rank 0's land stream launches each
			// chunk's kernel at once, while rank 1's chunks land in rank
			// 0's recv 20 ms late.
			name: "direct chunks reduced before they land are reported",
			args: []string{"-run", "cedirect", "-limit", "1", "-inject", "nolandwait"},
			want: []string{"FAIL cedirect call 0: ce_allreduce f32 sum", "direct rank=0: result: first wrong index", "FAIL cedirect: 1 calls"},
		},
		{
			// Rank 0's push stream writes each direct chunk's data flag
			// before its copy, which lands 20 ms later: rank 1's land
			// stream launches the chunk's kernel, which reduces before
			// rank 0's part of the chunk is there.
			name: "a direct data flag written before its copy is reported",
			args: []string{"-run", "cedirect", "-limit", "1", "-inject", "earlydata"},
			want: []string{"FAIL cedirect call 0: ce_allreduce f32 sum", "direct rank=1: result: first wrong index", "FAIL cedirect: 1 calls"},
		},
		{
			// A direct AllReduce of 31 f32 with a floor of 16 bytes: the
			// pieces of 16 and 15 elements halve into 3 and 4 chunks.
			// Counting only the first piece's, rather than the most of any
			// piece's, rank 1's last chunk is never sent nor launched, so
			// neither its elements get there nor is the reduced event
			// recorded behind its kernel (seq 0xffffffe7 + 3).
			name: "a direct AllReduce short of its last piece's chunks is reported",
			args: []string{"-run", "cedirect", "-limit", "2", "-inject", "shortchunks"},
			want: []string{"FAIL cedirect call 1: ce_allreduce f32 sum count=31", "rank=1: result: first wrong index 28",
				"rank=1: reduced event: first wrong index 0 (1 wrong): got 0xffffffe9, want 0xffffffea", "FAIL cedirect: 2 calls"},
		},
		{
			// Rank 1's first received byte flipped after the launch: the
			// point-to-point check compares every byte of the region.
			name: "a wrong received byte is reported",
			args: []string{"-run", "p2p2", "-inject", "p2pcorrupt"},
			want: []string{"FAIL p2p2 group 0 rank 1: 1 wrong bytes", "(recv of transfer ", "FAIL p2p2: 40 transfers"},
		},
		{
			// Rank 0 has no zero-copy table: its Sends into registered
			// buffers take staging (the data still arrives), and the
			// receiver's path check must notice.
			name: "a registered Recv that took staging is reported",
			args: []string{"-run", "p2pzc", "-inject", "p2pzcnomap"},
			want: []string{"FAIL p2pzc group 0 rank 1: last Recv from 0 (3000 x 4 bytes, registration 1) took staging, want zero copy",
				"FAIL p2pzc: 55 transfers", "FAIL p2pzconly group 0 rank 1: staging byte ", "written on a zero-copy group"},
		},
		{
			// Every Send a rendezvous: two ranks that each Send to the
			// other before they Recv, one op a launch, wait forever.
			name: "Send-then-Recv outside a group deadlocks without eager Sends",
			args: []string{"-run", "p2peager", "-inject", "p2pnoeager", "-timeout", "2"},
			want: []string{"EMU-FATAL p2peager2 group 0 launch 0 rank 0", "timed out", "FAIL p2peager2",
				"EMU-FATAL p2peager3 group 0 launch 0", "FAIL p2peagerqueue"},
		},
	}
	for _, c := range negative {
		t.Run(c.name, func(t *testing.T) {
			out, err := runEmu(t, bin, time.Minute, c.args...)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the emulator should have failed; output:\n%s", out)
			for _, w := range c.want {
				assert.Contains(t, out, w)
			}
		})
	}
}

// buildEmu compiles the emulator into t.TempDir() and returns its path.
// GOCCL_EMU_OPT overrides the optimization level (-O0 compiles the 300-odd
// kernel instantiations fastest; the run time barely depends on it).
func buildEmu(t *testing.T, gxx string) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	opt := os.Getenv("GOCCL_EMU_OPT")
	if opt == "" {
		opt = "-O0"
	}
	out := t.TempDir()
	common := []string{"-std=c++17", opt, "-DGOCCL_EMU", "-pthread", "-I", dir,
		"-include", filepath.Join(dir, "emu", "cuda_emu.h")}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	objs := make([]string, len(emuSources))
	errs := make([]error, len(emuSources))
	sem := make(chan struct{}, runtime.NumCPU())
	var wg sync.WaitGroup
	for i, src := range emuSources {
		objs[i] = filepath.Join(out, fmt.Sprintf("%d.o", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			args := append([]string{}, common...)
			if src.kernel {
				args = append(args, "-x", "c++")
			}
			args = append(args, "-c", filepath.Join(dir, src.path), "-o", objs[i])
			if b, err := exec.CommandContext(ctx, gxx, args...).CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("g++ %s: %w\n%s", src.path, err, b)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	bin := filepath.Join(out, "emu")
	link := append([]string{"-pthread", "-o", bin}, objs...)
	b, err := exec.CommandContext(ctx, gxx, link...).CombinedOutput()
	require.NoError(t, err, "linking the emulator:\n%s", b)
	t.Logf("emulator built with %s in %v", opt, time.Since(start).Round(time.Millisecond))
	return bin
}

// runEmu runs the emulator and returns its combined output.
func runEmu(t *testing.T, bin string, limit time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var buf bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("emulator killed after %v: %w", limit, ctx.Err())
	}
	return buf.String(), err
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}
