package host

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internode/ucx"
)

// needUCX skips a test across nodes when libucp is absent, naming the
// package that has it.
func needUCX(t *testing.T) {
	t.Helper()
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp not available (install libucx0): %v", err)
	}
	// TCP between the fake nodes, as between machines without RDMA.
	t.Setenv("UCX_TLS", "tcp,self")
}

// TestAcrossNodes runs the collective matrix on in-process ranks placed
// on fake nodes: equal nodes (hierarchical paths), unequal ones (flat
// paths), and one rank per node (every rank its own rail).
func TestAcrossNodes(t *testing.T) {
	needUCX(t)
	layouts := []string{"aabb", "aabbcc", "abb", "ab", "abab"}
	counts := []int{0, 1, 7, 1031}
	if testing.Short() {
		layouts = []string{"aabb", "abb"}
	}
	for _, l := range layouts {
		t.Run(l, func(t *testing.T) {
			nodes := strings.Split(l, "")
			n := len(nodes)
			j := newJob(t, n, Config{StagingBytes: 4096, Nodes: nodes})
			for _, count := range counts {
				for _, c := range calls(n, count, collectives.AllDataTypes(), collectives.AllOps()) {
					require.NoError(t, j.verify(c), "layout %s", l)
				}
			}
		})
	}
}

// TestAcrossNodesLarge crosses UCX's rendezvous sizes and the node
// backend's rounds.
func TestAcrossNodesLarge(t *testing.T) {
	needUCX(t)
	if testing.Short() {
		t.Skip("large counts take seconds")
	}
	nodes := []string{"a", "a", "b", "b"}
	j := newJob(t, len(nodes), Config{Nodes: nodes})
	dts := []collectives.DataType{collectives.Int32, collectives.Float64, collectives.BFloat16}
	for _, c := range calls(len(nodes), 1<<18+3, dts, []collectives.Op{collectives.Sum, collectives.Avg}) {
		require.NoError(t, j.verify(c), fmt.Sprint(c))
	}
}

// TestAcrossNodesDoesNotAllocate: once warm, calls across nodes allocate
// nothing per call, on the hierarchical paths and on the flat one.
func TestAcrossNodesDoesNotAllocate(t *testing.T) {
	needUCX(t)
	nodes := []string{"a", "a", "b", "b"}
	n := len(nodes)
	j := newJob(t, n, Config{Nodes: nodes})
	const count = 10000
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = alloc(n * count * 8)
	}
	type call struct {
		coll collectives.Collective
		op   collectives.Op
	}
	for _, c := range []call{
		{collectives.AllReduce, collectives.Sum}, {collectives.AllReduce, collectives.Avg},
		{collectives.ReduceScatter, collectives.Max}, {collectives.AllGather, collectives.Sum},
		{collectives.Broadcast, collectives.Sum}, {collectives.Reduce, collectives.Sum},
	} {
		const iters = 100
		run := func() {
			var wg sync.WaitGroup
			for r := 0; r < n; r++ {
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					b := bufs[r]
					a := collectives.Args{Coll: c.coll, Send: addr(b), Recv: addr(b[len(b)/2:]), Count: count / n, Type: collectives.Int32, Op: c.op, Root: 1}
					for i := 0; i < iters; i++ {
						if err := j.bes[r].Run(context.Background(), &a); err != nil {
							t.Error(err)
							return
						}
					}
				}(r)
			}
			wg.Wait()
		}
		run() // warm up: scratch grows once
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		run()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(bufs)
		assert.Less(t, float64(after.Mallocs-before.Mallocs)/(iters*float64(n)), 0.2, "%s %s: allocations per call", c.coll, c.op)
	}
}

// TestAcrossNodesSendRecvSizeMismatch: a Recv larger or smaller than its
// Send on another node fails the receiver's group with ErrInvalidCount
// naming both sizes; the sender's completes, and the next exchange on the
// pair works.
func TestAcrossNodesSendRecvSizeMismatch(t *testing.T) {
	needUCX(t)
	nodes := []string{"a", "a", "b", "b"}
	j := newJob(t, len(nodes), Config{Nodes: nodes})
	for _, recvCount := range []int{12, 8} {
		src, dst := alloc(64), alloc(64)
		for i := range src {
			src[i] = byte(i + 1)
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for k, r := range []int{0, 2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := &collectives.Group{P2P: []collectives.P2P{{Kind: collectives.SendOp, Peer: 2, Buf: addr(src), Count: 10, Type: collectives.Int32}}}
				if r == 2 {
					g.P2P[0] = collectives.P2P{Kind: collectives.RecvOp, Peer: 0, Buf: addr(dst), Count: recvCount, Type: collectives.Int32}
				}
				errs[k] = j.bes[r].(collectives.GroupRunner).RunGroup(context.Background(), g)
			}()
		}
		wg.Wait()
		require.NoError(t, errs[0], "the sender")
		require.ErrorIs(t, errs[1], collectives.ErrInvalidCount, "the receiver, of %d", recvCount)
		assert.ErrorContains(t, errs[1], "rank 0 sent")
		assert.ErrorContains(t, errs[1], fmt.Sprintf("expected %d", recvCount*4))

		// The pair is still usable.
		clear(dst)
		wg.Add(2)
		for k, r := range []int{0, 2} {
			go func() {
				defer wg.Done()
				op := collectives.P2P{Kind: collectives.SendOp, Peer: 2, Buf: addr(src), Count: 10, Type: collectives.Int32}
				if r == 2 {
					op = collectives.P2P{Kind: collectives.RecvOp, Peer: 0, Buf: addr(dst), Count: 10, Type: collectives.Int32}
				}
				errs[k] = j.bes[r].(collectives.GroupRunner).RunGroup(context.Background(), &collectives.Group{P2P: []collectives.P2P{op}})
			}()
		}
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		assert.Equal(t, src[:40], dst[:40])
	}
}

// TestAcrossNodesCountMismatch: nodes that disagree on a collective's
// count fail it on every rank (ErrInvalidArgument, a peer named) instead
// of computing on part of a message.
func TestAcrossNodesCountMismatch(t *testing.T) {
	needUCX(t)
	nodes := []string{"a", "a", "b", "b"}
	n := len(nodes)
	j := newJob(t, n, Config{Nodes: nodes})
	args := make([]collectives.Args, n)
	bufs := make([][]byte, n)
	for r := range args {
		count := 10
		if nodes[r] == "b" {
			count = 12
		}
		bufs[r] = alloc(64)
		args[r] = collectives.Args{Coll: collectives.AllReduce, Send: addr(bufs[r]), Recv: addr(bufs[r]), Count: count, Type: collectives.Int32, Op: collectives.Sum}
	}
	errs := j.run(context.Background(), args)
	runtime.KeepAlive(bufs)
	// The ranks that find the mismatch say so; a rank may instead hear
	// first that a peer aborted on it, which names that peer.
	found := 0
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		var pe *collectives.PeerError
		assert.ErrorAs(t, err, &pe, "rank %d", r)
		if errors.Is(err, collectives.ErrInvalidArgument) {
			found++
		} else {
			assert.ErrorIs(t, err, collectives.ErrAborted, "rank %d", r)
		}
	}
	assert.NotZero(t, found, "no rank reported the mismatch")
}

// TestAcrossNodesPath: the backend names the path each call took across
// nodes: hierarchical on equal nodes, flat on unequal ones or for an
// average, none for Broadcast; shared memory and UCX always.
func TestAcrossNodesPath(t *testing.T) {
	needUCX(t)
	cases := []struct {
		layout string
		coll   collectives.Collective
		op     collectives.Op
		want   collectives.Algorithm
	}{
		{"aabb", collectives.AllReduce, collectives.Sum, algoHier},
		{"aabb", collectives.AllReduce, collectives.Avg, algoFlat},
		{"abb", collectives.AllReduce, collectives.Sum, algoFlat},
		{"aabb", collectives.AllGather, collectives.Sum, algoHier},
		{"aabb", collectives.Broadcast, collectives.Sum, ""},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s %s %s", tc.layout, tc.coll, tc.op), func(t *testing.T) {
			nodes := strings.Split(tc.layout, "")
			n := len(nodes)
			j := newJob(t, n, Config{StagingBytes: 4096, Nodes: nodes})
			const count = 64
			args := make([]collectives.Args, n)
			bufs := make([][]byte, 0, 2*n)
			for r := range args {
				send, recv := alloc(count*4), alloc(count*4*n)
				bufs = append(bufs, send, recv)
				args[r] = collectives.Args{Coll: tc.coll, Send: addr(send), Recv: addr(recv), Count: count, Type: collectives.Float32, Op: tc.op}
			}
			errs := j.run(context.Background(), args)
			runtime.KeepAlive(bufs)
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
				p := j.bes[r].(collectives.PathTeller).LastPath()
				assert.Equal(t, collectives.Path{Algo: tc.want, Transport: multiTransport}, p, "rank %d", r)
			}
		})
	}
}
