package gpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// eagerPath reads from rank's channel 0 record about peer the path its
// last Recv from peer took (kernels/p2p.cu kRecRPath: 0 staging, 1 zero
// copy, 2 eager).
func (r *rig) eagerPath(t *testing.T, rank, peer int) uint32 {
	sig := cuda.DevicePtr(u64at(r.bes[rank].prm[:], offSignals))
	rec := r.get(t, rank, sig+cuda.DevicePtr(p2pOffset+peer*p2pMaxChannels*p2pRecordBytes), p2pRecordBytes)
	return binary.LittleEndian.Uint32(rec[p2pRecRPath:])
}

// syncOrAbort waits for every rank's stream, aborting every rank when that
// takes longer than limit (a deadlock), so that the test fails instead of
// hanging.
func (r *rig) syncOrAbort(t *testing.T, limit time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for rank, be := range r.bes {
			_ = r.drv.StreamSynchronize(be.ctx, r.streams[rank])
		}
	}()
	select {
	case <-done:
	case <-time.After(limit):
		for _, be := range r.bes {
			be.Abort(errors.New("test: the streams did not finish"))
		}
		<-done
		t.Fatalf("the ranks' streams did not finish within %v: the Sends waited for their Recvs", limit)
	}
	for rank := range r.bes {
		require.NoError(t, r.bes[rank].kernelError(), "rank %d", rank)
	}
}

// TestGPUP2PEager runs, on 2 and 3 ranks sharing GPU 0, Sends outside a
// group that each rank enqueues before its Recvs, one call each (every rank
// to the next, and at 3 ranks to both neighbours), of random bytes below
// and at the eager limit and several queued before any Recv: every Send
// completes without its Recv, so the streams finish; every received byte
// against the sender's input, the poison around it untouched, and each
// Recv's path eager.
func TestGPUP2PEager(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			const capBytes = 1 << 20
			r := newRigOn(t, n, capBytes, func(int) int { return 0 })
			limit := int(eagerLimit(r.bes[0].p2p.channels, uint64(r.bes[0].tune.slot)))
			require.Equal(t, 256<<10, limit, "the documented limit on %d channels", r.bes[0].p2p.channels)
			rng := rand.New(rand.NewPCG(41, uint64(n)))
			peers := [][]int{{1}}
			if n == 3 {
				peers = [][]int{{1}, {1, 2}} // the next rank; then both neighbours
			}
			for _, shift := range peers {
				for _, sizes := range [][]int{{0}, {1}, {4095}, {limit - 16}, {limit}, {limit / 4, 7, limit / 4, 1000}} {
					what := fmt.Sprintf("peers +%v sizes %v", shift, sizes)
					r.eagerRound(t, rng, shift, sizes, what)
				}
			}
		})
	}
}

// eagerRound: every rank Sends sizes[k] bytes to rank+s for each s of
// shifts (one call each, in that order), then Recvs from rank-s for each
// s into consecutive places of its receive buffer.
func (r *rig) eagerRound(t *testing.T, rng *rand.Rand, shifts, sizes []int, what string) {
	t.Helper()
	n := len(r.bes)
	total := 0
	for _, b := range sizes {
		total += b + 16
	}
	total *= len(shifts)
	ins := make([][]byte, n)
	for rank, be := range r.bes {
		ins[rank] = make([]byte, total)
		for i := range ins[rank] {
			ins[rank][i] = byte(rng.Uint32())
		}
		r.put(t, rank, r.send[rank], ins[rank])
		require.NoError(t, r.drv.MemsetD8Async(be.ctx, r.recv[rank], 0xA5, r.cap+guard, r.streams[rank]))
	}
	// at is where op (shift i, size k) lies in both buffers.
	at := func(i, k int) int {
		o := 0
		for j := 0; j < i*len(sizes)+k; j++ {
			o += sizes[j%len(sizes)] + 16
		}
		return o
	}
	one := func(rank int, op collectives.P2P) {
		op.Type, op.Stream = collectives.Uint8, uintptr(r.streams[rank])
		require.NoError(t, r.bes[rank].RunGroup(context.Background(), &collectives.Group{P2P: []collectives.P2P{op}}), "%s: rank %d", what, rank)
	}
	for rank := range r.bes {
		for i, s := range shifts {
			for k, b := range sizes {
				one(rank, collectives.P2P{Kind: collectives.SendOp, Peer: (rank + s) % n, Buf: uintptr(r.send[rank]) + uintptr(at(i, k)), Count: b})
			}
		}
		for i, s := range shifts {
			for k, b := range sizes {
				one(rank, collectives.P2P{Kind: collectives.RecvOp, Peer: (rank + n - s) % n, Buf: uintptr(r.recv[rank]) + uintptr(at(i, k)), Count: b})
			}
		}
	}
	r.syncOrAbort(t, time.Minute)
	for rank := range r.bes {
		want := bytes.Repeat([]byte{0xA5}, int(r.cap)+guard)
		for i, s := range shifts {
			from := (rank + n - s) % n
			for k, b := range sizes {
				o := at(i, k)
				copy(want[o:o+b], ins[from][o:o+b])
			}
		}
		got := r.get(t, rank, r.recv[rank], int(r.cap)+guard)
		if !bytes.Equal(want, got) {
			i := 0
			for want[i] == got[i] {
				i++
			}
			t.Fatalf("%s: rank %d: byte %d of the receive buffer is %#02x, want %#02x", what, rank, i, got[i], want[i])
		}
		for _, s := range shifts {
			require.Equal(t, uint32(p2pPathEager), r.eagerPath(t, rank, (rank+n-s)%n), "%s: rank %d: the last Recv from rank %d's path",
				what, rank, (rank+n-s)%n)
		}
	}
}

// TestGPUP2PTimeout: with a timeout, a Recv from a rank that never Sends,
// and a Send above the eager limit to a rank that never Recvs, end at
// the timeout on the GPU with an error that wraps collectives.ErrTimeout
// and names the peer and the op, instead of waiting forever.
func TestGPUP2PTimeout(t *testing.T) {
	for _, send := range []bool{false, true} {
		t.Run(map[bool]string{false: "Recv", true: "Send"}[send], func(t *testing.T) {
			r := newRigWith(t, 2, 1<<20, func(int) Config { return Config{Device: 0, Transport: "uva", Timeout: 200 * time.Millisecond} })
			op := collectives.P2P{Kind: collectives.RecvOp, Peer: 1, Buf: uintptr(r.recv[0]), Count: 100, Type: collectives.Uint8,
				Stream: uintptr(r.streams[0])}
			if send {
				op = collectives.P2P{Kind: collectives.SendOp, Peer: 1, Buf: uintptr(r.send[0]), Count: 1 << 20, Type: collectives.Uint8,
					Stream: uintptr(r.streams[0])}
			}
			require.NoError(t, r.bes[0].RunGroup(context.Background(), &collectives.Group{P2P: []collectives.P2P{op}}))
			done := make(chan error, 1)
			go func() { done <- r.drv.StreamSynchronize(r.bes[0].ctx, r.streams[0]) }()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(time.Minute):
				r.bes[0].Abort(errors.New("test: the wait did not end"))
				<-done
				t.Fatal("the point-to-point wait did not end at its timeout")
			}
			err := r.bes[0].kernelError()
			require.ErrorIs(t, err, collectives.ErrTimeout)
			var pe *collectives.PeerError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, 1, pe.Rank)
			want := "rank 0's Recv from rank 1 (its Recv number 1 from it)"
			if send {
				want = "rank 0's Send to rank 1 (its Send number 1 to it)"
			}
			require.ErrorContains(t, err, want)
		})
	}
}

// TestGPUP2PEagerMismatch: an eager Send whose Recv has another count
// completes; the receiver reports both counts at once, and the sender
// reports them as its Send's from its next launch that waits on the
// receiver (here a Recv from it, which it never sends).
func TestGPUP2PEagerMismatch(t *testing.T) {
	r := newRigOn(t, 2, 1<<20, func(int) int { return 0 })
	one := func(rank int, op collectives.P2P) {
		op.Type, op.Stream = collectives.Uint8, uintptr(r.streams[rank])
		require.NoError(t, r.bes[rank].RunGroup(context.Background(), &collectives.Group{P2P: []collectives.P2P{op}}), "rank %d", rank)
	}
	wait := func(rank int) {
		done := make(chan error, 1)
		go func() { done <- r.drv.StreamSynchronize(r.bes[rank].ctx, r.streams[rank]) }()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			r.bes[rank].Abort(errors.New("test: the stream did not finish"))
			<-done
			t.Fatalf("rank %d's stream did not finish", rank)
		}
	}
	one(0, collectives.P2P{Kind: collectives.SendOp, Peer: 1, Buf: uintptr(r.send[0]), Count: 1000})
	wait(0)
	require.NoError(t, r.bes[0].kernelError(), "the eager Send completed")
	one(1, collectives.P2P{Kind: collectives.RecvOp, Peer: 0, Buf: uintptr(r.recv[1]), Count: 1004})
	wait(1)
	err := r.bes[1].kernelError()
	require.ErrorIs(t, err, collectives.ErrInvalidCount)
	require.ErrorContains(t, err, "rank 1's Recv from rank 0 has 1004 bytes, rank 0's matching Send to rank 1 has 1000")
	one(0, collectives.P2P{Kind: collectives.RecvOp, Peer: 1, Buf: uintptr(r.recv[0]), Count: 10})
	wait(0)
	err = r.bes[0].kernelError()
	require.ErrorIs(t, err, collectives.ErrInvalidCount)
	require.ErrorContains(t, err, "rank 0's Send to rank 1 has 1000 bytes, rank 1's matching Recv from rank 0 has 1004")
}
