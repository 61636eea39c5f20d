package ucx

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// needUCX skips when libucp cannot be loaded, naming the package.
func needUCX(t *testing.T) {
	t.Helper()
	if err := Load(); err != nil {
		t.Skipf("libucp not available (install libucx0): %v", err)
	}
	// TCP over the loopback, as between nodes without RDMA.
	t.Setenv("UCX_TLS", "tcp,self")
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// TestExchangeEveryPair sends random bytes between every ordered pair of
// three workers and checks each receive against what its sender sent.
func TestExchangeEveryPair(t *testing.T) {
	needUCX(t)
	const n = 3
	sizes := []int{1, 4095, 1 << 20} // eager and rendezvous protocols
	data := make([][][]byte, n)      // data[src][size index]
	for s := range data {
		for _, sz := range sizes {
			b := make([]byte, sz)
			for i := range b {
				b[i] = byte(rand.Uint32())
			}
			data[s] = append(data[s], b)
		}
	}
	g := transporttest.NewGroup(n)
	err := g.Run(func(rank int, b transport.Bootstrap) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		wk, err := New(ctx, b, nil)
		if err != nil {
			return err
		}
		defer wk.Close()
		for k, sz := range sizes {
			var ops []Op
			got := make([][]byte, n)
			for p := 0; p < n; p++ {
				if p == rank {
					continue
				}
				got[p] = make([]byte, sz)
				for i := range got[p] {
					got[p][i] = 0xA5 // poisoned
				}
				r, err := wk.Recv(p, uint64(p)<<8|uint64(k), addr(got[p]), sz)
				require.NoError(t, err)
				s, err := wk.Send(p, uint64(rank)<<8|uint64(k), addr(data[rank][k]), sz)
				require.NoError(t, err)
				ops = append(ops, r, s)
			}
			if err := wk.Wait(ops, WaitPolicy{Timeout: 30 * time.Second}); err != nil {
				return err
			}
			for p := 0; p < n; p++ {
				if p != rank {
					assert.Equal(t, data[p][k], got[p], "rank %d from %d, %d bytes", rank, p, sz)
				}
			}
		}
		return b.Barrier(ctx)
	})
	require.NoError(t, err)
}

// TestSizeMismatchNamesThePeer: a message larger or smaller than its
// receive fails the wait with ErrSizeMismatch naming the sender and both
// sizes; the wait's other ops still complete, and the worker stays usable.
func TestSizeMismatchNamesThePeer(t *testing.T) {
	needUCX(t)
	cases := []struct {
		name       string
		sent, recv int
		says       string
	}{
		{"larger", 64, 16, "rank 0 sent more than 16 bytes, rank 1 expected 16"},
		{"smaller", 8, 16, "rank 0 sent 8 bytes, rank 1 expected 16"},
		{"larger, rendezvous", 1 << 20, 1 << 19, "rank 0 sent more than 524288 bytes"},
	}
	g := transporttest.NewGroup(2)
	err := g.Run(func(rank int, b transport.Bootstrap) error {
		ctx := context.Background()
		wk, err := New(ctx, b, nil)
		if err != nil {
			return err
		}
		defer wk.Close()
		for k, tc := range cases {
			buf := make([]byte, max(tc.sent, tc.recv))
			ok := []byte("fine")
			okGot := make([]byte, 4)
			if rank == 0 {
				s1, err := wk.Send(1, uint64(k)<<1, addr(buf), tc.sent)
				require.NoError(t, err)
				s2, err := wk.Send(1, uint64(k)<<1|1, addr(ok), 4)
				require.NoError(t, err)
				require.NoError(t, wk.Wait([]Op{s1, s2}, WaitPolicy{Timeout: 30 * time.Second}), tc.name)
			} else {
				r1, err := wk.Recv(0, uint64(k)<<1, addr(buf), tc.recv)
				if err == nil {
					var r2 Op
					r2, err = wk.Recv(0, uint64(k)<<1|1, addr(okGot), 4)
					require.NoError(t, err)
					err = wk.Wait([]Op{r1, r2}, WaitPolicy{Timeout: 30 * time.Second})
					assert.Equal(t, "fine", string(okGot), "%s: the other receive completes", tc.name)
				}
				assert.ErrorIs(t, err, ErrSizeMismatch, tc.name)
				var pe *PeerError
				if assert.ErrorAs(t, err, &pe, tc.name) {
					assert.Equal(t, 0, pe.Rank, tc.name)
				}
				assert.ErrorContains(t, err, tc.says, tc.name)
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// TestWaitEndsOnCheckAndTimeout: a receive nobody sends ends with the
// policy's error, then with the timeout naming the awaited rank.
func TestWaitEndsOnCheckAndTimeout(t *testing.T) {
	needUCX(t)
	g := transporttest.NewGroup(2)
	stop := assert.AnError
	err := g.Run(func(rank int, b transport.Bootstrap) error {
		ctx := context.Background()
		wk, err := New(ctx, b, nil)
		if err != nil {
			return err
		}
		defer wk.Close()
		buf := make([]byte, 8)
		peer := 1 - rank
		op, err := wk.Recv(peer, 99, addr(buf), 8)
		require.NoError(t, err)
		err = wk.Wait([]Op{op}, WaitPolicy{Check: func() error { return stop }})
		assert.ErrorIs(t, err, stop)
		op, err = wk.Recv(peer, 99, addr(buf), 8)
		require.NoError(t, err)
		err = wk.Wait([]Op{op}, WaitPolicy{Timeout: 200 * time.Millisecond})
		assert.ErrorIs(t, err, ErrTimeout)
		var pe *PeerError
		if assert.ErrorAs(t, err, &pe) {
			assert.Equal(t, peer, pe.Rank)
		}
		return b.Barrier(ctx)
	})
	require.NoError(t, err)
}
