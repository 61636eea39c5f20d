package host

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// calls lists every collective × dtype × op (ops only where they apply)
// for one count, in- and out-of-place, with the root rotating.
func calls(nranks int, count int, dts []collectives.DataType, ops []collectives.Op) []call {
	var out []call
	i := 0
	for _, coll := range collectives.AllCollectives() {
		for _, dt := range dts {
			cops := ops
			if !coll.Reduces() {
				cops = []collectives.Op{collectives.Sum}
			}
			for _, op := range cops {
				for _, inPlace := range []bool{false, true} {
					i++
					out = append(out, call{coll: coll, dt: dt, op: op, count: count, root: i % nranks, inPlace: inPlace})
				}
			}
		}
	}
	return out
}

// TestCollectivesSmall runs the whole matrix at small counts with tiny
// staging, so that 1031 elements already take several rounds (and every
// part boundary and tail path is crossed), under both algorithms.
func TestCollectivesSmall(t *testing.T) {
	ranks := []int{1, 2, 3, 4, 5, 8}
	if testing.Short() {
		ranks = []int{1, 3, 4}
	}
	for _, n := range ranks {
		for _, algo := range []collectives.Algorithm{collectives.OneShot, collectives.TwoShot} {
			t.Run(fmt.Sprintf("ranks=%d/%s", n, algo), func(t *testing.T) {
				j := newJob(t, n, Config{Algo: string(algo), StagingBytes: 4096})
				for _, count := range []int{0, 1, 7, 1031} {
					for _, c := range calls(n, count, collectives.AllDataTypes(), collectives.AllOps()) {
						require.NoError(t, j.verify(c))
					}
				}
			})
		}
	}
}

// TestCollectivesLarge uses the default staging with counts over a MiB
// (a prime, and a few MiB) for a subset of types and ops.
func TestCollectivesLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("large counts take seconds")
	}
	for _, tc := range []struct {
		ranks int
		algo  collectives.Algorithm
		count int
		dts   []collectives.DataType
		ops   []collectives.Op
	}{
		{2, "", 1000003, []collectives.DataType{collectives.Float32, collectives.BFloat16, collectives.Int8}, []collectives.Op{collectives.Sum}},
		{3, collectives.TwoShot, 1000003, []collectives.DataType{collectives.Float16, collectives.Int64}, []collectives.Op{collectives.Avg}},
		{4, collectives.OneShot, 300007, []collectives.DataType{collectives.Uint32}, []collectives.Op{collectives.Prod}},
		{5, "", 1<<20 + 5, []collectives.DataType{collectives.Float32}, []collectives.Op{collectives.Sum}},
		{8, collectives.TwoShot, 262147, []collectives.DataType{collectives.Float64}, []collectives.Op{collectives.Min}},
	} {
		t.Run(fmt.Sprintf("ranks=%d/%s/count=%d", tc.ranks, tc.algo, tc.count), func(t *testing.T) {
			j := newJob(t, tc.ranks, Config{Algo: string(tc.algo)})
			for _, c := range calls(tc.ranks, tc.count, tc.dts, tc.ops) {
				require.NoError(t, j.verify(c))
			}
		})
	}
}

// TestAlgorithmBySize crosses the one-shot limit without forcing.
func TestAlgorithmBySize(t *testing.T) {
	j := newJob(t, 3, Config{StagingBytes: 8192, OneShotMax: 1024})
	for _, count := range []int{255, 256, 257, 5000} {
		for _, coll := range []collectives.Collective{collectives.AllReduce, collectives.Reduce} {
			require.NoError(t, j.verify(call{coll: coll, dt: collectives.Float32, op: collectives.Sum, count: count, root: 2}))
		}
	}
}
