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
		{"allreduce forced nvls chooses by size, small", AllReduce, 8, 8, NVLS, OneShot},
		{"allreduce forced nvls chooses by size, large", AllReduce, 1 << 30, 8, NVLS, TwoShot},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ChooseAlgorithm(tc.c, tc.bytes, tc.nranks, tc.forced))
		})
	}
}

func TestChooseCopyEngine(t *testing.T) {
	const mi = CopyEngineMinBytes
	cases := []struct {
		name       string
		c          Collective
		bytes      int64
		forced     Algorithm
		registered bool
		want       Algorithm
	}{
		{"broadcast registered at threshold", Broadcast, mi, "", true, CopyEngine},
		{"broadcast registered below threshold", Broadcast, mi - 1, "", true, OneShot},
		{"broadcast unregistered large", Broadcast, 1 << 30, "", false, OneShot},
		{"allgather registered large", AllGather, 1 << 30, "", true, CopyEngine},
		{"allgather registered small", AllGather, 8, "", true, OneShot},
		{"allgather unregistered forced ce", AllGather, 1 << 30, CopyEngine, false, OneShot},
		{"allgather registered small forced ce", AllGather, 8, CopyEngine, true, CopyEngine},
		{"broadcast registered large forced oneshot", Broadcast, 1 << 30, OneShot, true, OneShot},
		{"broadcast registered large forced twoshot keeps kernels", Broadcast, 1 << 30, TwoShot, true, OneShot},
		{"allreduce registered large has no ce", AllReduce, 1 << 30, "", true, TwoShot},
		{"allreduce registered forced ce at 8 ranks", AllReduce, 1 << 30, CopyEngine, true, TwoShot},
		{"reducescatter registered large", ReduceScatter, 1 << 30, "", true, OneShot},
		{"reduce registered forced ce", Reduce, 1 << 30, CopyEngine, true, OneShot},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nranks := 2
			if tc.c == AllReduce {
				nranks = 8
			}
			assert.Equal(t, tc.want, Choose(tc.c, tc.bytes, nranks, tc.forced, tc.registered))
		})
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, name := range []string{"", "oneshot", "twoshot", "ce", "nvls"} {
		a, err := ParseAlgorithm(name)
		assert.NoError(t, err, name)
		assert.Equal(t, Algorithm(name), a)
	}
	_, err := ParseAlgorithm("ring")
	assert.ErrorIs(t, err, ErrInvalidArgument)
}
