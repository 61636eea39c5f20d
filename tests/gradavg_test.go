package tests

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gradavgChecksum is what examples/gradavg must end with, computed here in
// float64: rank r's targets are (i+r)%8, the averaged gradient pulls w
// towards their mean m, and from w=0 after k steps of rate lr,
// w = m·(1-(1-lr)^k).
func gradavgChecksum(nranks, params, steps int, lr float64) float64 {
	f := 1 - math.Pow(1-lr, float64(steps))
	var sum float64
	for i := 0; i < params; i++ {
		var m float64
		for r := 0; r < nranks; r++ {
			m += float64((i + r) % 8)
		}
		sum += m / float64(nranks) * f
	}
	return sum
}

var gradavgLine = regexp.MustCompile(`(?m)^(?:\[(\d+)\] )?rank (\d+) of (\d+): (\d+) steps, (\d+) params, checksum ([0-9.]+), `)

// checkGradavg checks that every rank printed its line and that each
// replica's checksum matches the reference (so every replica applied the
// same, correctly averaged updates).
func checkGradavg(t *testing.T, out string, np, params, steps int, lr float64) {
	t.Helper()
	want := gradavgChecksum(np, params, steps, lr)
	seen := map[int]bool{}
	for _, m := range gradavgLine.FindAllStringSubmatch(out, -1) {
		r, _ := strconv.Atoi(m[2])
		if m[1] != "" {
			assert.Equal(t, m[1], m[2], "tag and rank disagree")
		}
		assert.False(t, seen[r], "rank %d printed twice", r)
		seen[r] = true
		assert.Equal(t, strconv.Itoa(np), m[3])
		assert.Equal(t, strconv.Itoa(steps), m[4])
		assert.Equal(t, strconv.Itoa(params), m[5])
		got, err := strconv.ParseFloat(m[6], 64)
		require.NoError(t, err)
		assert.InEpsilon(t, want, got, 1e-5, "rank %d checksum", r)
	}
	assert.Len(t, seen, np, "ranks that reported, in:\n%s", out)
}

func TestGradavgExample(t *testing.T) {
	prog := bin(t, "./examples/gradavg")
	tests := []struct {
		np, params, steps int
		lr                float64
	}{
		{1, 100, 3, 0.5},
		{3, 1001, 4, 0.25},
		{4, 1000, 5, 0.5},
		{4, 1 << 20, 2, 0.5}, // big enough for the chunked algorithm
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("np=%d/params=%d", tc.np, tc.params), func(t *testing.T) {
			res := runJob(t, hostEnv(), tc.np, 2*time.Minute, []string{"--tag-output"}, prog,
				"-params", strconv.Itoa(tc.params), "-steps", strconv.Itoa(tc.steps), "-lr", strconv.FormatFloat(tc.lr, 'g', -1, 64))
			require.Equal(t, 0, res.code, "%s", res)
			checkGradavg(t, res.stdout, tc.np, tc.params, tc.steps, tc.lr)
		})
	}
}

// TestGradavgReadmeCommand runs the README's command as written, with
// `go run` as every rank's program (the launcher then stops the binaries
// go run starts as well).
func TestGradavgReadmeCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the example in every rank; skipped with -short")
	}
	root, err := moduleRoot()
	require.NoError(t, err)
	res := runJobIn(t, root, hostEnv(), 4, 3*time.Minute, nil, goTool(), "run", "./examples/gradavg")
	require.Equal(t, 0, res.code, "%s", res)
	checkGradavg(t, res.stdout, 4, 1<<16, 10, 0.5)
	assert.Empty(t, strings.TrimSpace(res.stderr))
}
