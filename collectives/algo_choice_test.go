package collectives

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestChooseAlgorithm(t *testing.T) {
	cases := []struct {
		name   string
		c      Collective
		bytes  int64
		nranks int
		forced Algorithm
		want   Algorithm
	}{
		{"allreduce 2 ranks small", AllReduce, 8, 2, "", OneShot},
		{"allreduce 2 ranks huge", AllReduce, 1 << 30, 2, "", OneShot},
		{"allreduce 1 rank", AllReduce, 1 << 30, 1, "", OneShot},
		{"allreduce 8 ranks below threshold", AllReduce, 256<<10 - 1, 8, "", OneShot},
		{"allreduce 8 ranks at threshold", AllReduce, 256 << 10, 8, "", TwoShot},
		{"allreduce 3 ranks large", AllReduce, 64 << 20, 3, "", TwoShot},
		{"allreduce forced twoshot at 2 ranks", AllReduce, 8, 2, TwoShot, TwoShot},
		{"allreduce forced oneshot at 8 ranks", AllReduce, 1 << 30, 8, OneShot, OneShot},
		{"allreduce forced ce has no ce kernel", AllReduce, 1 << 30, 8, CopyEngine, TwoShot},
		{"reducescatter forced twoshot falls back", ReduceScatter, 1 << 30, 8, TwoShot, OneShot},
		{"broadcast large", Broadcast, 1 << 30, 8, "", OneShot},
		{"allgather", AllGather, 1 << 20, 4, "", OneShot},
		{"reduce", Reduce, 1 << 30, 8, "", OneShot},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ChooseAlgorithm(tc.c, tc.bytes, tc.nranks, tc.forced))
		})
	}
}
