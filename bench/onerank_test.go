package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One rank in place moves nothing: no bandwidth is printed for it, while
// out of place (a copy) keeps its rate.
func TestOneRankInPlaceHasNoBandwidth(t *testing.T) {
	for _, coll := range []string{"all_reduce", "all_gather", "broadcast"} {
		t.Run(coll, func(t *testing.T) {
			out, sum, err := runFake(t, 1, []string{coll, "-b", "64K", "-e", "64K", "-n", "2", "-w", "0", "--backend", "host"}, nil)
			require.NoError(t, err, out)
			require.Len(t, sum.Rows, 1)
			row := sum.Rows[0]
			assert.Positive(t, row.InPlace.TimeUS)
			assert.Zero(t, row.InPlace.AlgBW)
			assert.Zero(t, row.InPlace.BusBW)
			assert.Positive(t, row.OutOfPlace.AlgBW, "a copy has a rate")
		})
	}
}
