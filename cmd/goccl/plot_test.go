package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/bench"
)

// writeReport saves a report of coll with one float sum row per size, as
// `goccl bench --json` would, and returns its path.
func writeReport(t *testing.T, dir, name, coll string, sizes ...int64) string {
	t.Helper()
	r := bench.Report{Tool: "goccl bench", Label: name, Collective: coll, NRanks: 2}
	for i, s := range sizes {
		bw := float64(10 * (i + 1))
		r.Rows = append(r.Rows, bench.Row{Size: s, Count: int(s / 4), Type: "float", RedOp: "sum", Root: -1,
			OutOfPlace: bench.Result{TimeUS: float64(s) / bw / 1e3, BusBW: bw}})
	}
	b, err := json.Marshal(r)
	require.NoError(t, err)
	path := filepath.Join(dir, name+".json")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

func TestPlotCommand(t *testing.T) {
	dir := t.TempDir()
	ours := writeReport(t, dir, "goccl", "all_reduce", 8, 1<<20, 1<<30)
	peer := writeReport(t, dir, "nccl", "all_reduce", 8, 1<<20)
	other := writeReport(t, dir, "bcast", "broadcast", 1<<20)
	empty := writeReport(t, dir, "empty", "all_reduce")
	png := filepath.Join(dir, "ar.png")
	svg := filepath.Join(dir, "ar.svg")

	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		stderr  string
		out     string
		outHead string
	}{
		{"png beside a peer", []string{"-o", png, ours, peer}, 0, "", png, "\x89PNG"},
		{"svg alone", []string{"-o", svg, ours}, 0, "", svg, "<?xml"},
		{"no output named", []string{ours}, 2, "usage: goccl plot", "", ""},
		{"no report", []string{"-o", png}, 2, "usage: goccl plot", "", ""},
		{"missing report", []string{"-o", png, filepath.Join(dir, "nope.json")}, 1, "goccl plot: read " + filepath.Join(dir, "nope.json") + ": open", "", ""},
		{"report without rows", []string{"-o", png, empty}, 1, "holds no rows", "", ""},
		{"two collectives", []string{"-o", png, ours, other}, 1, "one collective per plot", "", ""},
		{"unknown flag", []string{"-x", ours}, 2, "flag provided but not defined", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.out != "" {
				_ = os.Remove(tc.out)
			}
			var stderr bytes.Buffer
			assert.Equal(t, tc.code, plotCmd(tc.args, &bytes.Buffer{}, &stderr))
			assert.Contains(t, stderr.String(), tc.stderr)
			assert.NotContains(t, stderr.String(), "bench:", "one prefix, the command's")
			if tc.out == "" {
				return
			}
			b, err := os.ReadFile(tc.out)
			require.NoError(t, err)
			require.Greater(t, len(b), 1000, "a plot, not an empty file")
			assert.Equal(t, tc.outHead, string(b[:len(tc.outHead)]))
		})
	}
}
