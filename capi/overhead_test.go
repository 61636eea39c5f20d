//go:build cgo

package main

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/comm"
)

// BenchmarkCallOverhead is the cost of one call through each API: an
// AllReduce of one float on a one-rank host communicator, where the
// collective itself is a few nanoseconds of copying, so that the rest is
// the API's path. c - go is what the C layer adds per call.
func BenchmarkCallOverhead(b *testing.B) {
	b.Run("go", func(b *testing.B) {
		id, err := comm.NewUniqueID()
		require.NoError(b, err)
		c, err := comm.InitRank(context.Background(), id, 1, 0, comm.Options{Backend: comm.BackendHost})
		require.NoError(b, err)
		defer c.Close()
		x, y := []float32{1}, []float32{0}
		s, r := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
		ctx := context.Background()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := c.AllReduce(ctx, s, r, 1, comm.Float32, comm.Sum, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("c", func(b *testing.B) {
		_, bin := build(b)
		// The C program times its own loop of b.N calls (a process holds
		// one Go runtime, so the library cannot be loaded here).
		cmd := exec.Command(bin, "bench", strconv.Itoa(b.N))
		cmd.Env = append(os.Environ(), "GOCCL_BACKEND=host", "RANK=0", "WORLD_SIZE=1", "NCCLCHECK_DIR="+b.TempDir())
		out, err := cmd.CombinedOutput()
		require.NoError(b, err, "%s", out)
		m := regexp.MustCompile(`ns/call ([0-9.]+)`).FindSubmatch(out)
		require.NotNil(b, m, "%s", out)
		ns, err := strconv.ParseFloat(string(m[1]), 64)
		require.NoError(b, err)
		b.ReportMetric(ns, "ns/call")
	})
}
