package bench

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/check/checktest"
)

// nccl-tests' numbers (sendrecv.cu, alltoall.cu, gather.cu, scatter.cu):
// the per-block count is size/n rounded down to 16 bytes, the printed size
// the larger buffer, busbw (n-1)/n of algbw but for sendrecv.
func TestP2PShapesAndBusFactors(t *testing.T) {
	for _, tc := range []struct {
		test        P2PTest
		size        int64
		dt          collectives.DataType
		n           int
		count       int
		bytes, s, r int64
		factor      float64
	}{
		{SendRecv, 1 << 20, collectives.Float32, 4, 1 << 18, 1 << 20, 1 << 20, 1 << 20, 1},
		{SendRecv, 7, collectives.Int8, 3, 7, 7, 7, 7, 1},
		{AllToAll, 1 << 20, collectives.Float32, 4, 1 << 16, 1 << 20, 1 << 20, 1 << 20, 0.75},
		{AllToAll, 8, collectives.Float32, 3, 0, 0, 0, 0, 2.0 / 3},
		{AllToAll, 4096, collectives.Float32, 3, 340, 4080, 4080, 4080, 2.0 / 3},
		{Gather, 1 << 20, collectives.Float64, 8, 1 << 14, 1 << 20, 1 << 17, 1 << 20, 7.0 / 8},
		{Scatter, 1 << 20, collectives.Int8, 2, 1 << 19, 1 << 20, 1 << 20, 1 << 19, 0.5},
	} {
		t.Run(fmt.Sprintf("%v/%d/%v/n=%d", tc.test, tc.size, tc.dt, tc.n), func(t *testing.T) {
			sh := P2PShapeOf(tc.test, tc.size, tc.dt, tc.n)
			assert.Equal(t, Shape{Count: tc.count, Bytes: tc.bytes, SendBytes: tc.s, RecvBytes: tc.r}, sh)
			assert.InDelta(t, tc.factor, P2PBusFactor(tc.test, tc.n), 1e-12)
		})
	}
}

func TestParseP2PTests(t *testing.T) {
	for name, want := range map[string]P2PTest{"sendrecv": SendRecv, "sendrecv_perf": SendRecv, "send_recv": SendRecv,
		"alltoall": AllToAll, "all_to_all": AllToAll, "gather": Gather, "scatter_perf": Scatter} {
		cfg, err := ParseArgs([]string{name, "--backend", "host"})
		require.NoError(t, err, name)
		assert.Equal(t, want, cfg.P2P, name)
		assert.Equal(t, want.String(), cfg.TestName())
	}
}

func TestRunP2POnFakeRanks(t *testing.T) {
	for _, test := range []string{"sendrecv", "alltoall", "gather", "scatter"} {
		t.Run(test, func(t *testing.T) {
			out, sum, err := runFake(t, 3, []string{test, "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "-d", "float,int8", "-r", "all", "--backend", "host"}, nil)
			require.NoError(t, err, out)
			rows := 5 * 2 // 8 B .. 32 KiB, two types
			if test == "gather" || test == "scatter" {
				rows *= 3
			}
			require.Len(t, sum.Rows, rows)
			for _, r := range sum.Rows {
				assert.Zero(t, r.OutOfPlace.Wrong, "%+v", r)
				if test == "sendrecv" || test == "alltoall" {
					assert.Equal(t, int64(-1), r.InPlace.Wrong, "in place is timed, not checked, as nccl-tests does")
				} else {
					assert.Zero(t, r.InPlace.Wrong, "%+v", r)
				}
				assert.Positive(t, r.OutOfPlace.TimeUS)
				assert.Equal(t, "none", r.RedOp)
			}
			assert.Contains(t, out, "# Out of bounds values : 0 OK")
		})
	}
}

func TestRunP2PReportsWrongResults(t *testing.T) {
	for _, test := range []string{"sendrecv", "alltoall", "gather", "scatter"} {
		t.Run(test, func(t *testing.T) {
			// One size, one iteration, no warm-up: out of place, every
			// rank makes the untimed call, the timed one and the check,
			// each receiving per messages job-wide. The last of those
			// messages is a check's (each rank's last receive is), so
			// corrupting it makes exactly one element wrong.
			per := map[string]int{"sendrecv": 3, "alltoall": 9, "gather": 3, "scatter": 3}[test]
			out, sum, err := runFake(t, 3, []string{test, "-b", "4K", "-e", "4K", "-n", "1", "-w", "0", "--backend", "host"},
				func(g *checktest.Group) { g.CorruptRecv = 3 * per })
			require.ErrorIs(t, err, ErrWrong, out)
			require.Len(t, sum.Rows, 1)
			assert.Equal(t, int64(1), sum.Rows[0].OutOfPlace.Wrong)
			assert.True(t, strings.Contains(out, "# Out of bounds values : 1 FAILED"), out)
		})
	}
}
