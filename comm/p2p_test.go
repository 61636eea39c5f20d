package comm

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/onheap"
)

// ptr32 is b's address for a call, b kept on the heap (the goroutine
// stacks move).
func ptr32(b []int32) uintptr { return onheap.Addr(b) }

// val is the element rank s sends to rank d at index i in every test here:
// the reference the receivers check against.
func val(s, d, i int) int32 { return int32(s*1_000_000 + d*10_000 + i) }

const poison32 = int32(-0x55555556)

func poisoned(n int) []int32 {
	b := make([]int32, n)
	for i := range b {
		b[i] = poison32
	}
	return b
}

// The calls built as groups, on the real host backend: every result
// against the reference, outputs poisoned beforehand.
func TestHostPointToPointCalls(t *testing.T) {
	const n, count = 3, 1031
	comms := hostComms(t, n)
	ctx := context.Background()
	t.Run("ring through a Group, Recv recorded first", func(t *testing.T) {
		out := make([][]int32, n)
		errs := eachRank(comms, func(c *Comm) error {
			r := c.Rank()
			send := make([]int32, count)
			for i := range send {
				send[i] = val(r, (r+1)%n, i)
			}
			out[r] = poisoned(count)
			g := NewGroup()
			require.NoError(t, g.Recv(c, ptr32(out[r]), count, Int32, (r+n-1)%n, 0))
			require.NoError(t, g.Send(c, ptr32(send), count, Int32, (r+1)%n, 0))
			err := g.Run(ctx)
			runtime.KeepAlive(send)
			return err
		})
		for r := range comms {
			require.NoError(t, errs[r])
			for i, v := range out[r] {
				require.Equal(t, val((r+n-1)%n, r, i), v, "rank %d element %d", r, i)
			}
		}
	})
	t.Run("AllToAll", func(t *testing.T) {
		out := make([][]int32, n)
		errs := eachRank(comms, func(c *Comm) error {
			r := c.Rank()
			send := make([]int32, n*count)
			for d := 0; d < n; d++ {
				for i := 0; i < count; i++ {
					send[d*count+i] = val(r, d, i)
				}
			}
			out[r] = poisoned(n*count + 16)
			err := c.AllToAll(ctx, ptr32(send), ptr32(out[r]), count, Int32, 0)
			runtime.KeepAlive(send)
			return err
		})
		for r := range comms {
			require.NoError(t, errs[r])
			for s := 0; s < n; s++ {
				for i := 0; i < count; i++ {
					require.Equal(t, val(s, r, i), out[r][s*count+i], "rank %d from %d element %d", r, s, i)
				}
			}
			for _, v := range out[r][n*count:] {
				require.Equal(t, poison32, v, "rank %d: written past the end", r)
			}
		}
	})
	t.Run("AllToAllv with zeros", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		cnt := make([][]int, n) // cnt[s][d]
		for s := range cnt {
			cnt[s] = make([]int, n)
			for d := range cnt[s] {
				if rng.IntN(3) > 0 {
					cnt[s][d] = rng.IntN(2000)
				}
			}
		}
		cnt[0][1] = 0
		out := make([][]int32, n)
		rdispl := make([][]int, n)
		errs := eachRank(comms, func(c *Comm) error {
			r := c.Rank()
			sc, sd, rc, rd := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
			var send []int32
			total := 0
			for p := 0; p < n; p++ {
				sc[p], sd[p] = cnt[r][p], len(send)
				for i := 0; i < cnt[r][p]; i++ {
					send = append(send, val(r, p, i))
				}
				// Receive blocks in reverse order, with a gap of 3.
				q := n - 1 - p
				rc[q], rd[q] = cnt[q][r], total
				total += cnt[q][r] + 3
			}
			out[r], rdispl[r] = poisoned(total), rd
			err := c.AllToAllv(ctx, ptr32(send), sc, sd, ptr32(out[r]), rc, rd, Int32, 0)
			runtime.KeepAlive(send)
			return err
		})
		for r := range comms {
			require.NoError(t, errs[r])
			for s := 0; s < n; s++ {
				blk := out[r][rdispl[r][s]:]
				for i := 0; i < cnt[s][r]; i++ {
					require.Equal(t, val(s, r, i), blk[i], "rank %d from %d element %d", r, s, i)
				}
				for _, v := range blk[cnt[s][r] : cnt[s][r]+3] {
					require.Equal(t, poison32, v, "rank %d: the gap after rank %d's block was written", r, s)
				}
			}
		}
	})
	for _, root := range []int{0, n - 1} {
		t.Run("Gather and Scatter", func(t *testing.T) {
			gathered := poisoned(n * count)
			scattered := make([][]int32, n)
			errs := eachRank(comms, func(c *Comm) error {
				r := c.Rank()
				send := make([]int32, count)
				for i := range send {
					send[i] = val(r, root, i)
				}
				var recv uintptr
				if r == root {
					recv = ptr32(gathered)
				}
				if err := c.Gather(ctx, ptr32(send), recv, count, Int32, root, 0); err != nil {
					return err
				}
				var blocks []int32
				if r == root {
					blocks = make([]int32, n*count)
					for d := 0; d < n; d++ {
						for i := 0; i < count; i++ {
							blocks[d*count+i] = val(root, d, i)
						}
					}
				}
				scattered[r] = poisoned(count)
				err := c.Scatter(ctx, ptr32(blocks), ptr32(scattered[r]), count, Int32, root, 0)
				runtime.KeepAlive(send)
				runtime.KeepAlive(blocks)
				return err
			})
			for r := range comms {
				require.NoError(t, errs[r], "rank %d", r)
				for i, v := range scattered[r] {
					require.Equal(t, val(root, r, i), v, "Scatter: rank %d element %d", r, i)
				}
			}
			for s := 0; s < n; s++ {
				for i := 0; i < count; i++ {
					require.Equal(t, val(s, root, i), gathered[s*count+i], "Gather: from %d element %d", s, i)
				}
			}
		})
	}
}

// A rank that dies (its bootstrap connections close, as when its process
// is killed) while peers wait on it in a Send and a Recv: both survivors
// return an error naming it, within the watchdog's time.
func TestHostPointToPointPeerDeath(t *testing.T) {
	comms := hostComms(t, 3)
	buf := make([]int32, 1<<20) // more than the ring holds: the Send is stuck mid-message
	done := make(chan error, 2)
	go func() { done <- comms[0].Recv(context.Background(), ptr32(buf[:10]), 10, Int32, 2, 0) }()
	go func() { done <- comms[1].Send(context.Background(), ptr32(buf), len(buf), Int32, 2, 0) }()
	time.Sleep(50 * time.Millisecond)
	dropBootstrap(comms[2])
	for i := 0; i < 2; i++ {
		select {
		case err := <-done:
			requireAbortedBy(t, err, 2)
		case <-time.After(10 * time.Second):
			t.Fatal("a survivor still waits 10 s after rank 2 died")
		}
	}
	runtime.KeepAlive(buf)
}

func TestPointToPointBadArguments(t *testing.T) {
	comms := hostComms(t, 2)
	c := comms[0]
	ctx := context.Background()
	buf := []int32{11, 22, 33, 44, 55, 66, 77, 88}
	p := ptr32(buf)
	for _, tc := range []struct {
		name string
		call func() error
		want error
		text string
	}{
		{"peer out of range", func() error { return c.Send(ctx, p, 1, Int32, 2, 0) }, collectives.ErrInvalidPeer, "peer 2 not in [0,2)"},
		{"negative peer", func() error { return c.Recv(ctx, p, 1, Int32, -1, 0) }, collectives.ErrInvalidPeer, "peer -1"},
		{"negative count", func() error { return c.Send(ctx, p, -3, Int32, 1, 0) }, collectives.ErrInvalidCount, "count -3"},
		{"nil buffer", func() error { return c.Recv(ctx, 0, 1, Int32, 1, 0) }, collectives.ErrNilPointer, "nil"},
		{"AllToAllv short counts", func() error { return c.AllToAllv(ctx, p, []int{1}, []int{0, 1}, p, []int{1, 1}, []int{0, 1}, Int32, 0) }, collectives.ErrInvalidArgument, "sendCounts has 1 entries"},
		{"AllToAllv negative displacement", func() error {
			return c.AllToAllv(ctx, p, []int{1, 1}, []int{0, 1}, p, []int{1, 1}, []int{0, -1}, Int32, 0)
		}, collectives.ErrInvalidCount, "recvDispls[1] = -1"},
		{"Gather bad root", func() error { return c.Gather(ctx, p, p, 1, Int32, 5, 0) }, collectives.ErrInvalidRoot, "root 5"},
		{"Scatter nil send at root", func() error { return c.Scatter(ctx, 0, p, 1, Int32, 0, 0) }, collectives.ErrNilPointer, "send buffer is nil at the root"},
		{"AllToAll nil recv", func() error { return c.AllToAll(ctx, p, 0, 1, Int32, 0) }, collectives.ErrNilPointer, "AllToAll"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.text)
		})
	}
	// Nothing was launched: the pair's first messages still pair.
	out := poisoned(4)
	errs := eachRank(comms, func(c *Comm) error {
		if c.Rank() == 0 {
			return c.Send(ctx, p, 4, Int32, 1, 0)
		}
		return c.Recv(ctx, ptr32(out), 4, Int32, 0, 0)
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	assert.Equal(t, buf[:4], out)
	runtime.KeepAlive(buf)
}

// A peer that closes its communicator while this rank waits in a Recv (or
// Send) from it ends the wait at once, naming it, not at the timeout.
func TestPointToPointPeerCloses(t *testing.T) {
	for _, kind := range []string{"recv", "send"} {
		t.Run(kind, func(t *testing.T) {
			comms, err := InitAll(context.Background(), make([]int, 2), Options{Backend: BackendHost, Env: map[string]string{},
				Logger: discardLogger(), Timeout: 60 * time.Second, HeartbeatInterval: testHeartbeat})
			require.NoError(t, err)
			defer comms[0].Close()
			buf := make([]int32, 1<<20) // more than the pair's ring: a Send waits too
			start := time.Now()
			done := make(chan error, 1)
			go func() {
				if kind == "recv" {
					done <- comms[0].Recv(context.Background(), ptr32(buf), len(buf), Int32, 1, 0)
				} else {
					done <- comms[0].Send(context.Background(), ptr32(buf), len(buf), Int32, 1, 0)
				}
			}()
			time.Sleep(50 * time.Millisecond)
			require.NoError(t, comms[1].Close())
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the wait on a closed peer did not end")
			}
			runtime.KeepAlive(buf)
			t.Logf("%s ended %v after the peer closed: %v", kind, time.Since(start)-50*time.Millisecond, err)
			require.ErrorIs(t, err, ErrPeerClosed)
			var pe *PeerError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, 1, pe.Rank)
		})
	}
}
