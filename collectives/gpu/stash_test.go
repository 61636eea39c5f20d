package gpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// stashFor gives a launch one block's round, as kernels/common.cuh's
// chunk_elems cuts it, where the stash holds it.
func TestStashFor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stash int64
		share int64
		count uint64
		elem  int64
		grid  int
		want  uint32
	}{
		{"8 MiB float32 on 128 blocks", 128 << 10, 16, 2 << 20, 4, 128, 64 << 10},
		{"8 MiB bfloat16 on 128 blocks", 128 << 10, 16, 4 << 20, 2, 128, 64 << 10},
		{"a whole slot", 128 << 10, 16, 4 << 20, 4, 128, 128 << 10},
		{"past a slot: the rounds are slots", 128 << 10, 16, 8 << 20, 4, 128, 128 << 10},
		{"rounded up to 16 bytes", 128 << 10, 16, 1000, 4, 3, 1344}, // ceil(1000/3) = 334 -> 336 elements
		{"one element", 128 << 10, 16, 1, 8, 1, 16},
		{"one byte", 128 << 10, 16, 1, 1, 1, 16},
		{"8 MiB on 132 blocks, 16-byte shares", 128 << 10, 16, 2 << 20, 4, 132, 63552},   // 15888 elements
		{"8 MiB on 132 blocks, 128-byte shares", 128 << 10, 128, 2 << 20, 4, 132, 63616}, // 15904 elements
		{"128-byte shares of bfloat16", 128 << 10, 128, 1000, 2, 3, 768},                 // 334 -> 384 elements
		{"shares past the slot: a slot", 128 << 10, 4096, 4 << 20, 4, 100, 128 << 10},
		{"a round past the stash", 32 << 10, 16, 2 << 20, 4, 128, 0},
		{"a round the stash just holds", 64 << 10, 16, 2 << 20, 4, 128, 64 << 10},
		{"stash off", 0, 16, 2 << 20, 4, 128, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tu := tuning{slot: 128 << 10, stash: tc.stash, share: tc.share}
			assert.Equal(t, tc.want, tu.stashFor(tc.count, tc.elem, tc.grid))
		})
	}
}

// One-shot AllReduce launches, and only they, get the stash; New lets
// every one-shot kernel take it, capped at the GPU's shared memory and the
// slot.
func TestOneShotLaunchesGetStash(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tune      string
		optin     int
		wantStash int // each one-shot kernel's opt-in; 0: none set
		sizes     map[int64]uint32
	}{
		{"default (1 MiB spreads over 64 blocks)", "", 0, 128 << 10, map[int64]uint32{1 << 20: 16 << 10, 8 << 20: 64 << 10, 16<<20 - 16: 128 << 10}},
		{"capped by the GPU", "", 49 << 10, 48 << 10, map[int64]uint32{4 << 20: 32 << 10, 8 << 20: 0}},
		{"capped by the slot", "slot=32K,stash=1M", 0, 32 << 10, map[int64]uint32{4 << 20: 32 << 10, 16<<20 - 16: 32 << 10}},
		{"off", "stash=0", 0, 0, map[int64]uint32{8 << 20: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvTune, tc.tune)
			bes, drvs, _ := newFakeBackendsWith(t, 2, Config{}, func(_ int, d *fakeDriver) { d.smemOptin = tc.optin })
			if tc.wantStash == 0 {
				assert.Empty(t, drvs[0].dynSmem)
			} else {
				assert.Len(t, drvs[0].dynSmem, numTypes*numOps)
				for name, bytes := range drvs[0].dynSmem {
					assert.Contains(t, name, "goccl_allreduce_oneshot_")
					assert.Equal(t, tc.wantStash, bytes, name)
				}
			}
			for bytes, want := range tc.sizes {
				drvs[0].launches = nil
				args := collectives.Args{Coll: collectives.AllReduce, Send: 1 << 30, Recv: 2 << 30,
					Count: int(bytes / 4), Type: collectives.Float32, Op: collectives.Sum}
				require.NoError(t, bes[0].Run(context.Background(), &args))
				require.Len(t, drvs[0].launches, 1)
				l := drvs[0].launches[0]
				require.Equal(t, "goccl_allreduce_oneshot_f32_sum", l.name, "%d bytes", bytes)
				assert.Equal(t, want, l.cfg.SharedMem, "%d bytes", bytes)
			}
		})
	}

	// Every other kernel launches without dynamic shared memory.
	bes, drvs, _ := newFakeBackends(t, 2, Config{})
	for _, a := range []collectives.Args{
		{Coll: collectives.AllReduce, Count: 1 << 10, Type: collectives.Float32},     // LL
		{Coll: collectives.AllReduce, Count: 16 << 20, Type: collectives.Float32},    // two-shot
		{Coll: collectives.ReduceScatter, Count: 1 << 20, Type: collectives.Float32}, // one-shot
		{Coll: collectives.Reduce, Count: 1 << 20, Type: collectives.Float32},        // one-shot
		{Coll: collectives.Broadcast, Count: 1 << 20, Type: collectives.Float32},     // kernel
		{Coll: collectives.AllGather, Count: 1 << 20, Type: collectives.Float32},     // kernel
	} {
		drvs[0].launches = nil
		a.Send, a.Recv, a.Op = 1<<30, 2<<30, collectives.Sum
		require.NoError(t, bes[0].Run(context.Background(), &a))
		require.Len(t, drvs[0].launches, 1)
		assert.NotContains(t, drvs[0].launches[0].name, "allreduce_oneshot")
		assert.Zero(t, drvs[0].launches[0].cfg.SharedMem, drvs[0].launches[0].name)
	}
}

func TestTuneStash(t *testing.T) {
	tu := defaultTuning(2, 0)
	require.NoError(t, tu.parse("stash=64K"))
	assert.Equal(t, int64(64<<10), tu.stash)
	require.NoError(t, tu.parse("stash=0"))
	assert.Zero(t, tu.stash)
	assert.ErrorIs(t, tu.parse("stash=-16"), collectives.ErrInvalidArgument)
}
