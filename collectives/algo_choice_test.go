package collectives

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestChoose(t *testing.T) {
	cases := []struct {
		name   string
		c      Collective
		bytes  int64
		nranks int
		forced Algorithm
		want   Algorithm
	}{
		{"allreduce 2 ranks tiny", AllReduce, 8, 2, "", LL},
		{"allreduce 2 ranks at ll limit", AllReduce, 512 << 10, 2, "", LL},
		{"allreduce 2 ranks above ll", AllReduce, 512<<10 + 1, 2, "", OneShot},
		{"allreduce 2 ranks below two-shot", AllReduce, 16<<20 - 1, 2, "", OneShot},
		{"allreduce 2 ranks at two-shot", AllReduce, 16 << 20, 2, "", TwoShot},
		{"allreduce 2 ranks huge", AllReduce, 1 << 30, 2, "", TwoShot},
		{"allreduce 1 rank huge", AllReduce, 1 << 30, 1, "", OneShot},
		{"allreduce 1 rank", AllReduce, 1 << 20, 1, "", OneShot},
		{"allreduce 8 ranks below two-shot", AllReduce, 256<<10 - 1, 8, "", LL},
		{"allreduce 8 ranks at two-shot", AllReduce, 256 << 10, 8, "", TwoShot},
		{"allreduce 3 ranks large", AllReduce, 64 << 20, 3, "", TwoShot},
		{"allreduce forced ll large", AllReduce, 1 << 30, 2, LL, LL},
		{"allreduce forced oneshot small", AllReduce, 8, 2, OneShot, OneShot},
		{"allreduce forced twoshot at 2 ranks", AllReduce, 8, 2, TwoShot, TwoShot},
		{"allreduce forced oneshot at 8 ranks", AllReduce, 1 << 30, 8, OneShot, OneShot},
		{"allreduce forced ce without the path", AllReduce, 1 << 30, 8, CopyEngine, TwoShot},
		{"broadcast forced ll has none", Broadcast, 8, 2, LL, OneShot},
		{"reducescatter small has no ll", ReduceScatter, 8, 2, "", OneShot},
		{"reducescatter forced twoshot falls back", ReduceScatter, 1 << 30, 8, TwoShot, OneShot},
		{"broadcast large", Broadcast, 1 << 30, 8, "", OneShot},
		{"allgather", AllGather, 1 << 20, 4, "", OneShot},
		{"reduce", Reduce, 1 << 30, 8, "", OneShot},
		{"allreduce forced nvls chooses by size, small", AllReduce, 8, 8, NVLS, LL},
		{"allreduce forced nvls chooses by size, large", AllReduce, 1 << 30, 8, NVLS, TwoShot},
		{"invalid collective", Collective(99), 1 << 30, 8, "", OneShot},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, DefaultThresholds.Choose(tc.c, tc.bytes, tc.nranks, tc.forced, false))
		})
	}
}

func TestChooseCopyEngine(t *testing.T) {
	th := Thresholds{TwoShot: 256 << 10, CopyEngine: [NumCollectives]int64{Broadcast: 1 << 20, AllGather: 1 << 20, AllReduce: 4 << 20, Reduce: never, ReduceScatter: 2 << 20}}
	mi := th.CopyEngine[Broadcast]
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
		{"allreduce registered at threshold", AllReduce, 4 << 20, "", true, CopyEngine},
		{"allreduce registered below threshold", AllReduce, 4<<20 - 1, "", true, TwoShot},
		{"allreduce unregistered large", AllReduce, 1 << 30, "", false, TwoShot},
		{"allreduce registered small forced ce", AllReduce, 8, CopyEngine, true, CopyEngine},
		{"allreduce registered large forced twoshot", AllReduce, 1 << 30, TwoShot, true, TwoShot},
		{"reducescatter at threshold", ReduceScatter, 2 << 20, "", true, CopyEngine},
		{"reducescatter below threshold", ReduceScatter, 2<<20 - 1, "", true, OneShot},
		{"reducescatter path off", ReduceScatter, 1 << 30, "", false, OneShot},
		{"reduce registered forced ce has none", Reduce, 1 << 30, CopyEngine, true, OneShot},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, th.Choose(tc.c, tc.bytes, 8, tc.forced, tc.registered))
		})
	}
	// One rank has nothing to reduce across: the kernels take it.
	assert.Equal(t, OneShot, th.Choose(AllReduce, 1<<30, 1, CopyEngine, true))
	assert.Equal(t, OneShot, th.Choose(ReduceScatter, 1<<30, 1, "", true))
	assert.Equal(t, CopyEngine, th.Choose(AllGather, 1<<30, 1, "", true))
}

func TestParseAlgorithm(t *testing.T) {
	for _, name := range []string{"", "oneshot", "twoshot", "ll", "ce", "nvls"} {
		a, err := ParseAlgorithm(name)
		assert.NoError(t, err, name)
		assert.Equal(t, Algorithm(name), a)
	}
	_, err := ParseAlgorithm("ring")
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

// The defaults follow the measured crossovers (docs/perf.md): the kernels
// win below them.
func TestDefaultThresholds(t *testing.T) {
	cases := []struct {
		c     Collective
		bytes int64
		want  Algorithm
	}{
		{Broadcast, 32<<20 - 1, OneShot},
		{Broadcast, 32 << 20, CopyEngine},
		{AllGather, 64<<20 - 1, OneShot},
		{AllGather, 64 << 20, CopyEngine},
		{AllReduce, 512 << 10, LL},
		{AllReduce, 128<<20 - 1, TwoShot},
		{AllReduce, 128 << 20, CopyEngine},
		{ReduceScatter, 256<<20 - 1, OneShot},
		{ReduceScatter, 256 << 20, CopyEngine},
		{Reduce, 1 << 30, OneShot},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, DefaultThresholds.Choose(tc.c, tc.bytes, 2, "", true), "%s %d", tc.c, tc.bytes)
	}
	// Without copy engines the kernels serve every size; forcing them
	// works at any size.
	for _, c := range []Collective{AllReduce, ReduceScatter} {
		assert.NotEqual(t, CopyEngine, DefaultThresholds.Choose(c, 1<<30, 2, "", false), "%s without", c)
		assert.Equal(t, CopyEngine, DefaultThresholds.Choose(c, 8, 2, CopyEngine, true), "%s forced", c)
	}
}
