package gpu

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// The eager area is the workspace's tail, past the landing area; its offset reaches the point-to-point launches (reserved[5]),
// and p2peager=0 turns the eager Sends off in their flags.
func TestP2PEagerArea(t *testing.T) {
	for _, tc := range []struct {
		n    int
		tune string
		off  bool
	}{{2, "", false}, {3, "celand=1M", false}, {8, "", false}, {2, "p2peager=0", true}} {
		t.Run(fmt.Sprintf("%d ranks %q", tc.n, tc.tune), func(t *testing.T) {
			t.Setenv(EnvTune, tc.tune)
			bes, drvs, _ := newFakeBackends(t, tc.n, Config{})
			for r, be := range bes {
				ws := be.workspace
				eb := eagerBytes(tc.n)
				require.Equal(t, uint64(tc.n-1)*(p2pEagerMailboxes+256<<10), eb)
				assert.Equal(t, ws.Size-signalSize-eb, be.p2p.eagerAt, "rank %d: the eager area is the workspace's tail", r)
				assert.Equal(t, uint64(2*tc.n*be.tune.grid)*uint64(be.tune.slot)+llBytes(tc.n)+landBytes(tc.n, be.tune.ceLand),
					be.p2p.eagerAt, "rank %d: past the landing area", r)
				drvs[r].launches = nil
				g := &collectives.Group{P2P: []collectives.P2P{
					{Kind: collectives.SendOp, Peer: (r + 1) % tc.n, Buf: userBuf(r, 0), Count: 10, Type: collectives.Float32},
				}}
				require.NoError(t, be.RunGroup(context.Background(), g))
				require.Len(t, drvs[r].launches, 1)
				q := drvs[r].launches[0].params
				assert.Equal(t, be.p2p.eagerAt, u64at(q, offP2PEager), "rank %d: reserved[5]", r)
				assert.Equal(t, tc.off, u64at(q, offP2PStamp)&p2pEagerOff != 0, "rank %d: p2pEagerOff", r)
			}
		})
	}
}

// The limit the docs give: every channel's part of a Send up to it fits
// the channel's ring, one more 16 bytes does not.
func TestP2PEagerLimit(t *testing.T) {
	for _, tc := range []struct {
		channels int
		slot     uint64
		ring     uint64
		limit    uint64
	}{
		{8, 128 << 10, 32 << 10, 256 << 10},  // the default at 2 ranks
		{8, 84 << 10, 32 << 10, 256 << 10},   // at 3 ranks
		{8, 32 << 10, 32 << 10, 256 << 10},   // at 8 ranks
		{8, 4 << 10, 32 << 10, 256 << 10},    // slots smaller than a part: two chunks a channel
		{3, 128 << 10, 64 << 10, 192 << 10},  // 3 channels: rings of a power of 2
		{1, 128 << 10, 256 << 10, 256 << 10}, // one channel: two chunks of a slot
	} {
		assert.Equal(t, tc.ring, eagerRing(tc.channels), "%d channels", tc.channels)
		assert.Equal(t, tc.limit, eagerLimit(tc.channels, tc.slot), "%d channels, slots of %d", tc.channels, tc.slot)
	}
}

// The eager area is cleared at init (a receiver takes a mailbox entry
// whose op number reaches its op's): a failure to clear it fails New on
// every rank.
func TestP2PEagerAreaCleared(t *testing.T) {
	const n = 3
	g := transporttest.NewGroup(n)
	errs := make([]error, n)
	_ = g.Run(func(rank int, b transport.Bootstrap) error {
		d := newFakeDriver()
		if rank == 1 {
			d.failOn = "memset8"
		}
		mk := func(_ context.Context, _ string, _ cuda.Driver, b transport.Bootstrap, _ cuda.Device, _ cuda.Context) (transport.Mapper, error) {
			return &fakeMapper{b: b}, nil
		}
		be, err := newBackend(context.Background(), d, b, Config{Device: rank}, []byte("fatbin"), mk)
		if err == nil {
			_ = be.Close()
		}
		errs[rank] = err
		return nil
	})
	for rank, err := range errs {
		require.Error(t, err, "rank %d", rank)
	}
	assert.ErrorContains(t, errs[1], "clear the eager area")
	var pe *collectives.PeerError
	require.ErrorAs(t, errs[0], &pe)
	assert.Equal(t, 1, pe.Rank)
}

// Config.Timeout reaches the point-to-point launches in whole
// milliseconds, rounded up (the high half of their flags word); 0 leaves
// the waits unbounded, and a negative one fails New.
func TestP2PTimeoutReachesKernels(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		ms      uint64
	}{{0, 0}, {time.Nanosecond, 1}, {1500 * time.Microsecond, 2}, {30 * time.Second, 30000}, {2000 * time.Hour, 1<<32 - 1}} {
		t.Run(tc.timeout.String(), func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, 2, Config{Timeout: tc.timeout})
			drvs[0].launches = nil
			require.NoError(t, bes[0].RunGroup(context.Background(), &collectives.Group{P2P: []collectives.P2P{
				{Kind: collectives.RecvOp, Peer: 1, Buf: userBuf(0, 0), Count: 10, Type: collectives.Float32}}}))
			require.Len(t, drvs[0].launches, 1)
			assert.Equal(t, tc.ms, u64at(drvs[0].launches[0].params, offP2PStamp)>>p2pTimeoutShift)
		})
	}
	g := transporttest.NewGroup(1)
	err := g.Run(func(_ int, b transport.Bootstrap) error {
		_, err := newBackend(context.Background(), newFakeDriver(), b, Config{Timeout: -time.Second}, []byte("fatbin"),
			func(context.Context, string, cuda.Driver, transport.Bootstrap, cuda.Device, cuda.Context) (transport.Mapper, error) {
				return nil, errors.New("not reached")
			})
		return err
	})
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	assert.ErrorContains(t, err, "timeout -1s is negative")
}
