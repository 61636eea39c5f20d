package gpu

import (
	"context"
	"encoding/binary"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// The offsets written here are the ones kernels/common.cuh asserts of
// goccl::Params at compile time (GOCCL_PARAM_AT, checked by nvcc and by the
// emulator's g++ build), so a field moved on one side fails one of them;
// and the limits are the kernels'.
func TestParamsMatchKernels(t *testing.T) {
	src, err := os.ReadFile("../../kernels/common.cuh")
	require.NoError(t, err)
	goOffsets := map[string]int{
		"send": offSend, "recv": offRecv, "count": offCount, "abortFlag": offAbort, "signals": offSignals,
		"peerSignals": offPeerSignals, "peerStaging": offPeerStaging, "blockSlots": offBlockSlots,
		"shareBytes": offShareBytes, "seq": offSeq, "reserved": offStamp, "slotBytes": offSlotBytes, "rank": offRank, "nranks": offNRanks,
		"root": offRoot, "flags": offFlags, "elemSize": offElemSize, "ceChunks": offCEChunks,
		"llOffset": offLLOffset, "ceChunk": offCEChunk, "ceSeq": offCESeq, "ceDepth": offCEDepth,
	}
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^GOCCL_PARAM_AT\((\w+), (\d+)\)$`).FindAllStringSubmatch(string(src), -1) {
		off, err := strconv.Atoi(m[2])
		require.NoError(t, err)
		want, ok := goOffsets[m[1]]
		if assert.True(t, ok, "kernels place Params.%s, params.go does not", m[1]) {
			assert.Equal(t, want, off, "Params.%s", m[1])
		}
		seen[m[1]] = true
	}
	for name := range goOffsets {
		assert.True(t, seen[name], "common.cuh asserts no offset for Params.%s", name)
	}
	size := regexp.MustCompile(`static_assert\(sizeof\(Params\) == (\d+),`).FindStringSubmatch(string(src))
	require.NotNil(t, size, "common.cuh asserts Params' size")
	assert.Equal(t, strconv.Itoa(paramSize), size[1])
	for name, want := range map[string]int{"kMaxRanks": maxRanks, "kMaxBlocks": maxBlocks, "kThreads": maxThreads} {
		m := regexp.MustCompile(`constexpr int ` + name + ` = (\d+);`).FindStringSubmatch(string(src))
		require.NotNil(t, m, name)
		assert.Equal(t, strconv.Itoa(want), m[1], name)
	}
}

// The grid sizes the staging (a slot per block, per half and source) and
// reaches the kernels as Params.blockSlots; threads is the launches'
// block; share reaches them as Params.shareBytes and cuts the stash alike.
func TestLaunchShapeReachesKernels(t *testing.T) {
	for _, tc := range []struct {
		tune                 string
		grid, threads, share int
		slot                 int64
		stash                uint32 // an 8 MiB float32 one-shot's
	}{
		{"", defaultGrid, maxThreads, 16, 128 << 10, 64 << 10},
		{"grid=132", 132, maxThreads, 16, 124 << 10, 63552},
		{"grid=132,share=128", 132, maxThreads, 128, 124 << 10, 63616},
		{"grid=264,threads=256,blockbytes=8K", 264, 256, 16, 60 << 10, 31776},
	} {
		t.Run(tc.tune, func(t *testing.T) {
			t.Setenv(EnvTune, tc.tune)
			const n = 2
			bes, drvs, _ := newFakeBackends(t, n, Config{})
			be := bes[0]
			assert.Equal(t, tc.slot, be.tune.slot)
			assert.Equal(t, uint64(signalSize)+2*n*uint64(tc.grid)*uint64(tc.slot)+llBytes(n)+landBytes(n, be.tune.ceLand)+eagerBytes(n),
				be.workspace.Size)
			drvs[0].launches = nil
			args := collectives.Args{Coll: collectives.AllReduce, Send: 1 << 30, Recv: 2 << 30,
				Count: 2 << 20, Type: collectives.Float32, Op: collectives.Sum}
			require.NoError(t, be.Run(context.Background(), &args))
			require.Len(t, drvs[0].launches, 1)
			l := drvs[0].launches[0]
			assert.Equal(t, "goccl_allreduce_oneshot_f32_sum", l.name)
			assert.Equal(t, uint32(tc.grid), l.cfg.Grid.X)
			assert.Equal(t, uint32(tc.threads), l.cfg.Block.X)
			assert.Equal(t, tc.stash, l.cfg.SharedMem)
			require.Len(t, l.params, paramSize)
			assert.Equal(t, uint32(tc.grid), binary.LittleEndian.Uint32(l.params[offBlockSlots:]))
			assert.Equal(t, uint32(tc.share), binary.LittleEndian.Uint32(l.params[offShareBytes:]))
			assert.Equal(t, uint64(tc.slot), binary.LittleEndian.Uint64(l.params[offSlotBytes:]))
		})
	}
}
