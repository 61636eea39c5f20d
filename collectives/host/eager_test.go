package host

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// eagerLimits are the largest eager Sends at the default staging, as
// docs/guide.md gives them: four slots of the pair's ring (the staging
// over the ranks on 64-byte lines, in four slots), less a 64-byte header
// each.
var eagerLimits = map[int]int{2: 1048320, 3: 698624, 4: 524032, 8: 261888}

func TestEagerLimit(t *testing.T) {
	for n, want := range eagerLimits {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			j := newJob(t, n, Config{})
			for r := range j.bes {
				assert.Equal(t, want, j.bes[r].(*backend).p2p.eagerBytes, "rank %d", r)
			}
		})
	}
}

// sendFirst lists every rank's Sends before its Recvs.
func (p *plan) sendFirst() {
	for _, o := range p.order {
		slices.SortStableFunc(o, func(a, b opRef) int { return int(a.kind) - int(b.kind) })
	}
}

// runEach runs every rank's operations one by one, each a group of its
// own, as plain Send and Recv calls do.
func (j *job) runEach(ctx context.Context, bufs []*rankBufs) []error {
	return j.each(func(r int) error {
		for i := range bufs[r].group.P2P {
			g := &collectives.Group{P2P: bufs[r].group.P2P[i : i+1]}
			if err := j.bes[r].(collectives.GroupRunner).RunGroup(ctx, g); err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
		}
		return nil
	})
}

// A Send that fits the ring returns before its Recv: ranks that all Send
// to their ring neighbours, outside a group, before they Recv go through.
func TestEagerSendBeforeRecv(t *testing.T) {
	require.Less(t, int(collectives.SendOp), int(collectives.RecvOp))
	for _, n := range []int{2, 3, 4, 8} {
		limit := eagerLimits[n]
		for _, tc := range []struct {
			name  string
			count int
			dt    collectives.DataType
			both  bool // also to the other neighbour
			self  bool // also to itself
		}{
			{"one element", 1, collectives.Float32, false, false},
			{"a prime", 4093, collectives.Float64, true, false},
			{"a few slots", limit / 3, collectives.Int8, false, false},
			{"the limit", limit, collectives.Int8, false, false},
			{"the limit in floats", limit / 4, collectives.Float32, false, false},
			{"nothing", 0, collectives.Int32, true, false},
			{"to itself too", 1000, collectives.Float16, false, true},
		} {
			t.Run(fmt.Sprintf("%d ranks/%s", n, tc.name), func(t *testing.T) {
				j := newJob(t, n, Config{Timeout: time.Minute})
				p := newPlan(n)
				for r := 0; r < n; r++ {
					p.add(r, (r+1)%n, tc.count, tc.dt)
					if tc.both {
						p.add(r, (r+n-1)%n, tc.count, tc.dt)
					}
					if tc.self {
						p.add(r, r, tc.count, tc.dt)
					}
				}
				p.sendFirst()
				// Twice: the second round finds the rings as the first
				// left them.
				for it := 0; it < 2; it++ {
					bufs := make([]*rankBufs, n)
					for r := range bufs {
						bufs[r] = p.buffers(r)
					}
					for r, err := range j.runEach(context.Background(), bufs) {
						require.NoError(t, err, "rank %d, round %d", r, it)
					}
					for r := range bufs {
						require.NoError(t, p.check(r, bufs[r]), "round %d", it)
					}
					runtime.KeepAlive(bufs)
				}
			})
		}
	}
}

// A Send larger than the ring waits for its Recv, as in NCCL past its
// buffers; where NCCL hangs, the wait ends at the timeout with an error
// naming the peer.
func TestRendezvousSendBeforeRecvTimesOut(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			j := newJob(t, n, Config{Timeout: 500 * time.Millisecond})
			p := newPlan(n)
			for r := 0; r < n; r++ {
				p.add(r, (r+1)%n, eagerLimits[n]+1, collectives.Int8)
			}
			p.sendFirst()
			bufs := make([]*rankBufs, n)
			for r := range bufs {
				bufs[r] = p.buffers(r)
			}
			errs := j.runEach(context.Background(), bufs)
			runtime.KeepAlive(bufs)
			timedOut := 0
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				// The first to time out aborts the communicator; the others
				// may fail with its error instead of their own.
				require.True(t, errors.Is(err, collectives.ErrTimeout) || errors.Is(err, collectives.ErrAborted), "rank %d: %v", r, err)
				if !strings.Contains(err.Error(), fmt.Sprintf("host: rank %d waited", r)) {
					continue
				}
				timedOut++
				var pe *collectives.PeerError
				require.ErrorAs(t, err, &pe, "rank %d", r)
				assert.Equal(t, (r+1)%n, pe.Rank, "rank %d", r)
				require.ErrorIs(t, err, collectives.ErrTimeout, "rank %d", r)
				assert.Contains(t, err.Error(), fmt.Sprintf("Send to rank %d of %d int8", (r+1)%n, eagerLimits[n]+1))
			}
			assert.Positive(t, timedOut)
		})
	}
}

// The receiver of an eager Send of the wrong size fails at once; the
// sender, which returned already, fails in its next group that ends after
// the rejection, naming both counts; that group's own calls still run.
func TestEagerSizeMismatch(t *testing.T) {
	for _, tc := range []struct {
		name       string
		send, recv int
	}{
		{"receiver expects less", 300, 200},
		{"receiver expects more", 200, 300},
		{"zero against some", 0, 10},
		{"some against zero", 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, 2, Config{StagingBytes: 8 << 10, Timeout: time.Minute})
			sbuf, rbuf := alloc(4*tc.send+4), alloc(4*tc.recv+4)
			ctx := context.Background()
			send := &collectives.Group{P2P: []collectives.P2P{{Kind: collectives.SendOp, Peer: 1, Buf: addr(sbuf), Count: tc.send, Type: collectives.Float32}}}
			require.NoError(t, j.bes[0].(collectives.GroupRunner).RunGroup(ctx, send), "the eager Send returns alone")
			recv := &collectives.Group{P2P: []collectives.P2P{{Kind: collectives.RecvOp, Peer: 0, Buf: addr(rbuf), Count: tc.recv, Type: collectives.Float32}}}
			err := j.bes[1].(collectives.GroupRunner).RunGroup(ctx, recv)
			want := fmt.Sprintf("rank 0 sends %d float (%d bytes), rank 1 receives %d float (%d bytes), message 1 of the pair",
				tc.send, 4*tc.send, tc.recv, 4*tc.recv)
			require.ErrorIs(t, err, collectives.ErrInvalidCount)
			assert.Contains(t, err.Error(), want)
			runtime.KeepAlive(sbuf)
			runtime.KeepAlive(rbuf)
			// Rank 1's reply reaches rank 0 after the rejection: rank 0's
			// Recv carries the mismatch, and the reply arrives whole.
			p := newPlan(2)
			p.add(1, 0, 77, collectives.BFloat16)
			bufs := []*rankBufs{p.buffers(0), p.buffers(1)}
			errs := j.runEach(ctx, bufs)
			require.NoError(t, errs[1])
			require.ErrorIs(t, errs[0], collectives.ErrInvalidCount)
			assert.Contains(t, errs[0].Error(), "rank 0: Send to rank 1: "+want)
			require.NoError(t, p.check(0, bufs[0]))
			runtime.KeepAlive(bufs)
			// Reported once; the pair stays in step.
			p = newPlan(2)
			p.add(0, 1, 5, collectives.Int8)
			p.add(1, 0, 3, collectives.Float64)
			require.NoError(t, j.execute(p))
		})
	}
}

// A Send waiting for room in a full ring ends when its receiver closes,
// naming it; an eager message already in the ring still reaches a
// receiver whose sender has closed since.
func TestEagerPeerCloses(t *testing.T) {
	ctx := context.Background()
	t.Run("a full ring", func(t *testing.T) {
		j := newJob(t, 2, Config{Timeout: time.Minute})
		fill := alloc(eagerLimits[2])
		one := alloc(1)
		g := &collectives.Group{P2P: []collectives.P2P{
			{Kind: collectives.SendOp, Peer: 1, Buf: addr(fill), Count: len(fill), Type: collectives.Int8},
			{Kind: collectives.SendOp, Peer: 1, Buf: addr(one), Count: 1, Type: collectives.Int8},
		}}
		done := make(chan error, 1)
		go func() { done <- j.bes[0].(collectives.GroupRunner).RunGroup(ctx, g) }()
		time.Sleep(3 * napPhase)
		require.NoError(t, j.bes[1].Close())
		// As the communicator's bootstrap tells it, in a real job.
		j.bes[0].(collectives.PeerCloser).PeerClosed(1)
		select {
		case err := <-done:
			require.ErrorIs(t, err, collectives.ErrPeerClosed)
			var pe *collectives.PeerError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, 1, pe.Rank)
			assert.Contains(t, err.Error(), "Send of 1 int8 (message 2 of the pair")
		case <-time.After(30 * time.Second):
			t.Fatal("the Send did not end")
		}
		runtime.KeepAlive(fill)
		runtime.KeepAlive(one)
	})
	t.Run("the sender closed", func(t *testing.T) {
		j := newJob(t, 2, Config{Timeout: time.Minute})
		p := newPlan(2)
		p.add(0, 1, 4095, collectives.Float32)
		bufs := []*rankBufs{p.buffers(0), p.buffers(1)}
		require.NoError(t, j.bes[0].(collectives.GroupRunner).RunGroup(ctx, &bufs[0].group))
		require.NoError(t, j.bes[0].Close())
		require.NoError(t, j.bes[1].(collectives.GroupRunner).RunGroup(ctx, &bufs[1].group))
		require.NoError(t, p.check(1, bufs[1]))
		runtime.KeepAlive(bufs)
	})
}
