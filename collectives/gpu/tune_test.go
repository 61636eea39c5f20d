package gpu

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

func TestTuningParse(t *testing.T) {
	def := defaultTuning(2, 0)
	cases := []struct {
		spec string
		want func(*tuning)
		err  string
	}{
		{"", func(*tuning) {}, ""},
		{" grid=16 , blockbytes=8K", func(t *tuning) { t.grid, t.blockBytes = 16, 8<<10 }, ""},
		{"grid=128,slot=4K,twoshot=1M,llblock=512", func(t *tuning) {
			t.grid, t.slot, t.slotGiven, t.th.TwoShot, t.llBlock = 128, 4<<10, true, 1<<20, 512
		}, ""},
		// The default slot follows the grid: 64 MiB over 2 halves x 2
		// sources x grid slots, on 4 KiB boundaries.
		{"grid=132", func(t *tuning) { t.grid, t.slot = 132, 124<<10 }, ""},
		{"grid=264,threads=256", func(t *tuning) { t.grid, t.threads, t.slot = 264, 256, 60<<10 }, ""},
		{"grid=512", func(t *tuning) { t.grid, t.slot = 512, 32<<10 }, ""},
		{"grid=64", func(t *tuning) { t.grid = 64 }, ""}, // still at most 128 KiB
		// A slot given wins, whichever comes first.
		{"grid=132,slot=64K", func(t *tuning) { t.grid, t.slot, t.slotGiven = 132, 64<<10, true }, ""},
		{"slot=64K,grid=132", func(t *tuning) { t.grid, t.slot, t.slotGiven = 132, 64<<10, true }, ""},
		{"threads=32", func(t *tuning) { t.threads = 32 }, ""},
		{"share=128", func(t *tuning) { t.share = 128 }, ""},
		{"share=128K", func(t *tuning) { t.share = 128 << 10 }, ""},
		{"grid=512,slot=1M", func(t *tuning) { t.grid, t.slot, t.slotGiven = 512, 1<<20, true }, ""}, // 2 GiB: the most
		{"ll.all_reduce=16K", func(t *tuning) { t.th.LL[collectives.AllReduce] = 16 << 10 }, ""},
		{"twoshot2=4M", func(t *tuning) { t.th.TwoShotPair = 4 << 20 }, ""},
		{"ce.broadcast=64M,ce.all_gather=16M", func(t *tuning) {
			t.th.CopyEngine[collectives.Broadcast] = 64 << 20
			t.th.CopyEngine[collectives.AllGather] = 16 << 20
			t.ceExplicit[collectives.Broadcast], t.ceExplicit[collectives.AllGather] = true, true
		}, ""},
		{"ce.all_reduce=1M,ce.reduce_scatter=2M,cechunk=64K,cegrid=8", func(t *tuning) {
			t.th.CopyEngine[collectives.AllReduce] = 1 << 20
			t.th.CopyEngine[collectives.ReduceScatter] = 2 << 20
			t.ceExplicit[collectives.AllReduce], t.ceExplicit[collectives.ReduceScatter] = true, true
			t.ceChunk, t.ceGrid = 64<<10, 8
		}, ""},
		{"cedirect=0,cefloor.all_reduce=8M,cefloor.reduce_scatter=1M", func(t *tuning) {
			t.ceDirect = false
			t.ceFloor[collectives.AllReduce], t.ceFloor[collectives.ReduceScatter] = 8<<20, 1<<20
		}, ""},
		{"ceinline.all_reduce=0,ceinline.reduce_scatter=1", func(t *tuning) {
			t.ceInline[collectives.AllReduce], t.ceInline[collectives.ReduceScatter] = false, true
		}, ""},
		{"ceinline.broadcast=1", nil, "unknown key"},
		{"ceinline.all_reduce=2", nil, "want 0 or 1"},
		{"celand=0", func(t *tuning) { t.ceLand = 0 }, ""},
		{"celand=1M", func(t *tuning) { t.ceLand = 1 << 20 }, ""},
		{"celand=100", nil, "celand 100"},
		{"celand=128M", nil, "up to 64M"},
		{"cedirect=yes", nil, "want 0 or 1"},
		{"cefloor.all_reduce=8", nil, "at least 16 bytes"},
		{"cefloor.broadcast=8M", nil, "unknown key"},
		{"grid=0", nil, "grid=0"},
		{"cegrid=513", nil, "want 1 to 512 blocks"},
		{"cechunk=100", nil, "cechunk 100"},
		{"grid=513", nil, "grid=513"},
		{"threads=0", nil, "multiple of 32 up to 512"},
		{"threads=100", nil, "threads=100"},
		{"threads=1024", nil, "multiple of 32 up to 512"},
		{"threads=many", nil, "multiple of 32"},
		{"share=8", nil, "share 8: want a power of 2 from 16"},
		{"share=96", nil, "share 96"},
		{"slot=64K,share=128K", nil, "up to the slot (65536)"},
		{"grid", nil, "not key=value"},
		{"slot=100", nil, "multiple of 16"},
		{"slot=2M", nil, "up to 1M"},
		{"blockbytes=0", nil, "positive"},
		{"llblock=0", nil, "positive"},
		{"ll.all_reduce=1M", nil, "at most 524288 bytes"},
		{"ll.all_to_all=1M", nil, "unknown key"},
		{"pipe.all_reduce=1M", nil, "unknown key"},
		{"ce.reduce=1M", nil, "unknown key"},
		{"ll.broadcast=1M", nil, "unknown key"},
		{"speed=11", nil, "unknown key"},
		{"twoshot=lots", nil, "invalid size"},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			got := defaultTuning(2, 0)
			err := got.parse(tc.spec)
			if tc.err != "" {
				require.ErrorIs(t, err, collectives.ErrInvalidArgument)
				assert.Contains(t, err.Error(), tc.err)
				assert.Contains(t, err.Error(), EnvTune)
				return
			}
			require.NoError(t, err)
			want := def
			tc.want(&want)
			assert.Equal(t, want, got)
		})
	}
}

// An explicit slot and grid may not ask for more than maxStaging.
func TestTuningStagingBound(t *testing.T) {
	tu := defaultTuning(8, 0)
	require.NoError(t, tu.parse("grid=128,slot=1M")) // 2 GiB at 8 ranks: the most
	tu = defaultTuning(8, 0)
	err := tu.parse("grid=129,slot=1M")
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "slot 1048576 on 129 blocks: 2164260864 bytes of staging at 8 ranks")
	tu = defaultTuning(8, 0)
	require.NoError(t, tu.parse("grid=512")) // the default slot shrinks instead
	assert.Equal(t, int64(8<<10), tu.slot)
}

func TestTuningDefaults(t *testing.T) {
	for _, tc := range []struct {
		nranks, maxBlocks int
		slot              int64
		grid, ceGrid      int
		land              int64 // a peer's landing slot: the half's 8 MiB shared
	}{
		{1, 0, 128 << 10, defaultGrid, defaultCEGrid, 8 << 20},
		{2, 0, 128 << 10, defaultGrid, defaultCEGrid, 8 << 20},
		{3, 0, 84 << 10, defaultGrid, defaultCEGrid, 4 << 20},
		{4, 0, 64 << 10, defaultGrid, defaultCEGrid, 2796192},
		{6, 0, 40 << 10, defaultGrid, defaultCEGrid, 1677712},
		{7, 0, 36 << 10, defaultGrid, defaultCEGrid, 1398096},
		{8, 0, 32 << 10, defaultGrid, defaultCEGrid, 1198368},
		// Config.MaxBlocks caps every launch, and the slots follow.
		{8, 32, 128 << 10, 32, 32, 1198368},
		{8, 512, 8 << 10, 512, defaultCEGrid, 1198368},
		{2, 8, 128 << 10, 8, 8, 8 << 20},
	} {
		tu := defaultTuning(tc.nranks, tc.maxBlocks)
		assert.Equal(t, tc.slot, tu.slot, "nranks %d", tc.nranks)
		assert.Zero(t, tu.slot%slotAlign, "nranks %d", tc.nranks)
		assert.LessOrEqual(t, 2*int64(tc.nranks)*int64(tu.grid)*tu.slot, int64(stagingBudget), "nranks %d", tc.nranks)
		assert.Equal(t, defaultThreads, tu.threads)
		assert.Equal(t, int64(defaultShare), tu.share)
		assert.Equal(t, tc.grid, tu.grid)
		assert.Equal(t, tc.ceGrid, tu.ceGrid)
		assert.Equal(t, tc.land, tu.ceLand, "nranks %d", tc.nranks)
		assert.Zero(t, tu.ceLand%16)
		assert.LessOrEqual(t, landBytes(tc.nranks, tu.ceLand), uint64(2*defaultCELandHalf), "nranks %d", tc.nranks)
	}
}

func TestTuningShape(t *testing.T) {
	tu := defaultTuning(2, 0) // blocks of 16 KiB, 128 at most; LL blocks of 2 KiB
	cases := []struct {
		f    family
		work int64
		grid int
	}{
		{famAllReduceOneShot, 8, 1},
		{famAllReduceOneShot, 16 << 10, 1},
		{famAllReduceOneShot, 16<<10 + 1, 2},
		{famAllGather, 1 << 30, defaultGrid},
		// LL: a block per 2 KiB, but never more than 4 KiB per block.
		{famAllReduceLL, 8, 1},
		{famAllReduceLL, 2<<10 + 1, 2},
		{famAllReduceLL, 64 << 10, 32},
		{famAllReduceLL, llMaxBytes, llMaxBlocks},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.grid, tu.shape(tc.f, tc.work), "%s %d", familyStems[tc.f], tc.work)
	}
	tu.llBlock = 1 << 20 // still at least one block per 4 KiB
	assert.Equal(t, 16, tu.shape(famAllReduceLL, 64<<10))
}

// A rank whose GOCCL_TUNE or MaxBlocks differs would launch other grids
// than its peers and wait forever: every rank fails New instead.
func TestTuningMustAgree(t *testing.T) {
	errs := transporttest.NewGroup(3).OnRanks(t, func(ctx context.Context, r int, b transport.Bootstrap) error {
		mine := "|0|same"
		if r == 2 {
			mine = "grid=8|0|other"
		}
		return agreeTuning(ctx, b, mine, nil)
	})
	for r, err := range errs {
		require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
		assert.Contains(t, err.Error(), EnvTune)
	}
	assert.Contains(t, errs[0].Error(), "rank 2")
	assert.Contains(t, errs[2].Error(), "rank 0")
}

func TestBadTuningFailsNewOnEveryRank(t *testing.T) {
	t.Setenv(EnvTune, "slot=7")
	errs := transporttest.NewGroup(2).OnRanks(t, func(ctx context.Context, r int, b transport.Bootstrap) error {
		mk := func(context.Context, string, cuda.Driver, transport.Bootstrap, cuda.Device, cuda.Context) (transport.Mapper, error) {
			return &fakeMapper{b: b}, nil
		}
		_, err := newBackend(ctx, newFakeDriver(), b, Config{Device: r}, []byte("fatbin"), mk)
		return err
	})
	for r, err := range errs {
		require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
		assert.Contains(t, err.Error(), "slot 7", "rank %d", r)
	}
}

// One rank's bad GOCCL_TUNE fails the others too, naming that rank.
func TestTuningErrorReachesPeers(t *testing.T) {
	bad := fmt.Errorf("%s: slot 7: %w", EnvTune, collectives.ErrInvalidArgument)
	errs := transporttest.NewGroup(2).OnRanks(t, func(ctx context.Context, r int, b transport.Bootstrap) error {
		var lerr error
		if r == 1 {
			lerr = bad
		}
		return agreeTuning(ctx, b, "|0|same", lerr)
	})
	require.ErrorIs(t, errs[1], bad)
	var pe *collectives.PeerError
	require.ErrorAs(t, errs[0], &pe)
	assert.Equal(t, 1, pe.Rank)
	assert.Contains(t, errs[0].Error(), "slot 7")
}
