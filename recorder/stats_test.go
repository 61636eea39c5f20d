package recorder

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuckets(t *testing.T) {
	// Every duration falls in a bucket whose upper bound holds it and whose
	// previous bucket's does not; bounds rise.
	prev := int64(-1)
	for i := 0; i < nBuckets-1; i++ {
		u := bucketUpper(i)
		require.Greater(t, u, prev, "bucket %d", i)
		assert.Equal(t, i, bucket(u), "upper bound of bucket %d", i)
		assert.Equal(t, i, bucket(prev+1), "lower bound of bucket %d", i)
		// A quarter octave: the bucket spans at most a fifth of its bound.
		if u > 64 {
			assert.LessOrEqual(t, float64(u-prev)/float64(u), 0.21, "bucket %d", i)
		}
		prev = u
	}
	assert.Equal(t, nBuckets-1, bucket(1<<62))
}

func TestSizeClass(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		class int
	}{{0, 0}, {1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {4096, 12}, {4097, 13}} {
		assert.Equal(t, tc.class, sizeClass(tc.bytes), "%d bytes", tc.bytes)
	}
}

// TestStats feeds known durations and checks counts, bytes, percentiles
// (against the sorted durations, within a bucket's width) and busbw.
func TestStats(t *testing.T) {
	var s stats
	s.nranks = 4
	const n = 1000
	durs := make([]int64, n)
	for i := range durs {
		durs[i] = 1000 + rand.Int64N(1_000_000)
		s.add(AllReduce, 3000, durs[i]) // size class 4 KiB
	}
	s.add(AllGather, 1<<20, 500)
	cellAR := s.cells[AllReduce][12]
	require.NotNil(t, cellAR)
	st := cellAR.stat(AllReduce, 12, 4)
	assert.Equal(t, "AllReduce", st.Call)
	assert.Equal(t, int64(4096), st.SizeClass)
	assert.Equal(t, uint64(n), st.Count)
	assert.Equal(t, uint64(n*3000), st.Bytes)
	var sum int64
	for _, d := range durs {
		sum += d
	}
	assert.Equal(t, time.Duration(sum), st.Total)
	slices.Sort(durs)
	assert.Equal(t, time.Duration(durs[n-1]), st.Max)
	for _, q := range []struct {
		got time.Duration
		p   float64
	}{{st.P50, 0.5}, {st.P90, 0.9}, {st.P99, 0.99}} {
		exact := float64(durs[int(q.p*n)-1])
		assert.InEpsilon(t, exact, float64(q.got), 0.25, "p%v", q.p*100)
		assert.GreaterOrEqual(t, float64(q.got), exact*0.999, "a bucket's upper bound")
	}
	algbw := float64(n*3000) / float64(sum)
	assert.InDelta(t, algbw, st.AlgBW, 1e-12)
	assert.InDelta(t, algbw*1.5, st.BusBW, 1e-12, "2(n-1)/n at 4 ranks")
	assert.Equal(t, uint64(n), st.Buckets[len(st.Buckets)-1])
	ag := s.cells[AllGather][20].stat(AllGather, 20, 4)
	assert.InDelta(t, float64(1<<20)/500*0.75, ag.BusBW, 1e-9)
}
