package comm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Plain Sends before plain Recvs, outside any group, on the host backend:
// each rank sends to both ring neighbours, then receives from both, as a
// program written for NCCL's eager Sends does.
func TestHostSendBeforeRecvOutsideGroup(t *testing.T) {
	for _, tc := range []struct{ n, count int }{{2, 1}, {3, 4093}, {4, 100_000}} {
		t.Run(fmt.Sprintf("%d ranks, %d int32", tc.n, tc.count), func(t *testing.T) {
			comms := hostComms(t, tc.n)
			ctx := context.Background()
			n := tc.n
			// The k-th message from s to its neighbour d.
			data := func(s, d, k int) []int32 {
				rng := rand.New(rand.NewPCG(uint64(s*100+d), uint64(k)))
				b := make([]int32, tc.count)
				for i := range b {
					b[i] = rng.Int32()
				}
				return b
			}
			got := make([][2][]int32, n)
			errs := eachRank(comms, func(c *Comm) error {
				r := c.Rank()
				next, prev := (r+1)%n, (r+n-1)%n
				toNext, toPrev := data(r, next, 0), data(r, prev, 1)
				if err := c.Send(ctx, ptr32(toNext), tc.count, Int32, next, 0); err != nil {
					return err
				}
				if err := c.Send(ctx, ptr32(toPrev), tc.count, Int32, prev, 0); err != nil {
					return err
				}
				got[r] = [2][]int32{poisoned(tc.count), poisoned(tc.count)}
				if err := c.Recv(ctx, ptr32(got[r][0]), tc.count, Int32, prev, 0); err != nil {
					return err
				}
				err := c.Recv(ctx, ptr32(got[r][1]), tc.count, Int32, next, 0)
				runtime.KeepAlive(toNext)
				runtime.KeepAlive(toPrev)
				return err
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			for r := range got {
				// At 2 ranks both neighbours are one rank, whose two
				// messages arrive in the order sent.
				next, prev := (r+1)%n, (r+n-1)%n
				assert.Equal(t, data(prev, r, 0), got[r][0], "rank %d: from %d", r, prev)
				assert.Equal(t, data(next, r, 1), got[r][1], "rank %d: from %d", r, next)
			}
		})
	}
}
