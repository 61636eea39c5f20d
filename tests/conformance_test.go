package tests

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Counts the conformance runs use: empty, one element, a prime (tails of
// every vector width and uneven splits across ranks), and one over a few
// MiB (the chunked algorithms, several pipeline rounds).
const (
	primeCount = 1009
	bigCount   = 1<<20 + 7 // 4 MiB + 28 B of float32, 8 MiB of float64
)

// confCase is one conformance invocation at one rank count.
type confCase struct {
	name  string
	np    int
	args  []string
	limit time.Duration
}

// conformanceCases is the CI matrix. At the small counts every collective
// × dtype × op, and every point-to-point call × dtype, runs at every rank
// count. At the big count the rank counts
// up to 4 run a spread of dtypes (1, 2 and 8 bytes, integer and float,
// both half and both 8-bit float types) with every op; 8 ranks on CI's 2 cores run two dtypes
// and two ops, which still cover the chunked paths of every collective.
func conformanceCases(short bool) []confCase {
	small := []string{"--counts", fmt.Sprintf("0,1,%d", primeCount)}
	bigMid := []string{"--counts", strconv.Itoa(bigCount), "--types", "float32,float16,bfloat16,int64,uint8,f8e4m3,f8e5m2"}
	bigWide := []string{"--counts", strconv.Itoa(bigCount), "--types", "float32,bfloat16", "--ops", "sum,max"}
	// The point-to-point calls run in both (per-peer counts); this adds the
	// counts 7 and 4095 for every dtype, without the collectives.
	p2p := []string{"--colls", "none", "--counts", "7,4095"}
	var cs []confCase
	for _, np := range []int{1, 2, 3, 4, 8} {
		cs = append(cs, confCase{fmt.Sprintf("np=%d/small", np), np, small, 3 * time.Minute})
		big := bigMid
		if np == 8 || short {
			big = bigWide
		}
		cs = append(cs, confCase{fmt.Sprintf("np=%d/big", np), np, big, 3 * time.Minute})
		cs = append(cs, confCase{fmt.Sprintf("np=%d/p2p", np), np, p2p, 3 * time.Minute})
	}
	return cs
}

// TestConformanceThroughLauncher runs tests/conformance as the ranks of
// `goccl run` on the host backend. The program checks every result against
// a float64 reference and exits non-zero on any mismatch; this test checks
// that every rank ran (no early exit that could pass vacuously), that the
// launcher reports success, and prints the failures otherwise.
func TestConformanceThroughLauncher(t *testing.T) {
	conf := bin(t, "./tests/conformance")
	for _, tc := range conformanceCases(testing.Short()) {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--backend", "host"}, tc.args...)
			res := runJob(t, hostEnv(), tc.np, tc.limit, []string{"--tag-output"}, conf, args...)
			t.Logf("%s: %v", tc.name, res.took.Round(time.Millisecond))
			require.Equal(t, 0, res.code, "conformance failed:\n%s", res)
			assert.NotContains(t, res.stderr, "goccl run:", "the launcher reported a problem")
			assert.NotContains(t, res.stdout, "skipped", "the host backend runs every call")
			// Every rank reports how many cases it checked: a rank that
			// checked nothing, or a summary that lost a rank, is a failure.
			for r := 0; r < tc.np; r++ {
				m := regexp.MustCompile(fmt.Sprintf(`(?m)^\[%d\] conformance: rank %d: (\d+) cases, 0 failed$`, r, r)).
					FindStringSubmatch(res.stdout + res.stderr)
				if assert.NotNil(t, m, "rank %d did not report:\n%s", r, res) {
					n, _ := strconv.Atoi(m[1])
					assert.Positive(t, n, "rank %d checked no case", r)
				}
			}
			assert.Regexp(t, fmt.Sprintf(`(?m)^\[0\] conformance: all %d ranks: [1-9]\d* cases, 0 failed$`, tc.np), res.stdout+res.stderr)
		})
	}
}

// TestConformanceDetectsFailure makes sure a failing rank is not lost on
// the way: a conformance run given an argument it must reject exits
// non-zero, and the launcher names a rank.
func TestConformanceDetectsFailure(t *testing.T) {
	conf := bin(t, "./tests/conformance")
	res := runJob(t, hostEnv(), 2, time.Minute, nil, conf, "--backend", "host", "--counts", "-5")
	assert.NotEqual(t, 0, res.code, "a negative count was accepted:\n%s", res)
	assert.Regexp(t, `goccl run: rank \d (exited with status \d+|was killed by signal)`, res.stderr)
}
