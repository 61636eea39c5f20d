package gpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// a2aGroup is Comm.AllToAll's group on one rank of n: a Send of count
// elements of send's chunk p to every rank p, a Recv into recv's chunk p.
func a2aGroup(n int, send, recv uintptr, count int, dt collectives.DataType, stream uintptr, seq uint64) *collectives.Group {
	g := &collectives.Group{Kind: collectives.AllToAllGroup, Seq: seq}
	chunk := uintptr(count * dt.Size())
	for p := range n {
		g.P2P = append(g.P2P,
			collectives.P2P{Kind: collectives.SendOp, Peer: p, Buf: send + uintptr(p)*chunk, Count: count, Type: dt, Stream: stream},
			collectives.P2P{Kind: collectives.RecvOp, Peer: p, Buf: recv + uintptr(p)*chunk, Count: count, Type: dt, Stream: stream})
	}
	return g
}

func TestAllToAllOneShot(t *testing.T) {
	const send, recv = 0x10000000, 0x20000000
	f32 := collectives.Float32
	cases := []struct {
		name   string
		n      int
		group  func(n int) *collectives.Group
		oneHot bool   // goccl_alltoall_ll, else goccl_p2p
		bytes  uint64 // per peer
	}{
		{"small, 3 ranks", 3, func(n int) *collectives.Group { return a2aGroup(n, send, recv, 100, f32, 0x55, 9) }, true, 400},
		{"odd sizes, 8 ranks", 8, func(n int) *collectives.Group {
			return a2aGroup(n, send, recv, 4099, collectives.Uint8, 0x55, 9)
		}, true, 4099},
		{"in place", 2, func(n int) *collectives.Group { return a2aGroup(n, send, send, 1000, f32, 0x55, 9) }, true, 4000},
		{"the most per peer", 4, func(n int) *collectives.Group { return a2aGroup(n, send, recv, 16<<10, f32, 0x55, 9) }, true, 64 << 10},
		{"over the threshold", 4, func(n int) *collectives.Group { return a2aGroup(n, send, recv, 16<<10+1, f32, 0x55, 9) }, false, 0},
		{"a plain group of the same shape", 3, func(n int) *collectives.Group {
			g := a2aGroup(n, send, recv, 100, f32, 0x55, 9)
			g.Kind = collectives.PlainGroup
			return g
		}, false, 0},
		{"chunks not where AllToAll puts them", 3, func(n int) *collectives.Group {
			g := a2aGroup(n, send, recv, 100, f32, 0x55, 9)
			g.P2P[3].Buf += 16
			return g
		}, false, 0},
		{"two streams", 3, func(n int) *collectives.Group {
			g := a2aGroup(n, send, recv, 100, f32, 0x55, 9)
			g.P2P[4].Stream = 0x66
			return g
		}, false, 0},
		{"one rank", 1, func(n int) *collectives.Group { return a2aGroup(n, send, recv, 100, f32, 0x55, 9) }, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bes, drvs, _ := newFakeBackends(t, tc.n, Config{})
			be, d := bes[0], drvs[0]
			require.NoError(t, be.RunGroup(context.Background(), tc.group(tc.n)))
			require.NotEmpty(t, d.launches)
			if !tc.oneHot {
				assert.Equal(t, "goccl_p2p", d.launches[0].name)
				return
			}
			require.Len(t, d.launches, 1)
			l := d.launches[0]
			assert.Equal(t, "goccl_alltoall_ll", l.name)
			g := tc.group(tc.n)
			assert.Equal(t, uint64(g.P2P[0].Buf), u64at(l.params, offSend))
			assert.Equal(t, uint64(g.P2P[1].Buf), u64at(l.params, offRecv))
			assert.Equal(t, tc.bytes, u64at(l.params, offCount), "bytes per peer")
			assert.Equal(t, uint64(9), u64at(l.params, offSeq), "the group's call number")
			assert.Equal(t, cuda.Stream(0x55), l.cfg.Stream)
			// Every block gets a line of every chunk: (grid-1) full shares
			// leave some bytes for the last.
			grid := uint64(l.cfg.Grid.X)
			per := ((tc.bytes+grid-1)/grid + 7) &^ 7
			assert.Less(t, per*(grid-1), tc.bytes, "grid %d leaves a block without data", grid)
			assert.LessOrEqual(t, per, uint64(llBlockMax), "a block's share fits its lines")
		})
	}
}

func TestAllToAllOneShotOff(t *testing.T) {
	g := a2aGroup(3, 0x10000000, 0x20000000, 100, collectives.Float32, 0x55, 1)
	t.Run("GOCCL_TUNE=ll.alltoall=0", func(t *testing.T) {
		t.Setenv(EnvTune, "ll.alltoall=0")
		bes, drvs, _ := newFakeBackends(t, 3, Config{})
		require.NoError(t, bes[0].RunGroup(context.Background(), g))
		assert.Equal(t, "goccl_p2p", drvs[0].launches[0].name)
	})
	t.Run("Config.Env's GOCCL_TUNE=ll.alltoall=0 over the process's", func(t *testing.T) {
		t.Setenv(EnvTune, "")
		bes, drvs, _ := newFakeBackends(t, 3, Config{Env: map[string]string{EnvTune: "ll.alltoall=0"}})
		require.NoError(t, bes[0].RunGroup(context.Background(), g))
		assert.Equal(t, "goccl_p2p", drvs[0].launches[0].name)
	})
	t.Run("a fatbin without the kernel", func(t *testing.T) {
		bes, drvs, _ := newFakeBackendsWith(t, 3, Config{}, func(_ int, d *fakeDriver) { d.noFunc = "goccl_alltoall" })
		require.NoError(t, bes[0].RunGroup(context.Background(), g))
		assert.Equal(t, "goccl_p2p", drvs[0].launches[0].name)
	})
	t.Run("more than the lines hold", func(t *testing.T) {
		tu := defaultTuning(3, 0)
		require.ErrorIs(t, tu.parse("ll.alltoall=1M"), collectives.ErrInvalidArgument)
	})
}

// The grid leaves no block without data whatever llblock is.
func TestLLGridFillsEveryBlock(t *testing.T) {
	for _, llblock := range []string{"8", "9", "24", "100", "2K", "4K"} {
		t.Setenv(EnvTune, "llblock="+llblock)
		bes, _, _ := newFakeBackends(t, 1, Config{})
		for bytes := int64(1); bytes <= llMaxBytes; bytes += 1 + bytes/7 {
			g := int64(bes[0].llGrid(bytes))
			per := ((bytes+g-1)/g + 7) &^ 7
			require.Less(t, per*(g-1), bytes, "llblock=%s, %d bytes: grid %d", llblock, bytes, g)
			require.LessOrEqual(t, per, int64(llBlockMax), "llblock=%s, %d bytes: grid %d", llblock, bytes, g)
		}
	}
}
