package host

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/goccl/goccl/collectives"
)

// benchGroups runs every rank's group b.N times on in-process ranks and
// reports the time per group and the rate of bytes per rank.
func benchGroups(b *testing.B, j *job, groups []*collectives.Group, bytes int) {
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for r := range groups {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			gr := j.bes[r].(collectives.GroupRunner)
			for i := 0; i < b.N; i++ {
				if err := gr.RunGroup(context.Background(), groups[r]); err != nil {
					b.Error(err)
					return
				}
			}
		}(r)
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*1e6, "us/op")
}

// benchRankGroups runs, for 2 and 4 ranks and each of benchSizes, the
// group build makes for each rank r of n from its own send and receive
// buffers of the size.
func benchRankGroups(b *testing.B, build func(n, r int, send, recv []byte) *collectives.Group) {
	for _, n := range []int{2, 4} {
		for _, sz := range benchSizes {
			b.Run(fmt.Sprintf("ranks=%d/%s", n, sz.name), func(b *testing.B) {
				j := newJob(b, n, Config{})
				groups := make([]*collectives.Group, n)
				var bufs [][]byte
				for r := range groups {
					send, recv := alloc(sz.bytes), alloc(sz.bytes)
					bufs = append(bufs, send, recv)
					groups[r] = build(n, r, send, recv)
				}
				benchGroups(b, j, groups, sz.bytes)
				runtime.KeepAlive(bufs)
			})
		}
	}
}

// BenchmarkSendRecvRing: every rank sends to the next and receives from
// the previous in one group (nccl-tests' sendrecv).
func BenchmarkSendRecvRing(b *testing.B) {
	benchRankGroups(b, func(n, r int, send, recv []byte) *collectives.Group {
		return &collectives.Group{P2P: []collectives.P2P{
			{Kind: collectives.SendOp, Peer: (r + 1) % n, Buf: addr(send), Count: len(send), Type: collectives.Uint8},
			{Kind: collectives.RecvOp, Peer: (r + n - 1) % n, Buf: addr(recv), Count: len(recv), Type: collectives.Uint8},
		}}
	})
}

// BenchmarkAllToAll: the group AllToAll is, blocks of bytes/n per peer.
func BenchmarkAllToAll(b *testing.B) {
	benchRankGroups(b, func(n, r int, send, recv []byte) *collectives.Group {
		blk := len(send) / n
		g := &collectives.Group{Kind: collectives.AllToAllGroup}
		for p := 0; p < n; p++ {
			g.P2P = append(g.P2P,
				collectives.P2P{Kind: collectives.SendOp, Peer: p, Buf: addr(send[p*blk:]), Count: blk, Type: collectives.Uint8},
				collectives.P2P{Kind: collectives.RecvOp, Peer: p, Buf: addr(recv[p*blk:]), Count: blk, Type: collectives.Uint8})
		}
		return g
	})
}
