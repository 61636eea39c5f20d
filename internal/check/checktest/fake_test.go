package checktest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/check"
	"github.com/goccl/goccl/internal/membuf"
	"github.com/goccl/goccl/transport"
)

// The fake agrees with check's reference on every collective, dtype and op
// (two independent computations), and its fault injection is caught.
func TestFakeAgreesWithReference(t *testing.T) {
	const n, count = 3, 33
	for _, corrupt := range []bool{false, true} {
		g := NewGroup(n)
		if corrupt {
			g.CorruptCall, g.CorruptRank = 1, 2
		}
		for _, coll := range collectives.AllCollectives() {
			for _, dt := range collectives.AllDataTypes() {
				c := check.Case{Coll: coll, Type: dt, Op: collectives.Avg, Root: 1, NRanks: n, Count: count, Seed: 99}
				g.calls = 0
				err := runAll(g, func(rank int, cm *Comm) error {
					h := membuf.NewHost()
					send, err := h.Alloc(c.InputCount() * dt.Size())
					require.NoError(t, err)
					recv, err := h.Alloc(c.Count * n * dt.Size())
					require.NoError(t, err)
					require.NoError(t, check.FillInput(c, rank, membuf.HostBytes(send)))
					a := &collectives.Args{Coll: coll, Send: send.Ptr, Recv: recv.Ptr, Count: count, Type: dt, Op: c.Op, Root: c.Root}
					require.NoError(t, cm.Run(context.Background(), a))
					res, err := check.Verify(c, rank, membuf.HostBytes(recv)[:c.OutputCount(rank)*dt.Size()])
					require.NoError(t, err)
					wantWrong := 0
					if corrupt && rank == 2 && c.OutputCount(rank) > 0 {
						wantWrong = 1
					}
					require.Equalf(t, wantWrong, res.Wrong, "%v rank %d: %v", c, rank, res)
					return nil
				})
				require.NoError(t, err)
			}
		}
	}
}

func runAll(g *Group, f func(int, *Comm) error) error {
	return g.boot.Run(func(r int, _ transport.Bootstrap) error { return f(r, g.Rank(r)) })
}
