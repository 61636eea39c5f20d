package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAndReport(t *testing.T) {
	got, err := parse(strings.NewReader("8 0.500\n16 0.750\nmemcpy 16 0.100\n"))
	require.NoError(t, err)
	assert.Equal(t, map[int64]float64{8: 0.5, 16: 0.75}, got.bySize)
	assert.Equal(t, int64(16), got.memcpyBytes)
	_, err = parse(strings.NewReader("8 x\n"))
	require.Error(t, err)
	_, err = parse(strings.NewReader("what is this\n"))
	require.Error(t, err)

	var acc times
	best(&acc, times{bySize: map[int64]float64{8: 2, 16: 1}})
	best(&acc, times{bySize: map[int64]float64{8: 1, 16: 3}, memcpyBytes: 16, memcpyMicros: 0.5})
	assert.Equal(t, map[int64]float64{8: 1, 16: 1}, acc.bySize)

	var out bytes.Buffer
	mpi := times{bySize: map[int64]float64{8: 0.5, 16: 2}}
	require.NoError(t, report(&out, options{np: 2, iters: 10, rounds: 1, minB: 8, maxB: 16}, mpi, acc, times{}, 0))
	text := out.String()
	assert.Regexp(t, `(?m)^\s+8\s+0\.50\s+1\.00\s+2\.00x\s*$`, text)
	assert.Regexp(t, `(?m)^\s+16\s+2\.00\s+1\.00\s+0\.50x\s*$`, text)
	assert.Contains(t, text, "# worst goccl/MPI: 2.00x")
	assert.Contains(t, text, "costs 2.00 memcpys\n")
	assert.NotContains(t, text, "Alloc")
	require.Error(t, report(&out, options{minB: 8, maxB: 32}, mpi, acc, times{}, 0), "a missing size")

	// With the AllocSlice run: its columns, its worst, both in memcpys
	// (against the faster memcpy).
	out.Reset()
	shared := times{bySize: map[int64]float64{8: 1.5, 16: 0.25}, memcpyBytes: 16, memcpyMicros: 0.25}
	require.NoError(t, report(&out, options{np: 2, iters: 10, rounds: 1, minB: 8, maxB: 16}, mpi, acc, shared, 0))
	text = out.String()
	assert.Regexp(t, `(?m)^\s+8\s+0\.50\s+1\.00\s+2\.00x\s+1\.50\s+3\.00x\s*$`, text)
	assert.Regexp(t, `(?m)^\s+16\s+2\.00\s+1\.00\s+0\.50x\s+0\.25\s+0\.12x\s*$`, text)
	assert.Contains(t, text, "# worst goccl Alloc/MPI: 3.00x")
	assert.Contains(t, text, "memcpy of 16 bytes: 0.25 us; goccl's AllReduce of it costs 4.00 memcpys on private buffers, 1.00 on buffers from AllocSlice\n")
	require.Error(t, report(&out, options{minB: 8, maxB: 16}, mpi, acc, times{bySize: map[int64]float64{8: 1}}, 0), "a size missing from the Alloc run")
}

// The whole comparison on a few small sizes: both programs build, run,
// check their results and report. Needs Open MPI.
func TestCompareRuns(t *testing.T) {
	for _, tool := range []string{"mpicc", "mpirun"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: Open MPI is not installed (Debian: libopenmpi-dev, openmpi-bin)", tool)
		}
	}
	if testing.Short() {
		t.Skip("builds and runs two multi-process programs")
	}
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	t.Chdir(root)
	var out bytes.Buffer
	err = compare(context.Background(), options{np: 2, iters: 20, warmup: 2, first: 10, rounds: 1, minB: 8, maxB: 64 << 10, alloc: true}, &out)
	require.NoError(t, err, out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 1+1+14+4, out.String()) // title, header, 8 B..64 KiB, two worsts, memcpy, load
	assert.Contains(t, out.String(), "# worst goccl Alloc/MPI: ")
	assert.Contains(t, out.String(), "on buffers from AllocSlice")
	assert.Contains(t, out.String(), "# worst goccl/MPI: ")
	assert.Regexp(t, `(?m)^# load average \(1 min\): [0-9.]+ at the start, [0-9.]+ at the end$`, out.String())
}

func TestBuildWithoutMPI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := build(context.Background(), t.TempDir())
	require.True(t, errors.Is(err, errNoMPI), "%v", err)
}
