package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPlotLabels(t *testing.T) {
	assert.Equal(t, "all_reduce busbw (best of out-of-place and in-place per size)", plotTitle(Report{Collective: "all_reduce"}))
	for _, tc := range []struct {
		rep  Report
		key  string
		want string
	}{
		{Report{Label: "goccl", Backend: "host", NRanks: 2}, "float sum", "goccl (host, 2 ranks) float sum"},
		{Report{Label: "nccl", Backend: "gpu", NRanks: 1}, "bfloat16 max root 0", "nccl (gpu, 1 rank) bfloat16 max root 0"},
		{Report{Label: "old", NRanks: 8}, "int8", "old (8 ranks) int8"},
		{Report{}, "half", "run 3 half"},
	} {
		assert.Equal(t, tc.want, seriesName(tc.rep, 2, tc.key))
	}
}
