package tests

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBenchMainJob runs the README's main job, shrunk to CI size:
// goccl run -np 4 goccl bench all_reduce -b 8 -e 1M -f 4. It checks the
// nccl-tests rows (one per size, float sum, no wrong values in either the
// out-of-place or the in-place half) and the footer.
func TestBenchMainJob(t *testing.T) {
	goccl := bin(t, "./cmd/goccl")
	res := runJob(t, hostEnv(), 4, 3*time.Minute, nil, goccl, "bench", "all_reduce", "-b", "8", "-e", "1M", "-f", "4")
	require.Equal(t, 0, res.code, "bench failed:\n%s", res)

	assert.Regexp(t, `(?m)^#\s*Out of bounds values\s*:\s*0 OK\s*$`, res.stdout)
	assert.Regexp(t, `(?m)^#\s*Avg bus bandwidth\s*:\s*[0-9]+(\.[0-9]+)?\s*$`, res.stdout)

	// Data rows: size count type redop root, then time algbw busbw #wrong
	// for out-of-place and again for in-place.
	row := regexp.MustCompile(`^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+` +
		`([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(\S+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(\S+)\s*$`)
	var sizes []int
	for _, l := range strings.Split(res.stdout, "\n") {
		m := row.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		size, _ := strconv.Atoi(m[1])
		count, _ := strconv.Atoi(m[2])
		sizes = append(sizes, size)
		assert.Equal(t, size/4, count, "row %q: count of float", l)
		assert.Equal(t, "float", m[3], "row %q", l)
		assert.Equal(t, "sum", m[4], "row %q", l)
		assert.Equal(t, "0", m[9], "out-of-place #wrong in %q", l)
		assert.Equal(t, "0", m[13], "in-place #wrong in %q", l)
		// busbw = algbw × 2(n-1)/n = 1.5 algbw at 4 ranks (nccl-tests'
		// PERFORMANCE.md), within the rounding of the printed figures.
		for _, c := range [][2]int{{7, 8}, {11, 12}} {
			alg, _ := strconv.ParseFloat(m[c[0]], 64)
			bus, _ := strconv.ParseFloat(m[c[1]], 64)
			assert.InDelta(t, 1.5*alg, bus, 0.011+1.5*alg*0.01, "busbw of %q", l)
		}
	}
	// -b 8 -e 1M -f 4: 8, 32, ..., 512 KiB.
	want := []int{8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288}
	assert.Equal(t, want, sizes, "sizes of the data rows in:\n%s", res.stdout)
}
